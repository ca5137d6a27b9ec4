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
