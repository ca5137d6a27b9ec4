// SPDX-License-Identifier: BSD-3-Clause
// dsp: split-phase switches and gathers, and computing on each block as it
// lands.
//
//   auto h = dsp::start_switch<2>(x, y);   // agreement now: errors raise here, before anything is posted
//   ... work that touches neither x nor y ...
//   h.wait();                              // the data has landed; collective
//
//   dsp::switch_each<2>(x, y, [&](auto block, auto offsets, int peer) { ... });  // one call per block, as it lands
#pragma once

#include <dsp/engine/async.hpp>
#include <dsp/engine/dispatch.hpp>
#include <dsp/primitives.hpp>
#include <dsp/tensor.hpp>
#include <dsp/wire.hpp>

#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <memory>
#include <source_location>
#include <utility>

namespace dsp {
namespace detail {
template <bool Range>
auto range_or_all(std::pair<std::size_t, std::size_t> r) {
  if constexpr (Range) return r;
  else return Kokkos::ALL;
}
template <std::size_t Dim, class V, std::size_t... I>
auto block_view(const V& v, std::pair<std::size_t, std::size_t> r, std::index_sequence<I...>) {
  return Kokkos::subview(v, range_or_all<I == Dim>(r)...);
}

template <class X>
constexpr bool split_phase_ok() {
  if constexpr (is_dist_tensor_v<X>) {
    constexpr bool plain = !is_mesh_v<typename tensor_t<X>::communicator_type>;
    static_assert(plain,
                  "dsp::start_switch / start_gather / switch_each / gather_each: split-phase operations work on "
                  "tensors of a plain communicator (not a dsp::Mesh).");
    return plain;
  }
  return true;  // the primitive's own check reports a non-tensor
}
}  // namespace detail

/// A split-phase switch or gather in flight, from `start_switch` or
/// `start_gather`. It keeps both tensors alive (they share their blocks with
/// the caller's). Until the operation is waited for, the input must not be
/// written and the output must not be read or written (except a block passed
/// to an on-block function). Not copyable; movable.
///
/// `Dim` is the dim along which the blocks of the ranks land in the output
/// (the input's sharded dim).
template <class X, class Y, std::size_t Dim>
class SplitPhase {
  using M = typename X::memory_space;
  using Comm = typename X::communicator_type;

 public:
  /// Internal: made by start_switch / start_gather. `what` and `loc` name the
  /// call for the in-flight check (DSP_CHECK_IN_FLIGHT).
  SplitPhase(X x, Y y, std::unique_ptr<detail::AsyncOp<M, Comm>> op, [[maybe_unused]] const char* what = "",
             [[maybe_unused]] const std::source_location& loc = std::source_location::current())
      : x_(std::move(x)), y_(std::move(y)), op_(std::move(op)) {
#if DSP_CHECK_IN_FLIGHT
    if (op_ && !op_->finished) {
      detail::InFlightBlocks::get().mark(y_.unchecked_local().data(), detail::InFlightBlocks::site(what, loc));
      marked_ = true;
    }
#endif
  }
  SplitPhase(SplitPhase&& o) noexcept
      : x_(std::move(o.x_)), y_(std::move(o.y_)), op_(std::move(o.op_)), failure_(std::move(o.failure_)),
        waited_(o.waited_), marked_(std::exchange(o.marked_, false)) {}
  SplitPhase& operator=(SplitPhase&& o) noexcept {
    if (this != &o) {
      finish_quietly();
      x_ = std::move(o.x_), y_ = std::move(o.y_), op_ = std::move(o.op_), failure_ = std::move(o.failure_);
      waited_ = o.waited_, marked_ = std::exchange(o.marked_, false);
    }
    return *this;
  }
  SplitPhase(const SplitPhase&) = delete;
  SplitPhase& operator=(const SplitPhase&) = delete;

  /// A handle destroyed before wait() waits (collective: every rank must
  /// destroy or wait its handle); a failure then is written to stderr, since
  /// a destructor cannot throw. Call wait() to see errors.
  ~SplitPhase() { finish_quietly(); }

  /// Progresses the messages without blocking; true when every block has
  /// landed (wait() then only settles). Local, not collective. After a wait()
  /// that failed, raises that failure again: a failed handle never reports
  /// success.
  bool test() {
    if (failure_) std::rethrow_exception(failure_);
    return waited_ || !op_ || op_->test();
  }

  /// Completes the operation. Collective: with agreement checks on, the
  /// ranks then exchange their status, so a rank that failed after the start
  /// makes every rank raise (that rank its own exception, the others
  /// MismatchError). A second call after one that succeeded returns at once;
  /// after one that failed, it raises the same failure again (locally).
  void wait() {
    wait([](auto&&...) {});
  }

  /// As wait(), calling `on_block(block, offsets, peer)` for every non-empty
  /// block of the output as it lands: this rank's own block first, then each
  /// peer's in arrival order. `block` is a Kokkos view of exactly that block
  /// (a LayoutStride subview of the output), `offsets` its global index
  /// (std::array<std::size_t, Rank>), `peer` the rank it came from. A
  /// function that throws (anything) stops the calls on this rank; its error
  /// reaches every rank at the end of wait, and this rank gets the exception
  /// back.
  template <class F>
  void wait(F&& on_block) {
    using Block = decltype(std::declval<const SplitPhase&>().block(0));
    static_assert(std::is_invocable_v<F&, Block, const typename Y::extents_type&, int>,
                  "dsp::SplitPhase::wait / switch_each / gather_each: the function is called as "
                  "on_block(block, offsets, peer): a Kokkos::View of the landed block, its global offsets "
                  "(std::array<std::size_t, Rank>) and the rank it came from (int); write it as "
                  "[&](const auto& block, const auto& offsets, int peer) { ... }.");
    if constexpr (std::is_invocable_v<F&, Block, const typename Y::extents_type&, int>) wait_impl(on_block);
  }

 private:
  template <class F>
  void wait_impl(F& on_block) {
    if (failure_) std::rethrow_exception(failure_);
    if (waited_ || !op_) return;
    try {
      {
        // A busy or timed-out communicator raises here, before anything
        // completes: the handle is not waited then (a later wait may complete it).
        detail::Busy busy(op_->comm, detail::op_name(op_->sig.op));
        waited_ = true;
        unmark();  // from here on blocks land; the on-block function may look at the output
        const int me = op_->comm.rank();
        if (op_->error.empty() && count(me) > 0 && block(me).size() > 0) {
          try {
            on_block(block(me), offsets(me), me);
          } catch (...) {
            op_->fail_current();
          }
        }
        op_->complete([&](int peer) { on_block(block(peer), offsets(peer), peer); });
      }
      op_->settle();
    } catch (...) {
      if (waited_) failure_ = std::current_exception(), unmark();
      throw;
    }
  }

 public:
  /// Whether wait() has run (successfully or not).
  bool waited() const noexcept { return waited_; }
  const X& input() const noexcept { return x_; }
  const Y& output() const noexcept { return y_; }

 private:
  std::size_t count(int peer) const {
    return Partition{x_.global_extents()[Dim], std::size_t(op_->comm.size())}.count(std::size_t(peer));
  }
  std::pair<std::size_t, std::size_t> range(int peer) const {
    const Partition p{x_.global_extents()[Dim], std::size_t(op_->comm.size())};
    return {p.offset(std::size_t(peer)), p.offset(std::size_t(peer)) + p.count(std::size_t(peer))};
  }
  auto block(int peer) const {
    return detail::block_view<Dim>(y_.unchecked_local(), range(peer), std::make_index_sequence<Y::rank>{});
  }
  typename Y::extents_type offsets(int peer) const {
    auto o = y_.local_offsets();
    o[Dim] = range(peer).first;
    return o;
  }
  void unmark() noexcept {
#if DSP_CHECK_IN_FLIGHT
    if (marked_) detail::InFlightBlocks::get().unmark(y_.unchecked_local().data());
#endif
    marked_ = false;
  }
  void finish_quietly() noexcept {
    if (waited_ || !op_) return unmark();
    try {
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dsp: a split-phase operation destroyed before wait() failed: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr,
                   "dsp: a split-phase operation destroyed before wait() failed: an exception not "
                   "derived from std::exception\n");
    }
    unmark();
  }

  X x_;
  Y y_;
  std::unique_ptr<detail::AsyncOp<M, Comm>> op_;
  std::exception_ptr failure_;  // what a failed wait raised; raised again by test and wait
  bool waited_ = false;
  bool marked_ = false;  // y's block is registered in flight (DSP_CHECK_IN_FLIGHT)
};

/// Starts the switch of `x` (Sharded<i>) into the existing Sharded<D> tensor
/// `y` and returns at once with a handle: dynamic_switch<D>(x, y) in two
/// halves. The agreement check runs now: errors raise here, on every rank,
/// before anything is posted. The own block is copied now; the other blocks
/// travel point to point (MPI: nonblocking sends and receives) until wait().
/// Backends without split-phase exchange (dsp::AsyncPeerExchange) run the
/// whole switch here. Collective.
template <std::size_t D, class X, class Y>
[[nodiscard]] auto start_switch(const X& x, Y& y, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::switch_into_ok<D, X, Y>() && detail::split_phase_ok<X>()) {
    using Xt = detail::tensor_t<X>;
    using M = typename Xt::memory_space;
    detail::Signature sig = detail::signature_of(detail::Op::start_switch, x, long(D), loc);
    std::string err = detail::check_output("dsp::start_switch", x, y);
    if (!err.empty()) sig.status = static_cast<std::uint32_t>(detail::Status::bad_output);
    auto op =
        detail::start_switch<M>(x.communicator(), sig, std::move(err),
                                detail::SwitchArgs{x.local().data(), y.local().data(), sizeof(typename Xt::value_type),
                                                   x.global_extents(), Xt::layout_type::dim, D});
    return SplitPhase<Xt, detail::tensor_t<Y>, Xt::layout_type::dim>(x, y, std::move(op), "dsp::start_switch", loc);
  } else {
    return detail::Invalid{};
  }
}

/// Split-phase switches move elements exactly: this overload exists to say so
/// when a wire type is passed (dsp::Wire is for dynamic_switch and gather).
template <std::size_t D, class X, class Y>
void start_switch(const X&, Y&, Wire, std::source_location = std::source_location::current()) {
  static_assert(sizeof(X) == 0,
                "dsp::start_switch / switch_each: split-phase operations move elements exactly; a low-precision "
                "wire (dsp::Wire) applies to the blocking dynamic_switch(x[, y], wire) and gather(x[, y], wire).");
}

/// Starts the gather of `x` (Sharded<d>) into the existing Replicated tensor
/// `y`; as start_switch.
template <class X, class Y>
[[nodiscard]] auto start_gather(const X& x, Y& y, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::gather_into_ok<X, Y>() && detail::split_phase_ok<X>()) {
    using Xt = detail::tensor_t<X>;
    using M = typename Xt::memory_space;
    detail::Signature sig = detail::signature_of(detail::Op::start_gather, x, -1, loc);
    std::string err = detail::check_output("dsp::start_gather", x, y);
    if (!err.empty()) sig.status = static_cast<std::uint32_t>(detail::Status::bad_output);
    auto op =
        detail::start_gather<M>(x.communicator(), sig, std::move(err),
                                detail::GatherArgs{x.local().data(), y.local().data(), sizeof(typename Xt::value_type),
                                                   x.global_extents(), Xt::layout_type::dim});
    return SplitPhase<Xt, detail::tensor_t<Y>, Xt::layout_type::dim>(x, y, std::move(op), "dsp::start_gather", loc);
  } else {
    return detail::Invalid{};
  }
}

/// dynamic_switch<D>(x, y), calling `on_block(block, offsets, peer)` for each
/// block of y as it lands (see SplitPhase::wait): compute on arrival.
/// Collective.
template <std::size_t D, class X, class Y, class F>
void switch_each(const X& x, Y& y, F&& on_block, std::source_location loc = std::source_location::current()) {
  auto h = start_switch<D>(x, y, loc);
  if constexpr (!std::is_same_v<decltype(h), detail::Invalid>) h.wait(std::forward<F>(on_block));
}

/// gather(x, y), calling `on_block` for each block of y as it lands. Collective.
template <class X, class Y, class F>
void gather_each(const X& x, Y& y, F&& on_block, std::source_location loc = std::source_location::current()) {
  auto h = start_gather(x, y, loc);
  if constexpr (!std::is_same_v<decltype(h), detail::Invalid>) h.wait(std::forward<F>(on_block));
}

}  // namespace dsp
