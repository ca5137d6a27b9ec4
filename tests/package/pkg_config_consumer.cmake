# SPDX-License-Identifier: BSD-3-Clause
# Builds tests/package/consumer/main.cpp the way README's "Plain compiler /
# pkg-config" section says, against an installed dsp, and runs it on 2 ranks:
#   PKG_CONFIG_PATH=<prefix>/<libdir>/pkgconfig
#   mpicxx -O2 main.cpp $(pkg-config --cflags --libs dsp) -o consumer
#   mpiexec -n 2 ./consumer
# then, with COMPONENTS (comma-separated: dsp-compiled, dsp-hdf5), the same
# source again with those components' files, in one consumer:
#   mpicxx -O2 [-DDSP_CONSUMER_HDF5] main.cpp $(pkg-config --cflags --libs dsp-compiled dsp-hdf5) -o consumer_components
#   mpiexec -n 2 ./consumer_components consumer.h5
# checking that dsp-compiled's engine is the one it ran (and dsp.pc's is not),
# and that dsp-hdf5's save and load round trip.
# cmake -DPKG_CONFIG=... -DPC_PATH=... -DMPICXX=... -DMPIEXEC=... -DSOURCE=...
#       -DBINARY=... -DVERSION=... [-DCOMPONENTS=...] [-DMPI_CXX_BACKEND=... -DLAUNCHER=...]
#       -P pkg_config_consumer.cmake
# With a CUDA-enabled Kokkos, dsp.pc's flags are nvcc's: MPI_CXX_BACKEND (the
# build's compiler, nvcc_wrapper) is then the compiler mpicxx runs (OMPI_CXX,
# MPICH_CXX), and LAUNCHER (dsp_cuda_launcher) runs the consumer only where
# the NVIDIA driver loads and sees a GPU; else this prints "SKIPPED: ..."
# and the test is reported Skipped.
cmake_policy(VERSION 3.20)  # a script has no project: IN_LIST and the rest of 3.20's behaviour
foreach(v PKG_CONFIG PC_PATH MPICXX MPIEXEC SOURCE BINARY VERSION)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "pkg_config_consumer.cmake: -D${v}=... is required")
  endif()
endforeach()

function(run what)
  string(REPLACE ";" " " line "${ARGN}")
  message(STATUS "${what}: ${line}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(rc EQUAL 77 AND LAUNCHER AND what STREQUAL "run")
    set(skipped ON PARENT_SCOPE)  # the launcher said why
    return()
  endif()
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc})")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

if(MPI_CXX_BACKEND)
  set(ENV{OMPI_CXX} "${MPI_CXX_BACKEND}")   # Open MPI's mpicxx
  set(ENV{MPICH_CXX} "${MPI_CXX_BACKEND}")  # MPICH's
  message(STATUS "mpicxx compiles with ${MPI_CXX_BACKEND}")
endif()

set(ENV{PKG_CONFIG_PATH} "${PC_PATH}")
message(STATUS "PKG_CONFIG_PATH=${PC_PATH}")
run("pkg-config version" ${PKG_CONFIG} --modversion dsp)
string(STRIP "${output}" found)
if(NOT found STREQUAL VERSION)
  message(FATAL_ERROR "dsp.pc says version '${found}', the project is ${VERSION}")
endif()
run("pkg-config" ${PKG_CONFIG} --cflags --libs dsp)
separate_arguments(flags UNIX_COMMAND "${output}")
get_filename_component(dir "${BINARY}" DIRECTORY)
file(MAKE_DIRECTORY "${dir}")
run("compile" ${MPICXX} -O2 ${SOURCE} ${flags} -o ${BINARY})
set(skipped OFF)
run("run" ${LAUNCHER} ${MPIEXEC} -n 2 ${BINARY})
if(skipped)
  message(STATUS "built; its run was skipped (see SKIPPED above)")
elseif(NOT output MATCHES "engine: header-only")
  message(FATAL_ERROR "the consumer built with dsp.pc alone did not run the header-only engine")
endif()

if(NOT COMPONENTS)
  return()
endif()
string(REPLACE "," ";" COMPONENTS "${COMPONENTS}")
foreach(c IN LISTS COMPONENTS)
  run("pkg-config version of ${c}" ${PKG_CONFIG} --modversion ${c})
  string(STRIP "${output}" found)
  if(NOT found STREQUAL VERSION)
    message(FATAL_ERROR "${c}.pc says version '${found}', the project is ${VERSION}")
  endif()
endforeach()
run("pkg-config" ${PKG_CONFIG} --cflags --libs ${COMPONENTS})
separate_arguments(flags UNIX_COMMAND "${output}")
set(defs "")
set(args "")
if("dsp-hdf5" IN_LIST COMPONENTS)
  set(defs -DDSP_CONSUMER_HDF5)
  set(args "${dir}/consumer.h5")
  file(REMOVE "${dir}/consumer.h5")
endif()
run("compile" ${MPICXX} -O2 ${defs} ${SOURCE} ${flags} -o ${BINARY}_components)
set(skipped OFF)
run("run" ${LAUNCHER} ${MPIEXEC} -n 2 ${BINARY}_components ${args})
if(skipped)
  message(STATUS "built; its run was skipped (see SKIPPED above)")
  return()
endif()
if("dsp-compiled" IN_LIST COMPONENTS AND NOT output MATCHES "engine: dsp::compiled")
  message(FATAL_ERROR "the consumer built with dsp-compiled.pc did not run the engine of dsp::compiled")
endif()
if("dsp-hdf5" IN_LIST COMPONENTS AND NOT output MATCHES "hdf5 save and load, 0 wrong")
  message(FATAL_ERROR "the consumer built with dsp-hdf5.pc did not save and load its tensor")
endif()
