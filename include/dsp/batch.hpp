// SPDX-License-Identifier: BSD-3-Clause
// dsp: switches of several tensors at once, and switches on a low-precision
// wire.
//
//   auto [q1, k1, v1] = dsp::dynamic_switch<2>(dsp::batch(q, k, v));    // one agreement, one all-to-all
//   dsp::dynamic_switch<2>(dsp::batch(q, k, v), dsp::batch(q1, k1, v1));  // into existing tensors
//   auto y = dsp::dynamic_switch<2>(x, dsp::Wire::bf16);                 // half the bytes on the wire
//   dsp::dynamic_switch<2>(dsp::batch(q, k, v), dsp::batch(q1, k1, v1), dsp::Wire::fp8_e4m3);
//   auto r = dsp::gather(x, dsp::Wire::bf16);                            // a gather on a wire
//
// A batch holds 1 to 16 tensors of one layout Sharded<i>, one tensor rank, one
// communicator type and memory space, and equal global extents on one
// communicator; element types may differ. Its switch is one collective: one
// agreement check, one all-to-all whose chunk for each peer carries every
// tensor's section (engine/packed_steps.hpp). Mid-size and large tensors, whose own
// switches would move without copies (pairwise or MPI datatypes), keep the
// one agreement and move each with its own plan, the point-to-point ones all
// in flight together.
#pragma once

#include <dsp/call/operate.hpp>
#include <dsp/call/redistribute_cut.hpp>
#include <dsp/layout.hpp>
#include <dsp/primitives.hpp>
#include <dsp/tensor.hpp>
#include <dsp/wire.hpp>

#include <array>
#include <cstddef>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace dsp {

/// References to the tensors of a batch (see dsp::batch). Holds no tensor:
/// use it within the statement that made it.
template <class... X>
struct Batch {
  std::tuple<X&...> tensors;
  static constexpr std::size_t size = sizeof...(X);
};

/// Groups tensors for one switch: `dynamic_switch<D>(batch(q, k, v))`.
template <class... X>
Batch<X...> batch(X&... x) {
  return Batch<X...>{std::tie(x...)};
}

namespace detail {

template <class T>
inline constexpr bool is_batch_v = false;
template <class... X>
inline constexpr bool is_batch_v<Batch<X...>> = true;

/// The first tensor type of a batch.
template <class... X>
using batch_first_t = tensor_t<std::tuple_element_t<0, std::tuple<X...>>>;

/// The rules every batch obeys, whatever moves it: 1 to 16 tensors of one
/// tensor rank, layout, communicator (or mesh) type and memory space; element
/// types may differ. Each rule a sentence; only the first failing one fires.
template <class... X>
constexpr bool batch_members_ok() {
  constexpr std::size_t n = sizeof...(X);
  static_assert(n >= 1 && n <= kMaxBatch, "dsp::batch: a batch holds 1 to 16 tensors.");
  if constexpr (n >= 1 && n <= kMaxBatch) {
    static_assert((is_dist_tensor_v<X> && ...), "dsp::batch: every argument must be a dsp::DistTensor.");
    if constexpr ((is_dist_tensor_v<X> && ...)) {
      using X0 = batch_first_t<X...>;
      constexpr bool same = ((tensor_t<X>::rank == X0::rank &&
                              std::is_same_v<typename tensor_t<X>::layout_type, typename X0::layout_type> &&
                              std::is_same_v<typename tensor_t<X>::communicator_type, typename X0::communicator_type> &&
                              std::is_same_v<typename tensor_t<X>::memory_space, typename X0::memory_space>)&&...);
      static_assert(same,
                    "dsp::batch: the tensors of a batch must share the tensor rank, the layout, the communicator "
                    "(or mesh) type and the memory space (element types may differ).");
      return same;
    }
  }
  return false;
}

template <std::size_t D, class... X>
constexpr bool batch_switch_ok() {
  if constexpr (batch_members_ok<X...>()) {
    using X0 = batch_first_t<X...>;
    constexpr bool plain = !is_mesh_v<typename X0::communicator_type>;
    static_assert(plain,
                  "dsp::batch: dynamic_switch of a batch works on tensors of a plain communicator; on a "
                  "dsp::Mesh, move a batch with dsp::redistribute<To>(dsp::batch(x...)).");
    if constexpr (plain) return switch_ok<D, X0>();
  }
  return false;
}

template <std::size_t D, class XB, class YB>
struct batch_into_check : std::false_type {};
template <std::size_t D, class... X, class... Y>
struct batch_into_check<D, Batch<X...>, Batch<Y...>> {
  static constexpr bool value = [] {
    if constexpr (batch_switch_ok<D, X...>()) {
      if constexpr (sizeof...(X) == sizeof...(Y)) {
        constexpr bool ok = (std::is_same_v<tensor_t<Y>, relayout_t<X, Sharded<D>>> && ...);
        static_assert(ok,
                      "dsp::dynamic_switch<D>(batch(x...), batch(y...)): each y must be a DistTensor with its x's "
                      "element type, rank, communicator and memory space, and layout Sharded<D>.");
        return ok;
      } else {
        static_assert(sizeof...(X) == sizeof...(Y),
                      "dsp::dynamic_switch<D>(batch(x...), batch(y...)): the two batches must hold as many tensors.");
        return false;
      }
    }
    return false;
  }();
};

/// A batch switch of tensors xs into ys (tuples of references). Collective.
template <std::size_t D, class Xs, class Ys>
void batch_switch_into(const Xs& xs, const Ys& ys, Wire wire, const std::source_location& loc) {
  constexpr std::size_t i = tensor_t<std::tuple_element_t<0, Xs>>::layout_type::dim;
  // Tensors of different extents (Q with GQA's K and V): the exchange between cuts, which takes each
  // tensor's extents (engine/recut.hpp).
  if constexpr (std::tuple_size_v < Xs >> 1)
    if (mixed_extents(xs)) return recut_batch_into<Sharded<D>>(Op::batch_switch, long(D), xs, ys, wire, loc);
  static constexpr MeshPlan<1> plan = switch_plan(i, D);
  operate(Call<1>{.op = Op::batch_switch,
                  .plan = &plan,
                  .from = {long(i)},
                  .dst = long(D),
                  .arg = long(std::tuple_size_v<Xs>),
                  .loc = loc},
          xs, ys, wire);
}

}  // namespace detail

/// Switches every tensor of the batch `xs` (each Sharded<i>) to dim D in one
/// collective and returns the new Sharded<D> tensors as a std::tuple, in
/// order. Errors as dynamic_switch: on every rank, the inputs unchanged.
/// `wire` (float tensors only) sets how the elements travel (wire.hpp).
template <std::size_t D, class... X>
auto dynamic_switch(Batch<X...> xs, Wire wire = Wire::exact,
                    std::source_location loc = std::source_location::current()) {
  if constexpr (detail::batch_switch_ok<D, X...>()) {
    std::tuple<detail::relayout_t<X, Sharded<D>>...> ys{std::apply(
        [&](const auto&... x) {
      return std::tuple<detail::relayout_t<X, Sharded<D>>...>{
          detail::allocate_output<detail::relayout_t<X, Sharded<D>>>(x, detail::Op::batch_switch, long(D), loc)...};
        },
        xs.tensors)};
    detail::batch_switch_into<D>(xs.tensors, ys, wire, loc);
    return ys;
  } else {
    return detail::Invalid{};
  }
}

/// As above, into the existing Sharded<D> tensors of the batch `ys` (one per
/// input, in order). Once warm, it allocates nothing. Collective.
template <std::size_t D, class... X, class... Y>
void dynamic_switch(Batch<X...> xs, Batch<Y...> ys, Wire wire = Wire::exact,
                    std::source_location loc = std::source_location::current()) {
  if constexpr (detail::batch_into_check<D, Batch<X...>, Batch<Y...>>::value)
    detail::batch_switch_into<D>(xs.tensors, ys.tensors, wire, loc);
}

/// dynamic_switch<D>(x) with the elements on the wire as `wire` (x must hold
/// float). Wire::exact is the plain switch.
template <std::size_t D, class X>
auto dynamic_switch(const X& x, Wire wire, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::switch_ok<D, X>()) {
    if (wire == Wire::exact) return dynamic_switch<D>(x, loc);
    using Y = detail::relayout_t<X, Sharded<D>>;
    Y y = detail::allocate_output<Y>(x, detail::Op::dynamic_switch, long(D), loc);
    dynamic_switch<D>(x, y, wire, loc);
    return y;
  } else {
    return detail::Invalid{};
  }
}

/// dynamic_switch<D>(x, y) with the elements on the wire as `wire`.
template <std::size_t D, class X, class Y>
void dynamic_switch(const X& x, Y& y, Wire wire, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::switch_into_ok<D, X, Y>()) {
    static_assert(detail::wire_ok_for<X>(),
                  "dsp::dynamic_switch(x, wire) and (x, y, wire): a wire carries float, double, dsp::bfloat16 and "
                  "dsp::float16 tensors (which wire takes which: wire.hpp); this element type travels exact only.");
    if constexpr (detail::wire_ok_for<X>()) {
      detail::switch_into<D>(x, y, wire, loc);
    }
  }
}

/// gather(x) with the blocks on the wire as `wire` (x must hold float): every
/// rank receives the same values, each rounded through the wire type
/// (wire.hpp). Wire::exact is the plain gather. Collective.
template <class X>
auto gather(const X& x, Wire wire, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::gather_ok<X>()) {
    using Y = detail::relayout_t<X, Replicated>;
    if (wire == Wire::exact) return gather(x, loc);
    Y y = detail::allocate_output<Y>(x, detail::Op::gather, -1, loc);
    gather(x, y, wire, loc);
    return y;
  } else {
    return detail::Invalid{};
  }
}

/// gather(x, y) with the blocks on the wire as `wire`. Collective.
template <class X, class Y>
void gather(const X& x, Y& y, Wire wire, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::gather_into_ok<X, Y>()) {
    static_assert(detail::wire_ok_for<X>(),
                  "dsp::gather(x, y, wire): a wire carries float, double, dsp::bfloat16 and dsp::float16 tensors "
                  "(which wire takes which: wire.hpp); this element type travels exact only.");
    if constexpr (detail::wire_ok_for<X>()) {
      detail::gather_into(x, y, wire, loc);
    }
  }
}

}  // namespace dsp
