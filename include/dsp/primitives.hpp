// SPDX-License-Identifier: BSD-3-Clause
// dsp: the three layout transitions of Dynamic Sequence Parallelism.
//   split<D>          Replicated -> Sharded<D>   local slice, no communication
//   dynamic_switch<D> Sharded<i> -> Sharded<D>   one all-to-all
//   gather            Sharded<i> -> Replicated   one all-gather
// Each comes allocating (returns the output) and into an existing output.
// None modifies its input, also on error. These are thin typed front ends:
// each checks its rules at compile time in one place (below), then runs the
// one operation of every front end (call/operate.hpp) with the one-step plan of
// its primitive.
#pragma once

#include <dsp/call/operate.hpp>
#include <dsp/layout.hpp>
#include <dsp/plan/mesh_plan.hpp>
#include <dsp/tensor.hpp>
#include <dsp/wire.hpp>

#include <cstddef>
#include <source_location>
#include <type_traits>

namespace dsp {
namespace detail {

// The compile-time half of the API: one function per primitive, each
// asserting its rules once, with a sentence that names the rule. A front end
// whose check fails returns detail::Invalid, so the assertion is the only error.

template <std::size_t D, class X>
constexpr bool switch_ok() {
  static_assert(is_dist_tensor_v<X>, "dsp::dynamic_switch: the argument must be a dsp::DistTensor.");
  if constexpr (is_dist_tensor_v<X>) {
    using Xt = tensor_t<X>;
    static_assert(D < Xt::rank, "dsp::dynamic_switch<D>: the target dim D must be less than the tensor's rank.");
    static_assert(is_sharded_v<typename Xt::layout_type> || !is_cut_v<typename Xt::layout_type>,
                  "dsp::dynamic_switch: the input must be Sharded<i>; a Zigzag<i> or Blocks<i> tensor moves "
                  "with dsp::redistribute<Sharded<D>>(x) (one exchange).");
    static_assert(is_sharded_v<typename Xt::layout_type> || is_cut_v<typename Xt::layout_type>,
                  "dsp::dynamic_switch: the input must be Sharded<i>; a Replicated tensor enters a sharding "
                  "with dsp::split<D> (no communication).");
    return D < Xt::rank && is_sharded_v<typename Xt::layout_type>;
  }
  return false;
}

template <std::size_t D, class X, class Y>
constexpr bool switch_into_ok() {
  if constexpr (switch_ok<D, X>()) return output_type_ok<Y, X, relayout_t<X, Sharded<D>>>();
  return false;
}

template <class X>
constexpr bool gather_ok() {
  static_assert(is_dist_tensor_v<X>, "dsp::gather: the argument must be a dsp::DistTensor.");
  if constexpr (is_dist_tensor_v<X>) {
    constexpr bool ok = is_sharded_v<typename tensor_t<X>::layout_type>;
    static_assert(ok,
                  "dsp::gather: the input must be Sharded<i>; a Replicated tensor is already whole on every "
                  "rank.");
    return ok;
  }
  return false;
}

template <class X, class Y>
constexpr bool gather_into_ok() {
  if constexpr (gather_ok<X>()) return output_type_ok<Y, X, relayout_t<X, Replicated>>();
  return false;
}

template <std::size_t D, class X>
constexpr bool split_ok() {
  static_assert(is_dist_tensor_v<X>, "dsp::split: the argument must be a dsp::DistTensor.");
  if constexpr (is_dist_tensor_v<X>) {
    using Xt = tensor_t<X>;
    static_assert(D < Xt::rank, "dsp::split<D>: the target dim D must be less than the tensor's rank.");
    static_assert(is_replicated_v<typename Xt::layout_type>,
                  "dsp::split: the input must be Replicated; a Sharded tensor moves to another dim with "
                  "dsp::dynamic_switch, or becomes Replicated with dsp::gather.");
    return D < Xt::rank && is_replicated_v<typename Xt::layout_type>;
  }
  return false;
}

template <std::size_t D, class X, class Y>
constexpr bool split_into_ok() {
  if constexpr (split_ok<D, X>()) return output_type_ok<Y, X, relayout_t<X, Sharded<D>>>();
  return false;
}

/// The one-step plan of a primitive on a plain communicator (the mesh of one
/// axis): a switch i -> j (none when i == j: a copy), or a gather of dim d.
constexpr MeshPlan<1> switch_plan(std::size_t i, std::size_t j) {
  MeshPlan<1> p;
  p.found = true;
  if (i != j) p.steps[0] = MeshStep{StepKind::switch_dims, 0, long(i), long(j)}, p.size = 1;
  return p;
}
constexpr MeshPlan<1> gather_plan(std::size_t d) {
  MeshPlan<1> p;
  p.found = true;
  p.steps[0] = MeshStep{StepKind::gather, 0, long(d), -1}, p.size = 1;
  return p;
}

template <std::size_t D, class X, class Y, class W>
void switch_into(const X& x, Y& y, W wire, const std::source_location& loc) {
  constexpr std::size_t i = tensor_t<X>::layout_type::dim;
  static constexpr MeshPlan<1> plan = switch_plan(i, D);
  operate(Call<1>{.op = Op::dynamic_switch, .plan = &plan, .from = {long(i)}, .dst = long(D), .loc = loc}, std::tie(x),
          std::tie(y), wire);
}

template <class X, class Y, class W>
void gather_into(const X& x, Y& y, W wire, const std::source_location& loc) {
  constexpr std::size_t d = tensor_t<X>::layout_type::dim;
  static constexpr MeshPlan<1> plan = gather_plan(d);
  operate(Call<1>{.op = Op::gather, .plan = &plan, .from = {long(d)}, .dst = -1, .loc = loc}, std::tie(x), std::tie(y),
          wire);
}

}  // namespace detail

/// Moves the shard of `x` (`Sharded<i>`) to dim D: one all-to-all (none when
/// i == D: then a copy). Returns a new Sharded<D> tensor (a recycled block
/// when one is idle). Collective. Throws on every rank when the ranks
/// disagree (MismatchError) or any rank fails locally (that rank
/// ResourceError or InvalidArgument, the others MismatchError); `x` is
/// unchanged either way. `loc` identifies the call for the agreement check
/// (dsp::set_call_site_checks).
template <std::size_t D, class X>
auto dynamic_switch(const X& x, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::switch_ok<D, X>()) {
    using Y = detail::relayout_t<X, Sharded<D>>;
    Y y = detail::allocate_output<Y>(x, detail::Op::dynamic_switch, long(D), loc);
    detail::switch_into<D>(x, y, detail::NoWire{}, loc);
    return y;
  } else {
    return detail::Invalid{};
  }
}

/// As above, into an existing Sharded<D> tensor `y` of the same global extents
/// on the same communicator (its old contents are overwritten). Once warm, it
/// allocates nothing. Collective; an invalid `y` on any rank throws on all.
template <std::size_t D, class X, class Y>
void dynamic_switch(const X& x, Y& y, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::switch_into_ok<D, X, Y>()) detail::switch_into<D>(x, y, detail::NoWire{}, loc);
}

/// Gathers a `Sharded<i>` tensor so every rank holds all of it: one all-gather.
/// Returns a new Replicated tensor. Collective; errors as dynamic_switch.
template <class X>
auto gather(const X& x, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::gather_ok<X>()) {
    using Y = detail::relayout_t<X, Replicated>;
    Y y = detail::allocate_output<Y>(x, detail::Op::gather, -1, loc);
    detail::gather_into(x, y, detail::NoWire{}, loc);
    return y;
  } else {
    return detail::Invalid{};
  }
}

/// As above, into an existing Replicated tensor `y`. Collective.
template <class X, class Y>
void gather(const X& x, Y& y, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::gather_into_ok<X, Y>()) detail::gather_into(x, y, detail::NoWire{}, loc);
}

/// Keeps this rank's block of dim D of a Replicated tensor: a local slice, no
/// communication (and so no cross-rank check). Returns a new Sharded<D> tensor.
template <std::size_t D, class X>
auto split(const X& x) {
  if constexpr (detail::split_ok<D, X>()) {
    using Y = detail::relayout_t<X, Sharded<D>>;
    Y y = Y::uninitialized(x.communicator(), x.global_extents());
    detail::split_into(x, y, D);
    return y;
  } else {
    return detail::Invalid{};
  }
}

/// As above, into an existing Sharded<D> tensor `y`. Local; throws
/// InvalidArgument (on this rank) for an output of other extents or
/// communicator, or one that shares memory with `x`.
template <std::size_t D, class X, class Y>
void split(const X& x, Y& y) {
  if constexpr (detail::split_into_ok<D, X, Y>()) detail::split_into(x, y, D);
}

}  // namespace dsp
