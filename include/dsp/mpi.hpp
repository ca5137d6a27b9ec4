// SPDX-License-Identifier: BSD-3-Clause
// dsp with the MPI backend: dsp::MpiCommunicator.
#pragma once

#include <dsp/comm/mpi_communicator.hpp>
#include <dsp/comm/mpi_cuda.hpp>
#include <dsp/dsp.hpp>

#ifdef DSP_COMPILED
namespace dsp::detail {
// The MPI communicator's Port is compiled once, in the dsp::compiled library
// (src/compiled.cpp).
extern template class PortOf<BasicMpiCommunicator<Kokkos::HostSpace>, Kokkos::HostSpace>;
}  // namespace dsp::detail
#endif
