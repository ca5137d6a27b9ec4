# SPDX-License-Identifier: BSD-3-Clause
# Builds tests/package/consumer/main.cpp the way README's "Plain compiler /
# pkg-config" section says, against an installed dsp, and runs it on 2 ranks:
#   PKG_CONFIG_PATH=<prefix>/<libdir>/pkgconfig
#   mpicxx -O2 main.cpp $(pkg-config --cflags --libs dsp) -o consumer
#   mpiexec -n 2 ./consumer
# cmake -DPKG_CONFIG=... -DPC_PATH=... -DMPICXX=... -DMPIEXEC=... -DSOURCE=...
#       -DBINARY=... -DVERSION=... -P pkg_config_consumer.cmake
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
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc})")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

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
run("run" ${MPIEXEC} -n 2 ${BINARY})
