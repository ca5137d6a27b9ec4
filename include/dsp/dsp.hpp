// dsp: Dynamic Sequence Parallelism as typed layout transitions.
// Umbrella header: layouts, partitions, DistTensor, split / dynamic_switch /
// gather, typed pipelines and their cost model, groups, the one-rank and
// counting communicators. MPI: <dsp/mpi.hpp>.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/comm/counting.hpp>
#include <dsp/comm/self.hpp>
#include <dsp/comm/staged.hpp>
#include <dsp/cost.hpp>
#include <dsp/error.hpp>
#include <dsp/groups.hpp>
#include <dsp/layout.hpp>
#include <dsp/partition.hpp>
#include <dsp/pipeline.hpp>
#include <dsp/primitives.hpp>
#include <dsp/tensor.hpp>
#include <dsp/version.hpp>
