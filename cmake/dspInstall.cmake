# SPDX-License-Identifier: BSD-3-Clause
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DSP_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/dsp")
set(_dsp_targets dsp)
if(DSP_WITH_MPI)
  list(APPEND _dsp_targets dsp_mpi)
endif()
if(DSP_WITH_NCCL)
  list(APPEND _dsp_targets dsp_nccl)
endif()
if(DSP_WITH_HDF5)
  list(APPEND _dsp_targets dsp_hdf5)
endif()
if(DSP_BUILD_COMPILED)
  list(APPEND _dsp_targets dsp_compiled)
endif()
install(TARGETS ${_dsp_targets} EXPORT dspTargets)
install(DIRECTORY include/dsp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT dspTargets NAMESPACE dsp:: DESTINATION ${DSP_CMAKE_DIR})
configure_package_config_file(cmake/dspConfig.cmake.in "${PROJECT_BINARY_DIR}/dspConfig.cmake"
                              INSTALL_DESTINATION ${DSP_CMAKE_DIR})
write_basic_package_version_file("${PROJECT_BINARY_DIR}/dspConfigVersion.cmake"
                                 COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES "${PROJECT_BINARY_DIR}/dspConfig.cmake" "${PROJECT_BINARY_DIR}/dspConfigVersion.cmake"
              cmake/dspDependencies.cmake cmake/dspFindNCCL.cmake
        DESTINATION ${DSP_CMAKE_DIR})

# pkg-config: dsp.pc, for builds without CMake (see cmake/dspPkgConfig.cmake).
# Installed under the libdir, not the datadir, although dsp is header-only: its
# Libs name the Kokkos library of one architecture (and Kokkos's libdir), so the
# file is not architecture independent. The CMake package sits in the libdir too.
include(dspPkgConfig)
dsp_generate_pkg_config("${PROJECT_BINARY_DIR}/dsp.pc")
install(FILES "${PROJECT_BINARY_DIR}/dsp.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The components' pkg-config files, each only where its target is built:
# dsp-hdf5.pc (dsp::hdf5) and dsp-compiled.pc (dsp::compiled). Both Require dsp.
if(DSP_WITH_HDF5)
  dsp_generate_component_pkg_config(
    dsp_hdf5 dsp-hdf5 "dsp::hdf5: checkpoints that reshard on load, through parallel HDF5 (<dsp/hdf5.hpp>)"
    "# The parallel HDF5 that dsp was configured with (its C library, as FindHDF5 found it). Compile
# and link with mpicxx:
#   mpicxx -O2 app.cpp $(pkg-config --cflags --libs dsp-hdf5) -o app"
    "${PROJECT_BINARY_DIR}/dsp-hdf5.pc")
  install(FILES "${PROJECT_BINARY_DIR}/dsp-hdf5.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
if(DSP_BUILD_COMPILED)
  if(DSP_WITH_MPI)
    set(_note "# The library holds the host-memory engine, the MPI communicator's included: compile and
# link with mpicxx:
#   mpicxx -O2 app.cpp $(pkg-config --cflags --libs dsp-compiled) -o app")
  else()
    set(_note "# dsp was configured without MPI: the library holds the host-memory engine of the one-rank
# communicators only.")
  endif()
  dsp_generate_component_pkg_config(
    dsp_compiled dsp-compiled
    "dsp::compiled: dsp's engine for host memory, compiled once (DSP_COMPILED; the headers unchanged)"
    "${_note}" "${PROJECT_BINARY_DIR}/dsp-compiled.pc")
  install(FILES "${PROJECT_BINARY_DIR}/dsp-compiled.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
