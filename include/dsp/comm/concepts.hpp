// dsp: what a communicator must provide. Backends opt in by meeting these concepts.
#pragma once

#include <Kokkos_Core.hpp>

#include <concepts>
#include <cstddef>
#include <span>

namespace dsp {

/// Knows its place in a group of ranks.
template <class C>
concept RankedGroup = requires(const C& c) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  /// Identity of the underlying group: copies of one communicator share it.
  { c.id() } -> std::convertible_to<const void*>;
};

/// Moves data that lives in one Kokkos memory space.
template <class C>
concept HasMemorySpace = requires { typename C::memory_space; } &&
                         Kokkos::is_memory_space<typename C::memory_space>::value;

/// All-to-all with equal counts and with per-peer counts. Counts and
/// displacements are in elements of `elem_bytes` bytes and may exceed INT_MAX.
/// Every rank must take the same path through a collective, so a backend
/// chooses its algorithm only from values equal on all ranks: the equal count,
/// or for all_to_all_v the `bound` argument (the same on every rank, at least
/// every count and displacement any rank passes), never from local counts.
template <class C>
concept AllToAll = requires(C& c, const void* s, void* r, std::size_t n,
                            std::span<const std::size_t> v) {
  c.all_to_all(s, r, n, n);                // send, recv, count per peer, elem_bytes
  c.all_to_all_v(s, v, v, r, v, v, n, n);  // send, counts, displs, recv, counts, displs, elem_bytes, bound
};

/// All-gather with equal and per-rank counts (same units as AllToAll; every
/// rank passes the same `counts` and `displs`).
template <class C>
concept AllGather = requires(C& c, const void* s, void* r, std::size_t n,
                             std::span<const std::size_t> v) {
  c.all_gather(s, r, n, n);                // send, recv, count per rank, elem_bytes
  c.all_gather_v(s, n, r, v, v, n);        // send, count, recv, counts, displs, elem_bytes
};

/// Broadcast from a root rank (used to hand every rank the same input).
template <class C>
concept Broadcast = requires(C& c, void* b, std::size_t n, int root) {
  c.broadcast(b, n, n, root);              // buffer, count, elem_bytes, root
};

/// A host-memory control channel: all-gather of a few bytes, used by the
/// cross-rank agreement checks whatever memory space the data lives in.
template <class C>
concept ControlChannel = requires(C& c, const void* s, void* r, std::size_t n) {
  c.control_all_gather(s, r, n);           // send, recv, bytes per rank
};

/// Everything dsp needs from a backend.
template <class C>
concept Communicator = std::copy_constructible<C> && RankedGroup<C> && HasMemorySpace<C> &&
                       AllToAll<C> && AllGather<C> && Broadcast<C> && ControlChannel<C>;

namespace detail {
/// The execution space instance kernels run on: the communicator's own where it
/// has one (a stream-ordered device backend), otherwise the default instance of
/// the memory space's execution space.
template <class MemorySpace, class C>
auto execution_space_for(const C& c) {
  if constexpr (requires { c.execution_space(); }) return c.execution_space();
  else return typename MemorySpace::execution_space{};
}
}  // namespace detail

}  // namespace dsp
