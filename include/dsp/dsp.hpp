// dsp: Dynamic Sequence Parallelism as typed layout transitions.
// Umbrella header: layouts, partitions, DistTensor, split / dynamic_switch /
// gather, groups, and the one-rank communicator. MPI: <dsp/mpi.hpp>.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/comm/self.hpp>
#include <dsp/comm/staged.hpp>
#include <dsp/error.hpp>
#include <dsp/groups.hpp>
#include <dsp/layout.hpp>
#include <dsp/partition.hpp>
#include <dsp/primitives.hpp>
#include <dsp/tensor.hpp>
#include <dsp/version.hpp>
