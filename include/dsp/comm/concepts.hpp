// SPDX-License-Identifier: BSD-3-Clause
// dsp: what a communicator must provide, and the optional capabilities a
// backend may add. Backends opt in by meeting these concepts; the engine asks
// the capability concepts, never a backend's type.
#pragma once

#include <dsp/comm/resources.hpp>
#include <dsp/comm/runs.hpp>

#include <Kokkos_Core.hpp>

#include <chrono>
#include <concepts>
#include <cstddef>
#include <span>
#include <vector>

namespace dsp {

/// Knows its place in a group of ranks, and holds dsp's state for the group.
template <class C>
concept RankedGroup = requires(const C& c) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  /// Identity of the underlying group: copies of one communicator share it.
  { c.id() } -> std::convertible_to<const void*>;
  /// dsp's caches for this communicator, shared by its copies (comm/resources.hpp).
  { c.resources() } -> std::convertible_to<const CommResources&>;
};

/// Moves data that lives in one Kokkos memory space.
template <class C>
concept HasMemorySpace = requires {
  typename C::memory_space;
}
&&Kokkos::is_memory_space<typename C::memory_space>::value;

/// All-to-all with equal counts and with per-peer counts. Counts and
/// displacements are in elements of `elem_bytes` bytes and may exceed INT_MAX.
/// Every rank must take the same path through a collective, so a backend
/// chooses its algorithm only from values equal on all ranks: the equal count,
/// or for all_to_all_v the `bound` argument (the same on every rank, at least
/// every count and displacement any rank passes), never from local counts.
template <class C>
concept AllToAll = requires(C& c, const void* s, void* r, std::size_t n, std::span<const std::size_t> v) {
  c.all_to_all(s, r, n, n);                // send, recv, count per peer, elem_bytes
  c.all_to_all_v(s, v, v, r, v, v, n, n);  // send, counts, displs, recv, counts, displs, elem_bytes, bound
};

/// All-gather with equal and per-rank counts (same units as AllToAll; every
/// rank passes the same `counts` and `displs`).
template <class C>
concept AllGather = requires(C& c, const void* s, void* r, std::size_t n, std::span<const std::size_t> v) {
  c.all_gather(s, r, n, n);          // send, recv, count per rank, elem_bytes
  c.all_gather_v(s, n, r, v, v, n);  // send, count, recv, counts, displs, elem_bytes
};

/// Broadcast from a root rank (used to hand every rank the same input).
template <class C>
concept Broadcast = requires(C& c, void* b, std::size_t n, int root) {
  c.broadcast(b, n, n, root);  // buffer, count, elem_bytes, root
};

/// A host-memory control channel: all-gather of a few bytes, used by the
/// cross-rank agreement checks whatever memory space the data lives in.
template <class C>
concept ControlChannel = requires(C& c, const void* s, void* r, std::size_t n) {
  c.control_all_gather(s, r, n);  // send, recv, bytes per rank
};

/// Element types a backend reduces (Partial placements, dsp::redistribute).
enum class ReduceType { f32, f64, i32, i64, u32, u64, c64 /* complex<float> */, c128 /* complex<double> */ };
/// Reduction operations (dsp::Sum, dsp::Max, dsp::Min).
enum class ReduceOp { sum, max, min };

/// Bytes of one element of a reduce type.
constexpr std::size_t reduce_bytes(ReduceType t) {
  switch (t) {
    case ReduceType::f32:
    case ReduceType::i32:
    case ReduceType::u32: return 4;
    case ReduceType::c128: return 16;
    default: return 8;
  }
}

/// Everything dsp needs from a backend.
template <class C>
concept Communicator = std::copy_constructible<C> && RankedGroup<C> && HasMemorySpace<C> && AllToAll<C> &&
    AllGather<C> && Broadcast<C> && ControlChannel<C>;

// ---- optional capabilities ----

namespace detail {
/// A `local` argument that does nothing, for the concepts below. A named type,
/// not a lambda: nvcc (13.0) evaluates a requires-expression that contains a
/// lambda as false, which would hide these capabilities in CUDA builds.
struct NoLocalCopy {
  void operator()() const noexcept {}
};
/// An arrival callback that does nothing, for AsyncPeerExchange (a named
/// type for the same reason).
struct NoArrival {
  void operator()(std::size_t) const noexcept {}
};
}  // namespace detail

/// Point-to-point exchange of run patterns (the pairwise switch, the peer
/// gather): `exchange_runs(send, sends, recv, recvs, elem_bytes, local)` sends
/// each PeerRuns of `sends` from `send` and receives each of `recvs` into
/// `recv`, cut into messages of `piece` elements, and calls `local()` (the
/// own chunk's copy) while they fly. Both sides of a pair cut a chunk the same
/// way, and messages of one pair keep their order.
template <class C>
concept PeerExchange = requires(C& c, const void* s, void* r, std::span<const PeerRuns> v, std::size_t n,
                                detail::NoLocalCopy local) {
  c.exchange_runs(s, v, r, v, n, local);
};

/// The exchange of PeerExchange split in two phases (split-phase switches,
/// compute on arrival): `post_runs(send, sends, recv, recvs, elem_bytes)`
/// posts every message and returns a `C::Pending` at once; `test_runs(p)`
/// progresses it and says whether it is complete; `wait_runs(p)` completes
/// it; `wait_runs(p, arrived)` completes it calling `arrived(k)` for each
/// receive k (an index into `recvs`) as soon as all its messages have landed.
template <class C>
concept AsyncPeerExchange = PeerExchange<C> &&
    requires(C& c, const void* s, void* r, std::span<const PeerRuns> v, std::size_t n, typename C::Pending& p) {
  { c.post_runs(s, v, r, v, n) } -> std::same_as<typename C::Pending>;
  { c.test_runs(p) } -> std::convertible_to<bool>;
  c.wait_runs(p);
  c.wait_runs(p, detail::NoArrival{});
};

/// The exchange of PeerExchange as one call with a strided datatype per peer
/// (MPI_Alltoallw): the backend packs while it transfers. `local()` runs
/// before the exchange.
template <class C>
concept TypedExchange = requires(C& c, const void* s, void* r, std::span<const PeerRuns> v, std::size_t n,
                                 detail::NoLocalCopy local) {
  c.exchange_runs_typed(s, v, r, v, n, local);
};

/// Collectives are ordered on the stream the kernels run on (NCCL): the
/// engine need not fence between a kernel and the collective that reads its
/// output.
template <class C>
concept StreamOrdered = requires {
  requires C::stream_ordered;
};

/// The backend has its own execution space instance (a stream) that dsp's
/// kernels must run on.
template <class C>
concept OwnExecutionSpace = requires(const C& c) {
  c.execution_space();
};

/// The group can be split into subgroups: `split(color, key)` is collective
/// and returns a communicator of the same type over the ranks of one color,
/// ordered by key (MPI_Comm_split).
template <class C>
concept Splittable = requires(const C& c, int color, int key) {
  { c.split(color, key) } -> std::same_as<C>;
};

/// Reductions (needed for Partial placements): `all_reduce(send, recv, count,
/// type, op)` leaves the reduction over all ranks of `count` elements in recv
/// on every rank; `reduce_scatter(send, recv, counts, type, op)` reduces
/// sum(counts) elements laid out in rank order and leaves rank r's
/// counts[r] of them in its recv. `counts` are equal on every rank; send and
/// receive buffers do not overlap.
template <class C>
concept Reductions = requires(C& c, const void* s, void* r, std::size_t n, std::span<const std::size_t> v, ReduceType t,
                              ReduceOp o) {
  c.all_reduce(s, r, n, t, o);
  c.reduce_scatter(s, r, v, t, o);
};

/// When a rank stops waiting for the others (see DeadlineControl).
using Deadline = std::chrono::steady_clock::time_point;

/// The control channel can give up: `control_all_gather_until(send, recv,
/// bytes, deadline)` returns the ranks whose bytes did not arrive by then
/// (empty: all arrived; recv is then complete).
template <class C>
concept DeadlineControl = requires(C& c, const void* s, void* r, std::size_t n, Deadline t) {
  { c.control_all_gather_until(s, r, n, t) } -> std::convertible_to<std::vector<int>>;
};

/// The optional capabilities as bits, for a backend to declare what it means
/// to have: `static constexpr unsigned capabilities = dsp::kPeerExchange | ...;`.
/// dsp checks the declaration against the concepts wherever it uses the
/// backend (a static_assert per capability), so a wrapper that forgets to
/// forward one, or a backend that breaks one, fails to compile instead of
/// silently taking another algorithm.
enum Capability : unsigned {
  kPeerExchange = 1u << 0,
  kTypedExchange = 1u << 1,
  kAsyncPeerExchange = 1u << 2,
  kStreamOrdered = 1u << 3,
  kOwnExecutionSpace = 1u << 4,
  kSplittable = 1u << 5,
  kReductions = 1u << 6,
  kDeadlineControl = 1u << 7,
};

/// The capabilities C has, as bits (from the concepts).
template <class C>
constexpr unsigned capabilities_met() {
  return (PeerExchange<C> ? kPeerExchange : 0u) | (TypedExchange<C> ? kTypedExchange : 0u) |
         (AsyncPeerExchange<C> ? kAsyncPeerExchange : 0u) | (StreamOrdered<C> ? kStreamOrdered : 0u) |
         (OwnExecutionSpace<C> ? kOwnExecutionSpace : 0u) | (Splittable<C> ? kSplittable : 0u) |
         (Reductions<C> ? kReductions : 0u) | (DeadlineControl<C> ? kDeadlineControl : 0u);
}

/// The capabilities C declares (C::capabilities), or what it has when it declares none.
template <class C>
constexpr unsigned capabilities_declared() {
  if constexpr (requires { C::capabilities; }) return unsigned(C::capabilities);
  else return capabilities_met<C>();
}

namespace detail {
/// Whether capability `bit` is declared exactly when it is met.
template <class C, unsigned Bit>
inline constexpr bool declared_as_met = ((capabilities_declared<C>() & Bit) != 0) ==
                                        ((capabilities_met<C>() & Bit) != 0);

/// One static_assert per capability: the message names the one that differs.
template <class C>
constexpr bool check_declared_capabilities() {
  static_assert(declared_as_met<C, kPeerExchange>,
                "dsp: the communicator's declared capabilities (C::capabilities) and dsp::PeerExchange disagree: it "
                "declares kPeerExchange without meeting the concept, or meets it without declaring it.");
  static_assert(declared_as_met<C, kTypedExchange>,
                "dsp: the communicator's declared capabilities and dsp::TypedExchange disagree.");
  static_assert(declared_as_met<C, kAsyncPeerExchange>,
                "dsp: the communicator's declared capabilities and dsp::AsyncPeerExchange disagree.");
  static_assert(declared_as_met<C, kStreamOrdered>,
                "dsp: the communicator's declared capabilities and dsp::StreamOrdered disagree.");
  static_assert(declared_as_met<C, kOwnExecutionSpace>,
                "dsp: the communicator's declared capabilities and dsp::OwnExecutionSpace disagree.");
  static_assert(declared_as_met<C, kSplittable>,
                "dsp: the communicator's declared capabilities and dsp::Splittable disagree.");
  static_assert(declared_as_met<C, kReductions>,
                "dsp: the communicator's declared capabilities and dsp::Reductions disagree.");
  static_assert(declared_as_met<C, kDeadlineControl>,
                "dsp: the communicator's declared capabilities and dsp::DeadlineControl disagree.");
  return true;
}

/// Registers, once per process, the Kokkos finalize hook that drops every
/// communicator's cached objects (CommResources::release_all): the Kokkos
/// memory among them must not outlive Kokkos::finalize.
inline void release_resources_at_kokkos_finalize() {
  static const bool once = [] {
    Kokkos::push_finalize_hook([] { CommResources::release_all(); });
    return true;
  }();
  (void)once;
}

/// The execution space instance kernels run on: the communicator's own where it
/// has one (a stream-ordered device backend), otherwise the default instance of
/// the memory space's execution space.
template <class MemorySpace, class C>
auto execution_space_for(const C& c) {
  if constexpr (OwnExecutionSpace<C>) return c.execution_space();
  else return typename MemorySpace::execution_space{};
}
}  // namespace detail

}  // namespace dsp
