// dsp with the MPI backend: dsp::MpiCommunicator.
#pragma once

#include <dsp/comm/mpi.hpp>
#include <dsp/dsp.hpp>
