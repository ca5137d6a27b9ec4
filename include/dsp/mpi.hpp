// SPDX-License-Identifier: BSD-3-Clause
// dsp with the MPI backend: dsp::MpiCommunicator.
#pragma once

#include <dsp/comm/mpi.hpp>
#include <dsp/comm/mpi_cuda.hpp>
#include <dsp/dsp.hpp>
