# SPDX-License-Identifier: BSD-3-Clause
# Finds the CUDA runtime and NCCL for dsp's NCCL backend; defines dsp_nccl_FOUND
# and the imported target dsp::NCCL_library. Used at build time and from dspConfig.cmake.
include(FindPackageHandleStandardArgs)
if(NOT CUDAToolkit_FOUND)
  find_package(CUDAToolkit QUIET)
endif()
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib lib64)
find_package_handle_standard_args(dsp_nccl REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR CUDAToolkit_FOUND
                                  NAME_MISMATCHED)
if(dsp_nccl_FOUND AND NOT TARGET dsp::NCCL_library)
  add_library(dsp::NCCL_library UNKNOWN IMPORTED)
  set_target_properties(dsp::NCCL_library PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}"
                        INTERFACE_LINK_LIBRARIES CUDA::cudart)
endif()
