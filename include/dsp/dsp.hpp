// SPDX-License-Identifier: BSD-3-Clause
// dsp: Dynamic Sequence Parallelism as typed layout transitions.
// Umbrella header: layouts, partitions, DistTensor, split / dynamic_switch /
// gather, process meshes and redistribute, distribute and parallel groups,
// typed pipelines and their cost model, settings and wisdom, the one-rank, staged and
// counting communicators.
// MPI: <dsp/mpi.hpp>; NCCL: <dsp/nccl.hpp>.
//
// Where things are:
//   front ends  dsp/*.hpp          primitives, redistribute, mesh, distribute, groups, pipeline, cost, tensor,
//                                  layout
//   engine      dsp/engine/        agreement, workspaces, the type-erased engine, dispatch from tensors
//   plans       dsp/plan/          pure arithmetic: run patterns, one plan type per algorithm
//   kernels     dsp/kernels/       the copy kernel
//   backends    dsp/comm/          the Communicator concept and capabilities, MPI, NCCL, Self, staged, counting
#pragma once

#include <dsp/async.hpp>
#include <dsp/batch.hpp>
#include <dsp/comm/concepts.hpp>
#include <dsp/comm/counting.hpp>
#include <dsp/comm/self.hpp>
#include <dsp/comm/staged.hpp>
#include <dsp/config.hpp>
#include <dsp/cost.hpp>
#include <dsp/distribute.hpp>
#include <dsp/error.hpp>
#include <dsp/extents.hpp>
#include <dsp/global_index.hpp>
#include <dsp/groups.hpp>
#include <dsp/half.hpp>
#include <dsp/layout.hpp>
#include <dsp/mesh.hpp>
#include <dsp/partition.hpp>
#include <dsp/pipeline.hpp>
#include <dsp/primitives.hpp>
#include <dsp/redistribute.hpp>
#include <dsp/reshard.hpp>
#include <dsp/settings.hpp>
#include <dsp/tensor.hpp>
#include <dsp/version.hpp>
#include <dsp/wire.hpp>
#include <dsp/wisdom.hpp>
#include <dsp/workspace.hpp>
