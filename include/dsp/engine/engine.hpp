// SPDX-License-Identifier: BSD-3-Clause
// dsp: the engine every front end calls. Generic only in the communicator
// and the memory space, never in the element type or the tensor rank, so
// every tensor type shares one engine per backend.
//
// Each collective runs in three phases:
//   prepare  plan (cached) and reserve workspace; a local failure is recorded,
//            not thrown, so that it can reach every rank;
//   agree    one small all-gather of signatures (engine/agree.hpp): every
//            rank returns, or every rank throws;
//   execute  kernels and the one collective; nothing here fails locally,
//            except the backend itself.
// Data flows one way: front end -> engine -> plans, kernels, communicator.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/engine/agree.hpp>
#include <dsp/engine/workspace.hpp>
#include <dsp/error.hpp>
#include <dsp/kernels/copy.hpp>
#include <dsp/plan/gather.hpp>
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

/// Throws UsageError when Kokkos cannot be used: before Kokkos::initialize or
/// after Kokkos::finalize.
inline void require_kokkos(const char* op) {
#if defined(KOKKOS_VERSION) && KOKKOS_VERSION >= 40000
  if (Kokkos::is_finalized())
    throw UsageError(std::string(op) +
                     ": Kokkos is finalized; finish every dsp call and destroy dsp tensors "
                     "before Kokkos::finalize");
#endif
  if (!Kokkos::is_initialized())
    throw UsageError(std::string(op) +
                     ": Kokkos is not initialized (or already finalized); call "
                     "Kokkos::initialize before using dsp tensors, and finish with them before "
                     "Kokkos::finalize");
}

/// One collective at a time per communicator: dsp's threading model. Marks
/// the communicator busy for the duration of a collective; a second thread
/// that enters a collective on it meanwhile gets UsageError (its peers may
/// then wait: use one communicator per thread). Also refuses a communicator
/// whose collective deadline expired.
class Busy {
 public:
  template <class Comm>
  Busy(const Comm& comm, const char* op) : res_(comm.resources()) {
    require_kokkos(op);
    if (res_.poisoned())
      throw UsageError(std::string(op) +
                       ": this communicator timed out in an earlier collective "
                       "(dsp::set_collective_deadline) and cannot be used any more");
    if (!res_.try_acquire())
      throw UsageError(std::string(op) +
                       ": another thread is running a dsp collective on this communicator; "
                       "dsp runs one collective at a time per communicator (use one "
                       "communicator per thread: MpiCommunicator{comm} makes a new one)");
  }
  ~Busy() { res_.release(); }
  Busy(const Busy&) = delete;
  Busy& operator=(const Busy&) = delete;

 private:
  const CommResources& res_;
};

template <class Comm>
constexpr Capabilities capabilities_of() {
  return Capabilities{PeerExchange<Comm>, TypedExchange<Comm>};
}

inline std::string failure_text(std::uint32_t op, int rank, const std::exception& e) {
  return std::string(op_name(op)) + " (rank " + std::to_string(rank) + "): " + e.what();
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
template <class Comm, class Exec>
void fence_before_transfer(const Exec& exec) {
  if constexpr (!StreamOrdered<Comm>) exec.fence();
  transfer_fences().fetch_add(1, std::memory_order_relaxed);
}

/// The end of an operation: with a host-issued backend the output is ready
/// when the call returns; with a stream-ordered one (NCCL) it is ready in the
/// stream's order, and the host does not wait (only the agreement check does).
template <class Comm, class Exec>
void fence_after(const Exec& exec) {
  if constexpr (!StreamOrdered<Comm>) exec.fence();
}

/// Point-to-point exchange of a PeerPlan, the own chunk copied meanwhile.
/// No exchange at all (the typed one is a collective) when nothing moves
/// between ranks anywhere: one rank, or an empty tensor.
template <class Comm, class Exec>
void execute_peer(Comm& comm, const Exec& exec, const PeerPlan& plan, bool typed, const void* in, void* out,
                  std::size_t eb, std::span<const std::size_t> global) {
  auto local = [&] {
    copy_runs(exec, out, in, eb, std::span(&plan.self, 1));
    fence_after<Comm>(exec);
  };
  if (comm.size() == 1 || product(global) == 0) return local();
  fence_before_transfer<Comm>(exec);
  if constexpr (TypedExchange<Comm>) {
    if (typed) return comm.exchange_runs_typed(in, plan.sends, out, plan.recvs, eb, local);
  }
  if constexpr (PeerExchange<Comm>) {
    if (!typed) return comm.exchange_runs(in, plan.sends, out, plan.recvs, eb, local);
  }
  throw Error("dsp: internal error: a point-to-point plan for a backend without point-to-point exchange");
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
  std::size_t eb = 0;
  std::span<const std::size_t> global;
  std::size_t i = 0, j = 0;  // Sharded<i> -> Sharded<j>
};

inline Path path_of(const SwitchPlan& p) {
  switch (p.index()) {
    case 0: return Path::identity;
    case 1: return Path::alltoall;
    case 2: return Path::alltoallv;
    case 3: return Path::pairwise;
    default: return Path::datatypes;
  }
}

/// Prepare phase: the plan, and the workspace it needs reserved. A failure
/// is recorded in `sig` and `err`.
template <class M, class Comm>
std::shared_ptr<const SwitchPlan> prepare_switch(Comm& comm, const SwitchArgs& a, Signature& sig, std::string& err) {
  return prepare(comm.rank(), sig, err, [&] {
    auto plan = cached_switch_plan(a.global, a.i, a.j, comm.rank(), comm.size(), a.eb, capabilities_of<Comm>(),
                                   switch_algorithm());
    sig.algorithm = static_cast<std::uint32_t>(path_of(*plan));
    std::size_t sb = 0, rb = 0;
    if (const auto* p = std::get_if<AlltoallPlan>(plan.get())) sb = p->send_elems, rb = p->recv_elems;
    if (const auto* p = std::get_if<AlltoallvPlan>(plan.get())) sb = p->send_elems, rb = p->recv_elems;
    if (sb || rb) workspace<M>(comm).reserve(sb * a.eb, rb * a.eb);
    return plan;
  });
}

/// Execute phase of an agreed switch.
template <class M, class Comm>
void execute_switch(Comm& comm, const SwitchPlan& plan, const SwitchArgs& a) {
  auto exec = execution_space_for<M>(comm);
  const std::size_t eb = a.eb;
  const bool empty = product(a.global) == 0;
  const Workspace<M>* ws = comm.resources().template find<Workspace<M>>();
  unsigned char* sbuf = ws ? ws->send() : nullptr;
  unsigned char* rbuf = ws ? ws->recv() : nullptr;
  std::visit(
      [&](const auto& p) {
    using P = std::decay_t<decltype(p)>;
    if constexpr (std::is_same_v<P, IdentityPlan>) {
      copy_runs(exec, a.out, a.in, eb, std::span(&p.copy, 1));
      fence_after<Comm>(exec);
    } else if constexpr (std::is_same_v<P, AlltoallPlan>) {  // own chunk included: the backend copies it
      copy_runs(exec, sbuf, a.in, eb, p.pack);
      fence_before_transfer<Comm>(exec);
      if (!empty) comm.all_to_all(p.send_from_input ? a.in : sbuf, p.recv_into_output ? a.out : rbuf, p.count, eb);
      copy_runs(exec, a.out, rbuf, eb, p.unpack);
      fence_after<Comm>(exec);
    } else if constexpr (std::is_same_v<P, AlltoallvPlan>) {
      copy_runs(exec, sbuf, a.in, eb, p.pack);
      copy_runs(exec, a.out, a.in, eb, std::span(&p.self, 1));
      fence_before_transfer<Comm>(exec);
      if (comm.size() > 1 && !empty)
        comm.all_to_all_v(p.send_from_input ? a.in : sbuf, p.send_counts, p.send_displs,
                          p.recv_into_output ? a.out : rbuf, p.recv_counts, p.recv_displs, eb, p.bound);
      copy_runs(exec, a.out, rbuf, eb, p.unpack);
      fence_after<Comm>(exec);
    } else {  // PeerPlan or TypedPlan
      execute_peer(comm, exec, p, std::is_same_v<P, TypedPlan>, a.in, a.out, eb, a.global);
    }
      },
      plan);
}

/// A whole switch: prepare, agree, execute. Collective. `sig` and `err` come
/// from the front end (its output checks); prepare records the algorithm in `sig`.
template <class M, class Comm>
void run_switch(Comm comm, Signature& sig, std::string err, const SwitchArgs& a) {
  Busy busy(comm, op_name(sig.op));
  auto plan = prepare_switch<M>(comm, a, sig, err);
  agree(comm, sig, err);
  execute_switch<M>(comm, *plan, a);
}

// ---------------------------------------------------------------- gather

struct GatherArgs {
  const void* in = nullptr;
  void* out = nullptr;
  std::size_t eb = 0;
  std::span<const std::size_t> global;
  std::size_t d = 0;  // Sharded<d> -> Replicated
};

/// Prepare phase of a gather: its plan, and the receive buffer reserved.
template <class M, class Comm>
GatherPlan prepare_gather(Comm& comm, const GatherArgs& a, Signature& sig, std::string& err) {
  return prepare(comm.rank(), sig, err, [&] {
    GatherPlan plan =
        plan_gather(a.global, a.d, comm.rank(), comm.size(), a.eb, capabilities_of<Comm>(), switch_algorithm());
    sig.algorithm = static_cast<std::uint32_t>(plan.index() == 0 ? Path::allgather : Path::peer_gather);
    if (const auto* g = std::get_if<AllgatherPlan>(&plan); g && !g->recv_into_output && comm.size() > 1)
      workspace<M>(comm).reserve(0, g->recv_elems * a.eb);
    return plan;
  });
}

/// Execute phase of an agreed gather. With one rank it is a local copy.
template <class M, class Comm>
void execute_gather(Comm& comm, const GatherPlan& plan, const GatherArgs& a) {
  auto exec = execution_space_for<M>(comm);
  if (const auto* peer = std::get_if<PeerPlan>(&plan))
    return execute_peer(comm, exec, *peer, false, a.in, a.out, a.eb, a.global);
  const std::size_t total = product(a.global);
  if (comm.size() == 1) {
    const CopyTask t{contiguous(0, total), contiguous(0, total), total};
    copy_runs(exec, a.out, a.in, a.eb, std::span(&t, 1));
    return fence_after<Comm>(exec);
  }
  const auto& g = std::get<AllgatherPlan>(plan);
  const Workspace<M>* ws = comm.resources().template find<Workspace<M>>();
  unsigned char* rbuf = g.recv_into_output || !ws ? nullptr : ws->recv();
  fence_before_transfer<Comm>(exec);
  if (total > 0)
    comm.all_gather_v(a.in, g.counts[std::size_t(comm.rank())], g.recv_into_output ? a.out : rbuf, g.counts, g.displs,
                      a.eb);
  copy_runs(exec, a.out, rbuf, a.eb, g.unpack);
  fence_after<Comm>(exec);
}

/// A whole gather: prepare, agree, execute. Collective.
template <class M, class Comm>
void run_gather(Comm comm, Signature& sig, std::string err, const GatherArgs& a) {
  Busy busy(comm, op_name(sig.op));
  const GatherPlan plan = prepare_gather<M>(comm, a, sig, err);
  agree(comm, sig, err);
  execute_gather<M>(comm, plan, a);
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

/// A reduce-scatter's layout: the chunk of each rank along d (1-D rule), and
/// the pack into rank order when the chunks are not contiguous in the input.
struct ReduceScatterPlan {
  std::vector<std::size_t> counts;
  std::vector<CopyTask> pack;  // empty: the input is already in rank order
  std::size_t elems = 0;
};
inline ReduceScatterPlan plan_reduce_scatter(std::span<const std::size_t> global, std::size_t d, int size) {
  const std::size_t n = static_cast<std::size_t>(size);
  const Partition pd{global[d], n};
  const Slab g = slab(global, d);
  ReduceScatterPlan plan;
  for (std::size_t q = 0; q < n; ++q) {
    const std::size_t c = g.elems(pd.count(q));
    plan.counts.push_back(c);
    if (g.outer > 1) plan.pack.push_back({contiguous(plan.elems, c), g.runs(pd.offset(q), pd.count(q)), c});
    plan.elems += c;
  }
  return plan;
}

/// Prepare phase of an all-reduce or reduce-scatter (reserves the pack buffer).
template <class M, class Comm>
ReduceScatterPlan prepare_reduce(Comm& comm, const ReduceArgs& a, Signature& sig, std::string& err) {
  if (a.d < 0) return {};
  return prepare(comm.rank(), sig, err, [&] {
    ReduceScatterPlan plan = plan_reduce_scatter(a.global, std::size_t(a.d), comm.size());
    if (!plan.pack.empty() && comm.size() > 1) workspace<M>(comm).reserve(plan.elems * reduce_bytes(a.type), 0);
    return plan;
  });
}

/// Execute phase of an agreed all-reduce (d < 0) or reduce-scatter into
/// Sharded<d>. With one rank it is a local copy.
template <class M, class Comm>
void execute_reduce(Comm& comm, const ReduceScatterPlan& plan, const ReduceArgs& a) {
  auto exec = execution_space_for<M>(comm);
  const std::size_t eb = reduce_bytes(a.type), total = product(a.global);
  if (comm.size() == 1) {
    const CopyTask t{contiguous(0, total), contiguous(0, total), total};
    copy_runs(exec, a.out, a.in, eb, std::span(&t, 1));
    return fence_after<Comm>(exec);
  }
  if constexpr (Reductions<Comm>) {
    if (a.d < 0) {
      fence_before_transfer<Comm>(exec);
      if (total > 0) comm.all_reduce(a.in, a.out, total, a.type, a.op);
      return fence_after<Comm>(exec);
    }
    const Workspace<M>* ws = comm.resources().template find<Workspace<M>>();
    unsigned char* sbuf = plan.pack.empty() || !ws ? nullptr : ws->send();
    copy_runs(exec, sbuf, a.in, eb, plan.pack);
    fence_before_transfer<Comm>(exec);
    if (total > 0) comm.reduce_scatter(plan.pack.empty() ? a.in : sbuf, a.out, plan.counts, a.type, a.op);
    fence_after<Comm>(exec);
  } else {
    throw Error("dsp: internal error: a reduction on a backend without reductions");
  }
}

/// Replicated -> Partial<Op>: local. For a sum the rank at coordinate 0
/// keeps the value and the others hold zeros; for max and min every rank
/// keeps it (the reduction of equal values is the value).
template <class M, class Comm>
void execute_to_partial(const Comm& comm, const void* in, void* out, std::size_t bytes, bool keep) {
  auto exec = execution_space_for<M>(comm);
  if (keep) {
    const CopyTask t{contiguous(0, bytes), contiguous(0, bytes), bytes};
    copy_runs(exec, out, in, 1, std::span(&t, 1));
  } else if (bytes > 0) {
    using Bytes = Kokkos::View<unsigned char*, M, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(exec, Bytes(static_cast<unsigned char*>(out), bytes), 0);
  }
  fence_after<Comm>(exec);
}

// ---------------------------------------------------------------- from a root (distribute)

struct RootArgs {
  const void* in = nullptr;  // the whole tensor, on the root only
  void* out = nullptr;       // this rank's block
  std::size_t eb = 0;
  std::span<const std::size_t> global;
  long d = -1;  // Sharded<d> (scatter), or -1: Replicated (broadcast)
  int root = 0;
};

/// Scatter (d >= 0) or broadcast (d < 0) of a tensor held by the root. The
/// caller has agreed on the extents already; `err` carries a local failure.
template <class M, class Comm>
void run_from_root(Comm comm, Signature sig, std::string err, const RootArgs& a) {
  Busy busy(comm, op_name(sig.op));
  const int p = comm.rank(), n = comm.size();
  sig.algorithm = static_cast<std::uint32_t>(a.d >= 0 ? Path::scatter : Path::broadcast);
  const ScatterPlan plan = prepare(p, sig, err, [&] {
    ScatterPlan sp;
    if (a.d >= 0) {
      sp = plan_scatter(a.global, std::size_t(a.d), p, n, a.root);
      if (sp.send_elems) workspace<M>(comm).reserve(sp.send_elems * a.eb, 0);
    }
    return sp;
  });
  agree(comm, sig, err);
  auto exec = execution_space_for<M>(comm);
  const std::size_t total = product(a.global);
  if (a.d < 0) {
    if (p == a.root) {
      const CopyTask t{contiguous(0, total), contiguous(0, total), total};
      copy_runs(exec, a.out, a.in, a.eb, std::span(&t, 1));
    }
    fence_before_transfer<Comm>(exec);
    if (total > 0) comm.broadcast(a.out, total, a.eb, a.root);
    fence_after<Comm>(exec);
    return;
  }
  unsigned char* sbuf = plan.send_elems ? workspace<M>(comm).send() : nullptr;
  copy_runs(exec, sbuf, a.in, a.eb, plan.pack);
  fence_before_transfer<Comm>(exec);
  if (total > 0)
    comm.all_to_all_v(sbuf, plan.send_counts, plan.send_displs, a.out, plan.recv_counts, plan.recv_displs, a.eb,
                      plan.bound);
  fence_after<Comm>(exec);
}

// ---------------------------------------------------------------- local

/// A local copy along one run pattern pair (split's slice). Not collective.
template <class M, class Comm>
void run_local_copy(const Comm& comm, const CopyTask& t, const void* in, void* out, std::size_t eb) {
  require_kokkos("dsp::split");
  auto exec = execution_space_for<M>(comm);
  copy_runs(exec, out, in, eb, std::span(&t, 1));
  fence_after<Comm>(exec);
}

}  // namespace dsp::detail
