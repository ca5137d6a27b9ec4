// SPDX-License-Identifier: BSD-3-Clause
// dsp: split-phase operations, and computing on each block as it lands. Every
// operation has them: a switch, a gather, any redistribution on a mesh or a
// communicator, of one tensor or a batch, exact or on a wire.
//
//   auto h = dsp::start_redistribute<To>(x, y);   // agreement now: errors raise here, before anything is posted
//   ... work that touches neither x nor y ...
//   h.wait();                                     // the data has landed; collective
//
//   dsp::redistribute_each<To>(x, y, [&](auto block, auto offsets, int peer) { ... });  // as each block lands
//
// start_switch / start_gather / switch_each / gather_each are the same on a
// plain communicator, with To = Sharded<D> / Replicated.
#pragma once

#include <dsp/batch.hpp>
#include <dsp/call/operate.hpp>
#include <dsp/config.hpp>
#include <dsp/primitives.hpp>
#include <dsp/redistribute.hpp>
#include <dsp/tensor.hpp>
#include <dsp/wire.hpp>

#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <memory>
#include <source_location>
#include <tuple>
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

template <class T>
inline constexpr bool is_tuple_v = false;
template <class... T>
inline constexpr bool is_tuple_v<std::tuple<T...>> = true;

template <class X>
const auto& first_of(const X& x) {
  if constexpr (is_tuple_v<X>) return std::get<0>(x);
  else return x;
}
template <class X, class F>
void for_each_tensor(const X& x, F&& f) {
  if constexpr (is_tuple_v<X>) std::apply([&](const auto&... t) { (f(t), ...); }, x);
  else f(x);
}
template <class X>
using first_t = std::remove_cvref_t<decltype(first_of(std::declval<const X&>()))>;
}  // namespace detail

/// A split-phase operation in flight, from `start_redistribute`,
/// `start_switch` or `start_gather`. It keeps the tensors alive (they share
/// their blocks with the caller's). Until the operation is waited for, the
/// inputs must not be written and the outputs must not be read or written
/// (except a block passed to an on-block function). Not copyable; movable.
///
/// X and Y are the input and output tensor types, or std::tuple<...> of them
/// for a batch. `Dim` is the dim along which the blocks of the last step land
/// in the output (its source dim; 0 when the output arrives as one block).
template <class X, class Y, std::size_t Dim>
class SplitPhase {
  using Y0 = detail::first_t<Y>;
  using M = typename Y0::memory_space;
  static constexpr bool batch = detail::is_tuple_v<Y>;

 public:
  /// Internal: made by the start_* functions. `what` and `loc` name the call
  /// for the in-flight check (DSP_CHECK_IN_FLIGHT).
  SplitPhase(X x, Y y, std::unique_ptr<detail::Flight<M>> op, [[maybe_unused]] const char* what = "",
             [[maybe_unused]] const std::source_location& loc = std::source_location::current())
      : x_(std::move(x)), y_(std::move(y)), op_(std::move(op)) {
#if DSP_CHECK_IN_FLIGHT
    if (op_ && !op_->finished()) {
      detail::for_each_tensor(
          y_, [&](const auto& t) { detail::InFlightBlocks::get().mark(t.unchecked_local().data(), what, loc); });
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
    // No on-block function: no block views are made (a file that only
    // waits does not compile Kokkos' subviews of the output).
    complete_with([](int, std::size_t, std::size_t) {});
  }

  /// As wait(), calling `on_block(block, offsets, peer)` for every non-empty
  /// block of the output as it lands: this rank's own block first, then each
  /// peer's in arrival order. `block` is a Kokkos view of exactly that block
  /// (a LayoutStride subview of the output; for a batch, a std::tuple of one
  /// such view per output, called once that peer's blocks of every tensor
  /// have landed), `offsets` its global index (std::array<std::size_t,
  /// Rank>: of its first element; under a Zigzag layout a block may straddle
  /// the output's jump, y.block_split()), `peer` the rank it came from (in
  /// the mesh's world communicator).
  /// A function that throws (anything) stops the calls on this rank; its
  /// error reaches every rank at the end of wait, and this rank gets the
  /// exception back.
  template <class F>
  void wait(F&& on_block) {
    using Block = decltype(std::declval<const SplitPhase&>().block(0, 0));
    static_assert(std::is_invocable_v<F&, Block, const typename Y0::extents_type&, int>,
                  "dsp::SplitPhase::wait / switch_each / gather_each / redistribute_each: the function is called as "
                  "on_block(block, offsets, peer): a Kokkos::View of the landed block (a std::tuple of views for a "
                  "batch), its global offsets (std::array<std::size_t, Rank>) and the rank it came from (int); write "
                  "it as [&](const auto& block, const auto& offsets, int peer) { ... }.");
    if constexpr (std::is_invocable_v<F&, Block, const typename Y0::extents_type&, int>)
      complete_with(
          [&](int peer, std::size_t off, std::size_t count) { on_block(block(off, count), offsets(off), peer); });
  }

 private:
  /// Completes and settles the operation, calling `arrived(peer, offset,
  /// count)` for each block as it lands.
  template <class A>
  void complete_with(A&& arrived) {
    if (failure_) std::rethrow_exception(failure_);
    if (waited_ || !op_) return;
    try {
      op_->complete(arrived, [&] {
        // The communicator is taken: from here on blocks land, and the
        // on-block function may look at the output.
        waited_ = true;
        unmark();
      });
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
  template <class T>
  static auto block_of(const T& t, std::size_t off, std::size_t count) {
    return detail::block_view<Dim>(t.unchecked_local(), {off, off + count}, std::make_index_sequence<T::rank>{});
  }
  auto block(std::size_t off, std::size_t count) const {
    if constexpr (batch)
      return std::apply([&](const auto&... t) { return std::make_tuple(block_of(t, off, count)...); }, y_);
    else return block_of(y_, off, count);
  }
  typename Y0::extents_type offsets(std::size_t off) const {
    const auto& y0 = detail::first_of(y_);
    auto o = y0.local_offsets();
    const Split s = y0.block_split();  // a Zigzag block: its indices past `first` start at `second`
    o[Dim] = s.dim == Dim && off >= s.first ? s.second + (off - s.first) : o[Dim] + off;
    return o;
  }
  void unmark() noexcept {
#if DSP_CHECK_IN_FLIGHT
    if (marked_)
      detail::for_each_tensor(y_,
                              [](const auto& t) { detail::InFlightBlocks::get().unmark(t.unchecked_local().data()); });
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
  std::unique_ptr<detail::Flight<M>> op_;
  std::exception_ptr failure_;  // what a failed wait raised; raised again by test and wait
  bool waited_ = false;
  bool marked_ = false;  // the outputs' blocks are registered in flight (DSP_CHECK_IN_FLIGHT)
};

namespace detail {

/// Starts `plan` on tensors xs into ys (tuples of references) and returns the
/// handle. `Dim`: the plan's block dim.
template <std::size_t Dim, std::size_t K, class Xs, class Ys, class W>
auto start_handle(const Call<K>& c, const Xs& xs, const Ys& ys, W wire) {
  auto flight = start(c, xs, ys, wire);
  const Op op = c.op;
  const std::source_location& loc = c.loc;
  auto values = [](const auto& t) {
    return std::apply([](const auto&... v) { return std::make_tuple(tensor_t<decltype(v)>(v)...); }, t);
  };
  if constexpr (std::tuple_size_v<Xs> == 1) {
    using Xt = tensor_t<std::tuple_element_t<0, Xs>>;
    using Yt = tensor_t<std::tuple_element_t<0, Ys>>;
    return SplitPhase<Xt, Yt, Dim>(std::get<0>(xs), std::get<0>(ys), std::move(flight), op_name(std::uint32_t(op)),
                                   loc);
  } else {
    using XT = decltype(values(xs));
    using YT = decltype(values(ys));
    return SplitPhase<XT, YT, Dim>(values(xs), values(ys), std::move(flight), op_name(std::uint32_t(op)), loc);
  }
}

/// The tensors of an argument that is one tensor or a dsp::batch, as a tuple of references.
template <class X>
auto tie_of(X& x) {
  if constexpr (is_batch_v<std::remove_cvref_t<X>>) return x.tensors;
  else return std::tie(x);
}

}  // namespace detail

/// Starts the switch of `x` (Sharded<i>) into the existing Sharded<D> tensor
/// `y` and returns at once with a handle: dynamic_switch<D>(x, y) in two
/// halves. The agreement check runs now: errors raise here, on every rank,
/// before anything is posted. The own block is copied now; the other blocks
/// travel point to point (MPI: nonblocking sends and receives) until wait().
/// Backends without split-phase exchange (dsp::AsyncPeerExchange) run the
/// whole switch here. `wire` as for dynamic_switch (float tensors).
/// Collective.
template <std::size_t D, class X, class Y>
[[nodiscard]] auto start_switch(const X& x, Y& y, Wire wire,
                                std::source_location loc = std::source_location::current()) {
  if constexpr (detail::switch_into_ok<D, X, Y>()) {
    static_assert(detail::wire_ok_for<X>(),
                  "dsp::start_switch(x, y, wire): a wire carries float, double, dsp::bfloat16 and dsp::float16 tensors "
                  "(which wire takes which: wire.hpp); this element type travels exact only.");
    constexpr std::size_t i = detail::tensor_t<X>::layout_type::dim;
    static constexpr MeshPlan<1> plan = detail::switch_plan(i, D);
    return detail::start_handle<detail::block_dim(plan)>(
        detail::Call<1>{.op = detail::Op::start_switch, .plan = &plan, .from = {long(i)}, .dst = long(D), .loc = loc},
        std::tie(x), std::tie(y), wire);
  } else {
    return detail::Invalid{};
  }
}
template <std::size_t D, class X, class Y>
[[nodiscard]] auto start_switch(const X& x, Y& y, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::switch_into_ok<D, X, Y>()) {
    constexpr std::size_t i = detail::tensor_t<X>::layout_type::dim;
    static constexpr MeshPlan<1> plan = detail::switch_plan(i, D);
    return detail::start_handle<detail::block_dim(plan)>(
        detail::Call<1>{.op = detail::Op::start_switch, .plan = &plan, .from = {long(i)}, .dst = long(D), .loc = loc},
        std::tie(x), std::tie(y), detail::NoWire{});
  } else {
    return detail::Invalid{};
  }
}

/// Starts the gather of `x` (Sharded<d>) into the existing Replicated tensor
/// `y`; as start_switch.
template <class X, class Y>
[[nodiscard]] auto start_gather(const X& x, Y& y, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::gather_into_ok<X, Y>()) {
    constexpr std::size_t d = detail::tensor_t<X>::layout_type::dim;
    static constexpr MeshPlan<1> plan = detail::gather_plan(d);
    return detail::start_handle<detail::block_dim(plan)>(
        detail::Call<1>{.op = detail::Op::start_gather, .plan = &plan, .from = {long(d)}, .dst = -1, .loc = loc},
        std::tie(x), std::tie(y), detail::NoWire{});
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

namespace detail {
/// The compile-time rules of a split-phase redistribution of xs into ys (one
/// tensor each, or batches).
template <class To, class XA, class YA>
constexpr bool start_redistribute_ok() {
  if constexpr (is_batch_v<std::remove_cvref_t<XA>> || is_batch_v<std::remove_cvref_t<YA>>) {
    static_assert(is_batch_v<std::remove_cvref_t<XA>> && is_batch_v<std::remove_cvref_t<YA>>,
                  "dsp::start_redistribute / redistribute_each: pass two batches (dsp::batch(x...), dsp::batch(y...)) "
                  "or two tensors.");
    if constexpr (is_batch_v<std::remove_cvref_t<XA>> && is_batch_v<std::remove_cvref_t<YA>>)
      return batch_redistribute_into_check<To, std::remove_cvref_t<XA>, std::remove_cvref_t<YA>>::value;
    return false;
  } else {
    if constexpr (redistribute_ok<To, XA>()) return output_type_ok<YA, XA, relayout_t<XA, To>>();
    return false;
  }
}
template <class To, class XA>
constexpr bool start_wire_ok() {
  if constexpr (is_batch_v<std::remove_cvref_t<XA>>)
    return wire_redistribute_ok<To, tensor_t<std::tuple_element_t<0, decltype(std::declval<XA&>().tensors)>>>();
  else {
    static_assert(wire_ok_for<XA>(),
                  "dsp::start_redistribute(x, y, wire): a wire carries float, double, dsp::bfloat16 and dsp::float16 "
                  "tensors (which wire takes which: wire.hpp); this element type travels exact only.");
    return wire_ok_for<XA>() && wire_redistribute_ok<To, XA>();
  }
}
template <class To, class XA, class YA, class W>
auto start_redistribute_impl(const XA& xa, YA& ya, W wire, const std::source_location& loc) {
  auto xs = tie_of(const_cast<XA&>(xa));
  auto ys = tie_of(ya);
  using X0 = tensor_t<std::tuple_element_t<0, decltype(xs)>>;
  using P = plan_of<X0, To>;
  const void* recut = nullptr;  // a Zigzag's or Blocks' recut steps run at the start (engine/flight.hpp)
  if constexpr (has_cut_code<typename X0::layout_type>() || has_cut_code<To>())
    recut = recut_hooks<typename X0::memory_space>();
  const MeshPlan<P::axes>* plan = &P::plan;
  const long* dst = P::to.data();
  // The same Blocks on one axis with equal sizes stays (kept_plan), where the last step delivers along the
  // same dim (the handle's type names it).
  if constexpr (keeps_blocks<typename X0::layout_type, To>() && block_dim(P::kept_plan) == block_dim(P::plan))
    if (std::get<0>(xs).block_sizes() == std::get<0>(ys).block_sizes()) plan = &P::kept_plan, dst = P::kept_to.data();
  return start_handle<block_dim(P::plan)>(Call<P::axes>{.op = Op::start_redistribute,
                                                        .plan = plan,
                                                        .from = P::from,
                                                        .dst_codes = dst,
                                                        .arg = long(switch_algorithm()),
                                                        .loc = loc,
                                                        .recut = recut},
                                          xs, ys, wire);
}
}  // namespace detail

/// Starts redistribute<To>(x, y) and returns at once with a handle (see
/// SplitPhase): the agreement check and every step but the last run now
/// (errors raise here, on every rank, before anything is posted); the last
/// step's own block is copied and its messages posted, to complete at
/// wait(). `x` and `y` are tensors, or batches (dsp::batch(...)) of the same
/// size. On backends without split-phase exchange, or when the last step is
/// not a switch or a gather, everything runs here. Collective.
template <class To, class XA, class YA>
[[nodiscard]] auto start_redistribute(const XA& x, YA&& y, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::start_redistribute_ok<To, XA, std::remove_reference_t<YA>>())
    return detail::start_redistribute_impl<To>(x, y, detail::NoWire{}, loc);
  else return detail::Invalid{};
}
/// As above, the elements of every switch and gather step on the wire as
/// `wire` (float tensors; a plan with a reduction does not compile).
template <class To, class XA, class YA>
[[nodiscard]] auto start_redistribute(const XA& x, YA&& y, Wire wire,
                                      std::source_location loc = std::source_location::current()) {
  if constexpr (detail::start_redistribute_ok<To, XA, std::remove_reference_t<YA>>() && detail::start_wire_ok<To, XA>())
    return detail::start_redistribute_impl<To>(x, y, wire, loc);
  else return detail::Invalid{};
}

/// redistribute<To>(x, y), calling `on_block(block, offsets, peer)` for each
/// block of the last step as it lands (see SplitPhase::wait). Collective.
template <class To, class XA, class YA, class F>
void redistribute_each(const XA& x, YA&& y, F&& on_block, std::source_location loc = std::source_location::current()) {
  auto h = start_redistribute<To>(x, y, loc);
  if constexpr (!std::is_same_v<decltype(h), detail::Invalid>) h.wait(std::forward<F>(on_block));
}
/// As above, on a wire.
template <class To, class XA, class YA, class F>
void redistribute_each(const XA& x, YA&& y, F&& on_block, Wire wire,
                       std::source_location loc = std::source_location::current()) {
  auto h = start_redistribute<To>(x, y, wire, loc);
  if constexpr (!std::is_same_v<decltype(h), detail::Invalid>) h.wait(std::forward<F>(on_block));
}

}  // namespace dsp
