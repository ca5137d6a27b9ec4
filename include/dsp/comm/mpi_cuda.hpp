// SPDX-License-Identifier: BSD-3-Clause
// dsp: does this MPI move CUDA device memory?
#pragma once

#include <dsp/comm/mpi_communicator.hpp>  // <mpi.h>, without the C++ bindings
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI: MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support
#endif

namespace dsp {

/// True when the MPI library says it accepts CUDA device pointers: built with
/// CUDA support (MPIX_CUDA_AWARE_SUPPORT) and, where the MPI can tell at run
/// time, running with it (MPIX_Query_cuda_support). False when the MPI cannot
/// say. Local, not collective.
inline bool mpi_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

}  // namespace dsp
