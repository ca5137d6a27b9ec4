// SPDX-License-Identifier: BSD-3-Clause
// dsp with the NCCL backend: dsp::BasicNcclCommunicator, and
// dsp::NcclCommunicator (Kokkos::CudaSpace) when Kokkos has CUDA enabled.
#pragma once

#include <dsp/comm/nccl_communicator.hpp>
#include <dsp/dsp.hpp>
