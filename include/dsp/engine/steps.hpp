// SPDX-License-Identifier: BSD-3-Clause
// dsp: the engine's building blocks: the prepare and execute phases of one
// collective on one communicator (a switch, a gather, a reduction, a local
// copy) and the scatter or broadcast from a root. Generic only in the memory
// space: the communicator is a Port (core/port.hpp), elements are bytes, so
// every backend, element type and tensor rank shares this code. The whole
// operation (agreement, several tensors, several mesh steps, split-phase) is
// engine/run.hpp (and engine/flight.hpp).
//
// Each collective runs in three phases:
//   prepare  plan (cached) and reserve workspace; a local failure is recorded,
//            not thrown, so that it can reach every rank;
//   agree    one small all-gather of signatures (core/agree.hpp): every
//            rank returns, or every rank throws;
//   execute  kernels and the one collective; nothing here fails locally,
//            except the backend itself.
// Data flows one way: front end -> engine -> plans, kernels, communicator.
#pragma once

#include <dsp/core/agree.hpp>
#include <dsp/core/buffers.hpp>
#include <dsp/core/exclusive.hpp>
#include <dsp/core/port.hpp>
#include <dsp/engine/api.hpp>
#include <dsp/error.hpp>
#include <dsp/kernels/copy.hpp>
#include <dsp/plan/gather.hpp>
#include <dsp/plan/reduce.hpp>
#include <dsp/plan/switch.hpp>

#include <Kokkos_Core.hpp>

#include <atomic>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace dsp::detail {

/// The capabilities plans choose from: of a port, or of a communicator type.
inline Capabilities capabilities_of(const Port& p) { return Capabilities{p.caps().peer, p.caps().typed}; }
template <class Comm>
constexpr Capabilities capabilities_of() {
  return Capabilities{PeerExchange<Comm>, TypedExchange<Comm>};
}

/// Whether small exchanges may go in eager pieces (plan/packed.hpp,
/// kEagerPiecesChunkBytes): on a host-issued backend in host memory (a host
/// execution space's: not managed memory, which a CUDA-aware MPI treats as
/// the device's). A stream-ordered backend (NCCL) has no eager limit, and
/// device buffers over a CUDA-aware MPI take other protocols (not measured).
template <class M>
bool eager_pieces_apply(const PortOn<M>& port) {
  return !port.caps().stream_ordered && Kokkos::SpaceAccessibility<Kokkos::HostSpace, M>::accessible &&
         Kokkos::SpaceAccessibility<typename M::execution_space, Kokkos::HostSpace>::accessible;
}

/// How many times the engine ordered queued work before a transfer (tests
/// check that every path does so before its data leaves the rank).
inline std::atomic<std::size_t>& transfer_fences() {
  static std::atomic<std::size_t> n{0};
  return n;
}

/// The fence between a step that writes a buffer (a kernel, or the caller's
/// own work on the input) and the transfer that reads it: needed when the
/// transfer is issued from the host, not when it is ordered on the same
/// stream as the kernels. Every path calls it before data leaves the rank.
template <class Exec>
void fence_before_transfer(const Port& port, const Exec& exec) {
  if (!port.caps().stream_ordered) exec.fence();
  transfer_fences().fetch_add(1, std::memory_order_relaxed);
}

/// The end of an operation: with a host-issued backend the output is ready
/// when the call returns; with a stream-ordered one (NCCL) it is ready in the
/// stream's order, and the host does not wait (only the agreement check does).
template <class Exec>
void fence_after(const Port& port, const Exec& exec) {
  if (!port.caps().stream_ordered) exec.fence();
}

/// Point-to-point exchange of a PeerPlan, the own chunk copied meanwhile.
/// No exchange at all (the typed one is a collective) when nothing moves
/// between ranks anywhere: one rank, or an empty tensor.
template <class M>
void execute_peer(PortOn<M>& comm, const PeerPlan& plan, bool typed, const void* in, void* out, std::size_t elem_bytes,
                  std::span<const std::size_t> global) {
  const auto exec = comm.exec();
  auto local = [&] {
    copy_runs(exec, out, in, elem_bytes, std::span(&plan.self, 1));
    fence_after(comm, exec);
  };
  if (comm.size() == 1 || product(global) == 0) return local();
  fence_before_transfer(comm, exec);
  if (typed) comm.exchange_runs_typed(in, plan.sends, out, plan.recvs, elem_bytes, local);
  else comm.exchange_runs(in, plan.sends, out, plan.recvs, elem_bytes, local);
}

/// The prepare phase's frame: runs `body` (planning, reserving memory) unless
/// an earlier check already failed, and records a failure in `sig` and `err`
/// instead of throwing, so that the agreement check can report it on every
/// rank. Returns body's result, or a default-constructed one on failure.
template <class Body>
auto prepare(int rank, Signature& sig, std::string& err, Body&& body) -> decltype(body()) {
  if (!err.empty()) return {};
  try {
    maybe_inject_fault();
    return body();
  } catch (const std::exception& e) {
    sig.status = static_cast<std::uint32_t>(Status::alloc_failed);
    err = failure_text(sig.op, rank, e);
    return {};
  }
}

// ---------------------------------------------------------------- switch

struct SwitchArgs {
  const void* in = nullptr;
  void* out = nullptr;
  std::size_t elem_bytes = 0;
  std::span<const std::size_t> global;
  std::size_t i = 0, j = 0;  // Sharded<i> -> Sharded<j>
};

/// The plan of a switch (cached), with the workspace it needs reserved.
/// May throw: call it inside prepare().
template <class M>
std::shared_ptr<const SwitchPlan> plan_and_reserve_switch(Port& comm, const SwitchArgs& a, SwitchAlgorithm setting) {
  auto plan =
      cached_switch_plan(a.global, a.i, a.j, comm.rank(), comm.size(), a.elem_bytes, capabilities_of(comm), setting);
  std::size_t sb = 0, rb = 0;
  if (const auto* p = std::get_if<AlltoallPlan>(plan.get())) sb = p->send_elems, rb = p->recv_elems;
  if (const auto* p = std::get_if<AlltoallvPlan>(plan.get())) sb = p->send_elems, rb = p->recv_elems;
  if (sb || rb) workspace<M>(comm).reserve(sb * a.elem_bytes, rb * a.elem_bytes);
  return plan;
}

/// Execute phase of an agreed switch.
template <class M>
void execute_switch(PortOn<M>& comm, const SwitchPlan& plan, const SwitchArgs& a) {
  const auto exec = comm.exec();
  const std::size_t elem_bytes = a.elem_bytes;
  const bool empty = product(a.global) == 0;
  const auto [sbuf, rbuf] = workspace_buffers<M>(comm);
  if (const auto* p = std::get_if<IdentityPlan>(&plan)) {
    copy_runs(exec, a.out, a.in, elem_bytes, std::span(&p->copy, 1));
    fence_after(comm, exec);
  } else if (const auto* p = std::get_if<AlltoallPlan>(&plan)) {  // own chunk included: the backend copies it
    copy_runs(exec, sbuf, a.in, elem_bytes, p->pack);
    fence_before_transfer(comm, exec);
    if (!empty)
      comm.all_to_all(p->send_from_input ? a.in : sbuf, p->recv_into_output ? a.out : rbuf, p->count, elem_bytes);
    copy_runs(exec, a.out, rbuf, elem_bytes, p->unpack);
    fence_after(comm, exec);
  } else if (const auto* p = std::get_if<AlltoallvPlan>(&plan)) {
    copy_runs(exec, sbuf, a.in, elem_bytes, p->pack);
    copy_runs(exec, a.out, a.in, elem_bytes, std::span(&p->self, 1));
    fence_before_transfer(comm, exec);
    if (comm.size() > 1 && !empty)
      comm.all_to_all_v(p->send_from_input ? a.in : sbuf, p->send_counts, p->send_displs,
                        p->recv_into_output ? a.out : rbuf, p->recv_counts, p->recv_displs, elem_bytes, p->bound);
    copy_runs(exec, a.out, rbuf, elem_bytes, p->unpack);
    fence_after(comm, exec);
  } else if (const auto* p = std::get_if<TypedPlan>(&plan)) {
    execute_peer(comm, *p, true, a.in, a.out, elem_bytes, a.global);
  } else {
    execute_peer(comm, std::get<PeerPlan>(plan), false, a.in, a.out, elem_bytes, a.global);
  }
}

// ---------------------------------------------------------------- gather

struct GatherArgs {
  const void* in = nullptr;
  void* out = nullptr;
  std::size_t elem_bytes = 0;
  std::span<const std::size_t> global;
  std::size_t d = 0;  // Sharded<d> -> Replicated
};

/// The plan of a gather, with the receive buffer reserved. May throw.
template <class M>
GatherPlan plan_and_reserve_gather(Port& comm, const GatherArgs& a, SwitchAlgorithm setting) {
  GatherPlan plan = plan_gather(a.global, a.d, comm.rank(), comm.size(), a.elem_bytes, capabilities_of(comm), setting);
  if (const auto* g = std::get_if<AllgatherPlan>(&plan); g && !g->recv_into_output && comm.size() > 1)
    workspace<M>(comm).reserve(0, g->recv_elems * a.elem_bytes);
  return plan;
}

/// Execute phase of an agreed gather. With one rank it is a local copy.
template <class M>
void execute_gather(PortOn<M>& comm, const GatherPlan& plan, const GatherArgs& a) {
  const auto exec = comm.exec();
  if (const auto* peer = std::get_if<PeerPlan>(&plan))
    return execute_peer(comm, *peer, false, a.in, a.out, a.elem_bytes, a.global);
  const std::size_t total = product(a.global);
  if (comm.size() == 1) {
    const CopyTask t{contiguous(0, total), contiguous(0, total), total};
    copy_runs(exec, a.out, a.in, a.elem_bytes, std::span(&t, 1));
    return fence_after(comm, exec);
  }
  const auto& g = std::get<AllgatherPlan>(plan);
  unsigned char* rbuf = g.recv_into_output ? nullptr : workspace_buffers<M>(comm).recv;
  fence_before_transfer(comm, exec);
  if (total > 0)
    comm.all_gather_v(a.in, g.counts[std::size_t(comm.rank())], g.recv_into_output ? a.out : rbuf, g.counts, g.displs,
                      a.elem_bytes);
  copy_runs(exec, a.out, rbuf, a.elem_bytes, g.unpack);
  fence_after(comm, exec);
}

// ---------------------------------------------------------------- reductions (Partial placements)

struct ReduceArgs {
  const void* in = nullptr;
  void* out = nullptr;
  std::span<const std::size_t> global;  // the block being reduced, the same on every rank of the group
  ReduceType type = ReduceType::f32;
  ReduceOp op = ReduceOp::sum;
  long d = -1;  // reduce-scatter into Sharded<d>; -1: all-reduce
};

/// The plan of an all-reduce (none) or reduce-scatter, with its pack buffer
/// reserved. May throw.
template <class M>
ReduceScatterPlan plan_and_reserve_reduce(Port& comm, const ReduceArgs& a) {
  if (a.d < 0) return {};
  ReduceScatterPlan plan = plan_reduce_scatter(a.global, std::size_t(a.d), comm.size());
  if (!plan.pack.empty() && comm.size() > 1) workspace<M>(comm).reserve(plan.elems * reduce_bytes(a.type), 0);
  return plan;
}

/// Execute phase of an agreed all-reduce (d < 0) or reduce-scatter into
/// Sharded<d>. With one rank it is a local copy.
template <class M>
void execute_reduce(PortOn<M>& comm, const ReduceScatterPlan& plan, const ReduceArgs& a) {
  const auto exec = comm.exec();
  const std::size_t elem_bytes = reduce_bytes(a.type), total = product(a.global);
  if (comm.size() == 1) {
    const CopyTask t{contiguous(0, total), contiguous(0, total), total};
    copy_runs(exec, a.out, a.in, elem_bytes, std::span(&t, 1));
    return fence_after(comm, exec);
  }
  if (a.d < 0) {
    fence_before_transfer(comm, exec);
    if (total > 0) comm.all_reduce(a.in, a.out, total, a.type, a.op);
    return fence_after(comm, exec);
  }
  unsigned char* sbuf = plan.pack.empty() ? nullptr : workspace_buffers<M>(comm).send;
  copy_runs(exec, sbuf, a.in, elem_bytes, plan.pack);
  fence_before_transfer(comm, exec);
  if (total > 0) comm.reduce_scatter(plan.pack.empty() ? a.in : sbuf, a.out, plan.counts, a.type, a.op);
  fence_after(comm, exec);
}

/// Replicated -> Partial<Op>: local. For a sum the rank at coordinate 0
/// keeps the value and the others hold zeros; for max and min every rank
/// keeps it (the reduction of equal values is the value).
template <class M>
void execute_to_partial(PortOn<M>& comm, const void* in, void* out, std::size_t bytes, bool keep) {
  const auto exec = comm.exec();
  if (keep) {
    const CopyTask t{contiguous(0, bytes), contiguous(0, bytes), bytes};
    copy_runs(exec, out, in, 1, std::span(&t, 1));
  } else if (bytes > 0) {
    using Bytes = Kokkos::View<unsigned char*, M, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(exec, Bytes(static_cast<unsigned char*>(out), bytes), 0);
  }
  fence_after(comm, exec);
}

/// A local copy along one run pattern pair (a split's slice). Not collective.
template <class M>
void execute_local_copy(PortOn<M>& comm, const CopyTask& t, const void* in, void* out, std::size_t elem_bytes) {
  const auto exec = comm.exec();
  copy_runs(exec, out, in, elem_bytes, std::span(&t, 1));
  fence_after(comm, exec);
}

/// Replicated -> Sharded<d>: this rank's slice (a split), local.
template <class M>
void execute_split(PortOn<M>& comm, std::span<const std::size_t> global, std::size_t d, const void* in, void* out,
                   std::size_t elem_bytes) {
  execute_local_copy(comm, plan_split(global, d, comm.rank(), comm.size()), in, out, elem_bytes);
}

// ---------------------------------------------------------------- from a root (distribute)

/// Scatter (d >= 0) or broadcast (d < 0) of a tensor held by the root. The
/// caller has agreed on the extents already; `err` carries a local failure.
template <class M>
void run_from_root(PortOn<M>& comm, Signature sig, std::string err, const RootArgs& a) {
  ExclusiveUse use(comm, op_name(sig.op));
  const int p = comm.rank(), n = comm.size();
  sig.path = static_cast<std::uint32_t>(a.d >= 0 ? Path::scatter : Path::broadcast);
  const ScatterPlan plan = prepare(p, sig, err, [&] {
    ScatterPlan sp;
    if (a.d >= 0) {
      sp = plan_scatter(a.global, std::size_t(a.d), p, n, a.root);
      if (sp.send_elems) workspace<M>(comm).reserve(sp.send_elems * a.elem_bytes, 0);
    }
    return sp;
  });
  agree(comm, sig, err);
  const auto exec = comm.exec();
  const std::size_t total = product(a.global);
  if (a.d < 0) {
    if (p == a.root) {
      const CopyTask t{contiguous(0, total), contiguous(0, total), total};
      copy_runs(exec, a.out, a.in, a.elem_bytes, std::span(&t, 1));
    }
    fence_before_transfer(comm, exec);
    if (total > 0) comm.broadcast(a.out, total, a.elem_bytes, a.root);
    fence_after(comm, exec);
    return;
  }
  unsigned char* sbuf = plan.send_elems ? workspace<M>(comm).send() : nullptr;
  copy_runs(exec, sbuf, a.in, a.elem_bytes, plan.pack);
  fence_before_transfer(comm, exec);
  if (total > 0)
    comm.all_to_all_v(sbuf, plan.send_counts, plan.send_displs, a.out, plan.recv_counts, plan.recv_displs, a.elem_bytes,
                      plan.bound);
  fence_after(comm, exec);
}

}  // namespace dsp::detail
