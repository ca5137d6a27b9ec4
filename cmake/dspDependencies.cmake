# SPDX-License-Identifier: BSD-3-Clause
# Finds Kokkos for dsp, both when dsp is built and from dspConfig.cmake.
include(CMakeFindDependencyMacro)
if(NOT TARGET Kokkos::kokkos)
  find_dependency(Kokkos)
endif()
# Debian 12's Kokkos 3.4 (Trilinos packaging) exports Kokkos::kokkos with an
# include directory that does not exist; its Kokkos_INCLUDE_DIRS is right.
if(TARGET Kokkos::kokkos AND Kokkos_INCLUDE_DIRS AND Kokkos_VERSION VERSION_LESS 4)
  get_target_property(_dsp_kokkos_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
  set(_dsp_kokkos_ok ON)
  foreach(_d IN LISTS _dsp_kokkos_inc)
    if(NOT EXISTS "${_d}/Kokkos_Core.hpp")
      set(_dsp_kokkos_ok OFF)
    endif()
  endforeach()
  if(NOT _dsp_kokkos_ok)
    set_target_properties(Kokkos::kokkos PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${Kokkos_INCLUDE_DIRS}")
  endif()
endif()
