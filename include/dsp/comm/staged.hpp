// SPDX-License-Identifier: BSD-3-Clause
// dsp: a communicator for device memory over a host-memory backend, staging
// every transfer through host buffers.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/error.hpp>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dsp {

/// Wraps a host-memory communicator (e.g. MpiCommunicator over an MPI that is
/// not CUDA-aware) so tensors in `MemorySpace` can use it: each collective
/// copies the bytes it sends to a host buffer, runs the inner collective there,
/// and copies what it received back. Correct with any MPI, at the price of two
/// extra copies; choose it explicitly, as dsp never stages silently. Copies
/// share their staging buffers, which only grow. It has the optional
/// capabilities of `Inner` (point-to-point and typed run exchange, split,
/// deadline) except stream ordering: every transfer waits for its copies.
template <Communicator Inner, class MemorySpace>
class StagedCommunicator {
  static_assert(Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Inner::memory_space>::accessible,
                "dsp::StagedCommunicator: the inner communicator must move host memory.");

 public:
  using memory_space = MemorySpace;
  /// Inner's capabilities but split-phase exchange, stream ordering and an own
  /// execution space (checked against the concepts wherever dsp uses it).
  static constexpr unsigned capabilities =
      capabilities_declared<Inner>() & ~unsigned(kAsyncPeerExchange | kStreamOrdered | kOwnExecutionSpace);
  using inner_type = Inner;

  explicit StagedCommunicator(Inner inner) : inner_(std::move(inner)) {}

  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  /// The inner communicator's group and dsp state: the same ranks, so a
  /// timeout, the in-use flag and the caches are shared with it.
  const void* id() const noexcept { return inner_.id(); }
  const CommResources& resources() const noexcept { return inner_.resources(); }
  const Inner& inner() const noexcept { return inner_; }
  /// Host bytes held for staging.
  std::size_t staging_bytes() const { return bufs().send.extent(0) + bufs().recv.extent(0); }

  void all_to_all(const void* s, void* r, std::size_t count, std::size_t elem) {
    const std::size_t bytes = count * elem * static_cast<std::size_t>(size());
    inner_.all_to_all(to_host(bufs().send, s, bytes), host(bufs().recv, bytes), count, elem);
    from_host(r, bufs().recv, bytes);
  }

  void all_to_all_v(const void* s, std::span<const std::size_t> sc, std::span<const std::size_t> sd, void* r,
                    std::span<const std::size_t> rc, std::span<const std::size_t> rd, std::size_t elem,
                    std::size_t bound) {
    const std::size_t sbytes = extent(sc, sd) * elem, rbytes = extent(rc, rd) * elem;
    char* hr = host(bufs().recv, rbytes);
    inner_.all_to_all_v(to_host(bufs().send, s, sbytes), sc, sd, hr, rc, rd, elem, bound);
    received_back(r, rc, rd, elem);
  }

  void all_gather(const void* s, void* r, std::size_t count, std::size_t elem) {
    const std::size_t bytes = count * elem;
    char* hr = host(bufs().recv, bytes * static_cast<std::size_t>(size()));
    inner_.all_gather(to_host(bufs().send, s, bytes), hr, count, elem);
    from_host(r, bufs().recv, bytes * static_cast<std::size_t>(size()));
  }

  void all_gather_v(const void* s, std::size_t count, void* r, std::span<const std::size_t> rc,
                    std::span<const std::size_t> rd, std::size_t elem) {
    char* hr = host(bufs().recv, extent(rc, rd) * elem);
    inner_.all_gather_v(to_host(bufs().send, s, count * elem), count, hr, rc, rd, elem);
    received_back(r, rc, rd, elem);
  }

  void all_reduce(const void* s, void* r, std::size_t count, ReduceType t, ReduceOp o) requires Reductions<Inner> {
    const std::size_t bytes = count * reduce_bytes(t);
    inner_.all_reduce(to_host(bufs().send, s, bytes), host(bufs().recv, bytes), count, t, o);
    from_host(r, bufs().recv, bytes);
  }
  void reduce_scatter(const void* s, void* r, std::span<const std::size_t> counts, ReduceType t,
                      ReduceOp o) requires Reductions<Inner> {
    std::size_t total = 0;
    for (std::size_t c : counts) total += c;
    const std::size_t eb = reduce_bytes(t), mine = counts[std::size_t(rank())] * eb;
    inner_.reduce_scatter(to_host(bufs().send, s, total * eb), host(bufs().recv, mine), counts, t, o);
    from_host(r, bufs().recv, mine);
  }

  void broadcast(void* b, std::size_t count, std::size_t elem, int root) {
    const std::size_t bytes = count * elem;
    char* h = host(bufs().recv, bytes);
    if (bytes && rank() == root) copy(h, b, bytes);  // only the root's bytes go out
    inner_.broadcast(h, count, elem, root);
    from_host(b, bufs().recv, bytes);
  }

  void control_all_gather(const void* s, void* r, std::size_t bytes) { inner_.control_all_gather(s, r, bytes); }
  std::vector<int> control_all_gather_until(const void* s, void* r, std::size_t bytes,
                                            Deadline deadline) requires DeadlineControl<Inner> {
    return inner_.control_all_gather_until(s, r, bytes, deadline);
  }

  /// The run exchange through host buffers. `local()` (the own chunk, copied
  /// in `MemorySpace`) runs first; then the receive range, own chunk included,
  /// goes to the host, the peers' runs land there, and the range comes back.
  template <class Local>
  void exchange_runs(const void* s, std::span<const PeerRuns> sends, void* r, std::span<const PeerRuns> recvs,
                     std::size_t elem, Local&& local) requires PeerExchange<Inner> {
    staged_exchange(s, sends, r, recvs, elem, std::forward<Local>(local),
                    [&](const char* hs, char* hr) { inner_.exchange_runs(hs, sends, hr, recvs, elem, [] {}); });
  }
  template <class Local>
  void exchange_runs_typed(const void* s, std::span<const PeerRuns> sends, void* r, std::span<const PeerRuns> recvs,
                           std::size_t elem, Local&& local) requires TypedExchange<Inner> {
    staged_exchange(s, sends, r, recvs, elem, std::forward<Local>(local),
                    [&](const char* hs, char* hr) { inner_.exchange_runs_typed(hs, sends, hr, recvs, elem, [] {}); });
  }
  /// The same staging over a subgroup of the inner communicator (collective).
  StagedCommunicator split(int color, int key) const requires Splittable<Inner> {
    return StagedCommunicator(inner_.split(color, key));
  }

  friend bool operator==(const StagedCommunicator& a, const StagedCommunicator& b) {
    if constexpr (requires { a.inner_ == b.inner_; }) return a.inner_ == b.inner_;
    else return a.inner_.id() == b.inner_.id();
  }

 private:
  using HostBytes = Kokkos::View<char*, Kokkos::HostSpace>;
  // The staging buffers, in the communicator's resources: shared by copies,
  // released with the last copy or at Kokkos::finalize.
  struct Buffers {
    HostBytes send, recv;
  };
  Buffers& bufs() const {
    detail::release_resources_at_kokkos_finalize();
    return inner_.resources().template slot<Buffers>();
  }

  /// One past the last element any of `runs` touches.
  static std::size_t hull(std::span<const PeerRuns> runs) {
    std::size_t e = 0;
    for (const auto& pr : runs)
      if (pr.elems > 0) e = std::max(e, detail::element_at(pr.runs, pr.elems - 1) + 1);
    return e;
  }
  template <class Local, class Exchange>
  void staged_exchange(const void* s, std::span<const PeerRuns> sends, void* r, std::span<const PeerRuns> recvs,
                       std::size_t elem, Local&& local, Exchange&& exchange) {
    const std::size_t sbytes = hull(sends) * elem, rbytes = hull(recvs) * elem;
    const char* hs = to_host(bufs().send, s, sbytes);
    local();
    char* hr = host(bufs().recv, rbytes);
    if (rbytes) copy(hr, r, rbytes);  // keeps the own chunk and every byte no peer writes
    exchange(hs, hr);
    from_host(r, bufs().recv, rbytes);
  }

  static std::size_t extent(std::span<const std::size_t> c, std::span<const std::size_t> d) {
    std::size_t e = 0;
    for (std::size_t k = 0; k < c.size(); ++k)
      if (c[k]) e = std::max(e, d[k] + c[k]);
    return e;
  }
  static char* host(HostBytes& b, std::size_t bytes) {
    if (b.extent(0) < bytes) {
      b = HostBytes();
      b = HostBytes(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("dsp::staging")), bytes);
    }
    return b.data();
  }
  // Byte copies between host and MemorySpace (either direction).
  static void copy(void* dst_host, const void* src_dev, std::size_t bytes) {
    using Dev = Kokkos::View<char*, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    using Host = Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(Host(static_cast<char*>(dst_host), bytes),
                      Dev(static_cast<char*>(const_cast<void*>(src_dev)), bytes));
  }
  const char* to_host(HostBytes& b, const void* dev, std::size_t bytes) {
    char* h = host(b, bytes);
    if (bytes) copy(h, dev, bytes);
    return h;
  }
  // Copies back only the ranges peers wrote, from the receive staging buffer:
  // bytes between them keep the caller's contents with no host round trip.
  void received_back(void* dev, std::span<const std::size_t> c, std::span<const std::size_t> d,
                     std::size_t elem) const {
    using Dev = Kokkos::View<char*, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    using Host = Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    for (std::size_t k = 0; k < c.size(); ++k) {
      if (c[k] == 0) continue;
      const std::size_t at = d[k] * elem, n = c[k] * elem;
      Kokkos::deep_copy(Dev(static_cast<char*>(dev) + at, n), Host(bufs().recv.data() + at, n));
    }
  }
  static void from_host(void* dev, const HostBytes& b, std::size_t bytes) {
    if (!bytes) return;
    using Dev = Kokkos::View<char*, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    using Host = Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(Dev(static_cast<char*>(dev), bytes), Host(b.data(), bytes));
  }

  Inner inner_;
};

}  // namespace dsp
