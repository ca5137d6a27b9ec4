// SPDX-License-Identifier: BSD-3-Clause
// dsp: a communicator decorator that counts collectives and the bytes this
// rank sends to other ranks. Wraps any dsp::Communicator; copies share counts.
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/partition.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace dsp {

namespace detail {
/// C::Pending when C has one, else a placeholder (the members using it are
/// constrained away).
template <class C>
struct pending_of {
  struct type {};
};
template <class C>
requires requires { typename C::Pending; }
struct pending_of<C> {
  using type = typename C::Pending;
};
}  // namespace detail

/// What one rank did through a CountingCommunicator.
///
/// `bytes_sent` counts payload bytes this rank hands to the communicator for
/// OTHER ranks: the part of an all-to-all addressed to itself, and its own
/// block of an all-gather as delivered to itself, are not counted; its block
/// of an all-gather is counted once per other rank (N - 1 times), as MPI's
/// all-gather delivers it to each. A broadcast counts count * (N - 1) on the
/// root and 0 elsewhere. A point-to-point run exchange (the pairwise and
/// datatypes switch algorithms, the peer gather) counts as one collective in
/// `exchange`, with the bytes of every message it sends. A reduce-scatter
/// counts what this rank contributes to the other ranks' blocks; an
/// all-reduce counts as a reduce-scatter of the count split by the 1-D rule
/// followed by an all-gather of the pieces (what a ring algorithm sends).
/// Agreement-check traffic (control_all_gather) is kept apart in `control`
/// and `control_bytes`.
struct CommCounts {
  std::size_t all_to_all = 0;  ///< all_to_all and all_to_all_v calls
  std::size_t all_gather = 0;  ///< all_gather and all_gather_v calls
  std::size_t broadcast = 0;
  std::size_t exchange = 0;        ///< exchange_runs, exchange_runs_typed and post_runs calls
  std::size_t messages = 0;        ///< messages of those exchanges: each peer's runs in pieces (PeerRuns::piece)
  std::size_t all_reduce = 0;      ///< all_reduce calls
  std::size_t reduce_scatter = 0;  ///< reduce_scatter calls
  std::size_t control = 0;         ///< control_all_gather calls (agreement checks)
  std::size_t bytes_sent = 0;      ///< payload bytes sent to other ranks
  std::size_t control_bytes = 0;   ///< control bytes sent to other ranks

  /// Data collectives: all-to-all, all-gather, broadcast, run exchanges,
  /// all-reduce and reduce-scatter.
  constexpr std::size_t collectives() const noexcept {
    return all_to_all + all_gather + broadcast + exchange + all_reduce + reduce_scatter;
  }
  friend constexpr bool operator==(const CommCounts&, const CommCounts&) = default;
};

/// Forwards every call to the wrapped communicator `C` and records it in a
/// CommCounts shared by all copies. Same rank, size, group id, resources and
/// memory space as `C`, so dsp's workspaces and group checks treat it as `C`;
/// it has every optional capability `C` has (comm/concepts.hpp), so dsp
/// chooses the same algorithms through it as through `C`.
template <Communicator C>
class CountingCommunicator {
 public:
  using memory_space = typename C::memory_space;
  /// Every capability of C, and no other (checked against the concepts wherever dsp uses it).
  static constexpr unsigned capabilities = capabilities_declared<C>();
  using inner_type = C;
  /// Measured plans (wisdom) key a counted communicator as C: counting changes nothing about how data moves.
  static constexpr bool transparent_to_planning = true;

  explicit CountingCommunicator(C inner) : inner_(std::move(inner)), counts_(std::make_shared<CommCounts>()) {}

  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  const void* id() const { return inner_.id(); }
  const CommResources& resources() const { return inner_.resources(); }
  /// Stream ordered when the wrapped communicator is.
  static constexpr bool stream_ordered = StreamOrdered<C>;
  /// The execution space of the wrapped communicator, when it has one.
  auto execution_space() const requires OwnExecutionSpace<C> { return inner_.execution_space(); }

  /// The counts so far (shared by every copy of this communicator).
  const CommCounts& counts() const noexcept { return *counts_; }
  /// Sets every count to zero.
  void reset() noexcept { *counts_ = CommCounts{}; }
  /// The wrapped communicator.
  C& inner() noexcept { return inner_; }
  const C& inner() const noexcept { return inner_; }

  void all_to_all(const void* s, void* r, std::size_t count, std::size_t elem) {
    ++counts_->all_to_all;
    counts_->bytes_sent += count * elem * others();
    inner_.all_to_all(s, r, count, elem);
  }
  void all_to_all_v(const void* s, std::span<const std::size_t> sc, std::span<const std::size_t> sd, void* r,
                    std::span<const std::size_t> rc, std::span<const std::size_t> rd, std::size_t elem,
                    std::size_t bound) {
    ++counts_->all_to_all;
    const std::size_t me = static_cast<std::size_t>(rank());
    for (std::size_t q = 0; q < sc.size(); ++q)
      if (q != me) counts_->bytes_sent += sc[q] * elem;
    inner_.all_to_all_v(s, sc, sd, r, rc, rd, elem, bound);
  }
  void all_gather(const void* s, void* r, std::size_t count, std::size_t elem) {
    ++counts_->all_gather;
    counts_->bytes_sent += count * elem * others();
    inner_.all_gather(s, r, count, elem);
  }
  void all_gather_v(const void* s, std::size_t count, void* r, std::span<const std::size_t> rc,
                    std::span<const std::size_t> rd, std::size_t elem) {
    ++counts_->all_gather;
    counts_->bytes_sent += count * elem * others();
    inner_.all_gather_v(s, count, r, rc, rd, elem);
  }
  void broadcast(void* b, std::size_t count, std::size_t elem, int root) {
    ++counts_->broadcast;
    if (root == rank()) counts_->bytes_sent += count * elem * others();
    inner_.broadcast(b, count, elem, root);
  }
  void all_reduce(const void* s, void* r, std::size_t count, ReduceType t, ReduceOp o) requires Reductions<C> {
    ++counts_->all_reduce;
    const std::size_t n = static_cast<std::size_t>(size()), mine = Partition{count, n}.count(std::size_t(rank()));
    counts_->bytes_sent += reduce_bytes(t) * ((count - mine) + mine * others());
    inner_.all_reduce(s, r, count, t, o);
  }
  void reduce_scatter(const void* s, void* r, std::span<const std::size_t> counts, ReduceType t,
                      ReduceOp o) requires Reductions<C> {
    ++counts_->reduce_scatter;
    std::size_t total = 0;
    for (std::size_t c : counts) total += c;
    counts_->bytes_sent += reduce_bytes(t) * (total - counts[std::size_t(rank())]);
    inner_.reduce_scatter(s, r, counts, t, o);
  }
  void control_all_gather(const void* s, void* r, std::size_t bytes) {
    ++counts_->control;
    counts_->control_bytes += bytes * others();
    inner_.control_all_gather(s, r, bytes);
  }
  std::vector<int> control_all_gather_until(const void* s, void* r, std::size_t bytes,
                                            Deadline deadline) requires DeadlineControl<C> {
    ++counts_->control;
    counts_->control_bytes += bytes * others();
    return inner_.control_all_gather_until(s, r, bytes, deadline);
  }

  template <class Local>
  void exchange_runs(const void* s, std::span<const PeerRuns> sends, void* r, std::span<const PeerRuns> recvs,
                     std::size_t elem, Local&& local) requires PeerExchange<C> {
    count_exchange(sends, elem);
    inner_.exchange_runs(s, sends, r, recvs, elem, std::forward<Local>(local));
  }
  template <class Local>
  void exchange_runs_typed(const void* s, std::span<const PeerRuns> sends, void* r, std::span<const PeerRuns> recvs,
                           std::size_t elem, Local&& local) requires TypedExchange<C> {
    count_exchange(sends, elem);
    inner_.exchange_runs_typed(s, sends, r, recvs, elem, std::forward<Local>(local));
  }
  /// The split-phase exchange of the wrapped communicator, counted when posted.
  using Pending = typename detail::pending_of<C>::type;
  Pending post_runs(const void* s, std::span<const PeerRuns> sends, void* r, std::span<const PeerRuns> recvs,
                    std::size_t elem) requires AsyncPeerExchange<C> {
    count_exchange(sends, elem);
    return inner_.post_runs(s, sends, r, recvs, elem);
  }
  bool test_runs(Pending& p) requires AsyncPeerExchange<C> { return inner_.test_runs(p); }
  void wait_runs(Pending& p) requires AsyncPeerExchange<C> { inner_.wait_runs(p); }
  template <class Arrived>
  void wait_runs(Pending& p, Arrived&& arrived) requires AsyncPeerExchange<C> {
    inner_.wait_runs(p, std::forward<Arrived>(arrived));
  }

  /// A communicator of the same kind over a subgroup, counting into its own counts.
  CountingCommunicator split(int color, int key) const requires Splittable<C> {
    return CountingCommunicator(inner_.split(color, key));
  }

  /// Same group when the wrapped communicators are.
  friend bool operator==(const CountingCommunicator& a, const CountingCommunicator& b) {
    if (a.id() == b.id()) return true;
    if constexpr (requires { a.inner_ == b.inner_; }) return a.inner_ == b.inner_;
    else return false;
  }

 private:
  std::size_t others() const { return static_cast<std::size_t>(size() > 0 ? size() - 1 : 0); }
  void count_exchange(std::span<const PeerRuns> sends, std::size_t elem) {
    ++counts_->exchange;
    for (const auto& pr : sends) {
      counts_->bytes_sent += pr.elems * elem;
      if (pr.piece) counts_->messages += (pr.elems + pr.piece - 1) / pr.piece;
    }
  }

  C inner_;
  std::shared_ptr<CommCounts> counts_;
};

}  // namespace dsp
