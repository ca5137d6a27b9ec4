// SPDX-License-Identifier: BSD-3-Clause
// dsp: redistribute a tensor between any two placements of its communicator
// or mesh, by a plan fixed at compile time; and the single exact steps on one
// mesh axis that plans are made of.
//
//   using XPencil = dsp::Axes<dsp::Sharded<1>, dsp::Sharded<2>>;
//   dsp::DistTensor<double, 3, XPencil, dsp::Mesh<2, dsp::MpiCommunicator>> x{mesh, {N0, N1, N2}};
//   auto y = dsp::redistribute<dsp::Axes<dsp::Sharded<0>, dsp::Sharded<2>>>(x);  // one all-to-all on axis 0
//   using P = dsp::redistribute_plan<XPencil, dsp::Axes<dsp::Sharded<0>, dsp::Sharded<2>>, 3>;
//   static_assert(P::size() == 1);
#pragma once

#include <dsp/batch.hpp>
#include <dsp/call/operate.hpp>
#include <dsp/call/redistribute_cut.hpp>
#include <dsp/comm/concepts.hpp>
#include <dsp/cost.hpp>
#include <dsp/layout.hpp>
#include <dsp/mesh.hpp>
#include <dsp/plan/mesh_plan.hpp>
#include <dsp/primitives.hpp>
#include <dsp/tensor.hpp>
#include <dsp/wire.hpp>

#include <Kokkos_Core.hpp>

#include <array>
#include <complex>
#include <cstdint>
#include <source_location>
#include <string>
#include <type_traits>

namespace dsp {
namespace detail {

template <class T>
constexpr bool is_complex_reduce_v = reduce_type_code<T>() == int(ReduceType::c64) || reduce_type_code<T>() ==
                                                                                          int(ReduceType::c128);

/// Whether any code is a Partial one, and whether any is Partial<Max|Min>.
template <std::size_t K>
constexpr bool has_partial(const std::array<long, K>& c) {
  for (long x : c)
    if (is_partial_code(x)) return true;
  return false;
}
template <std::size_t K>
constexpr bool has_max_min(const std::array<long, K>& c) {
  for (long x : c)
    if (x == kPartialMax || x == kPartialMin) return true;
  return false;
}

/// The compile-time rules of redistribute<To>(x), in one place.
template <class To, class X>
constexpr bool redistribute_ok() {
  static_assert(is_dist_tensor_v<X>, "dsp::redistribute: the argument must be a dsp::DistTensor.");
  if constexpr (is_dist_tensor_v<X>) {
    using Xt = tensor_t<X>;
    using G = typename Xt::communicator_type;
    constexpr bool on_mesh = is_mesh_v<G>;
    if constexpr (on_mesh) {
      constexpr bool axes_ok = [] {
        if constexpr (is_axes_v<To>) return To::size == G::axes;
        else return false;
      }();
      static_assert(axes_ok,
                    "dsp::redistribute<To>: on a dsp::Mesh, To must be dsp::Axes<...> with exactly one "
                    "placement per mesh axis.");
      if constexpr (!axes_ok) return false;
    } else {
      static_assert(Placement<To> || is_cut_v<To>,
                    "dsp::redistribute<To>: on a communicator, To is one placement: dsp::Replicated, "
                    "dsp::Sharded<D>, dsp::Partial<Op>, dsp::Zigzag<D> or dsp::Blocks<D>.");
      if constexpr (!Placement<To> && !is_cut_v<To>) return false;
      else if constexpr (involves_cut_v<typename Xt::layout_type, To>) {
        if constexpr (!layout_fits_v<To, Xt::rank>) {
          static_assert(layout_fits_v<To, Xt::rank>,
                        "dsp::redistribute<To>: To names a dim D that is not less than the tensor's rank.");
          return false;
        } else {
          return cut_pair_ok<typename Xt::layout_type, To>();
        }
      }
    }
    constexpr bool fits = layout_fits_v<To, Xt::rank>;
    static_assert(fits,
                  "dsp::redistribute<To>: a Sharded<D> in To names a dim D that is not less than the "
                  "tensor's rank.");
    if constexpr (!fits) return false;
    else {
      constexpr bool partial = has_partial(codes_v<typename Xt::layout_type>) || has_partial(codes_v<To>);
      using T = typename Xt::value_type;
      constexpr bool reducible = !partial || reduce_type_code<T>() >= 0;
      static_assert(reducible,
                    "dsp::redistribute: a Partial placement reduces elements, so the element type must be "
                    "float, double, a 32- or 64-bit integer, or a complex of float or double.");
      constexpr bool ordered = !partial || !is_complex_reduce_v<T> ||
                               !(has_max_min(codes_v<typename Xt::layout_type>) || has_max_min(codes_v<To>));
      static_assert(ordered,
                    "dsp::redistribute: Partial<Max> and Partial<Min> need ordered values; complex values "
                    "can only be summed (Partial<Sum>).");
      constexpr bool backend = !partial || Reductions<typename group_traits<G>::comm_type>;
      static_assert(backend,
                    "dsp::redistribute: a Partial placement needs a backend with reductions "
                    "(dsp::Reductions: all_reduce and reduce_scatter).");
      return reducible && ordered && backend;
    }
  }
  return false;
}

/// One plan for redistribute's front ends.
template <class X, class To>
using plan_of = redistribute_plan<typename tensor_t<X>::layout_type, To, tensor_t<X>::rank>;

/// Whether a plan has a reduction step (a low-precision wire cannot carry one).
template <std::size_t K>
constexpr bool plan_reduces(const MeshPlan<K>& plan) {
  for (const MeshStep& st : plan)
    if (st.kind == StepKind::all_reduce || st.kind == StepKind::reduce_scatter) return true;
  return false;
}

/// The dim along which the last step of a plan delivers its blocks (its
/// source dim: a switch's or a gather's), or 0 when the last step is neither
/// (then the output arrives as one block).
template <std::size_t K>
constexpr std::size_t block_dim(const MeshPlan<K>& plan) {
  if (plan.size == 0) return 0;
  const MeshStep& st = plan.steps[plan.size - 1];
  return st.kind == StepKind::switch_dims || st.kind == StepKind::gather ? std::size_t(st.from) : 0;
}

/// Runs `plan` on tensors xs into ys (tuples of references) as a
/// redistribution. Collective over their mesh or communicator.
template <class To, class Xs, class Ys, class W, std::size_t K>
void redistribute_into(const Xs& xs, const Ys& ys, W wire, const std::source_location& loc, const MeshPlan<K>& plan) {
  using X0 = tensor_t<std::tuple_element_t<0, Xs>>;
  using P = plan_of<X0, To>;
  if constexpr (has_blocks_code<typename X0::layout_type>() || has_blocks_code<To>()) {
    const MeshPlan<K>* run = &plan;
    const long* dst = P::to.data();
    if constexpr (keeps_blocks<typename X0::layout_type, To>())
      if (&plan == &P::plan && std::get<0>(xs).block_sizes() == std::get<0>(ys).block_sizes())
        run = &P::kept_plan, dst = P::kept_to.data();
    try {
      operate(Call<K>{.op = Op::redistribute,
                      .plan = run,
                      .from = P::from,
                      .dst_codes = dst,
                      .arg = long(switch_algorithm()),
                      .loc = loc,
                      .recut = recut_hooks<typename X0::memory_space>()},
              xs, ys, wire);
    } catch (const MismatchError& e) {  // name this rank's sizes: the agreement compares a hash
      std::string mine;
      if constexpr (has_blocks_code<typename X0::layout_type>())
        mine += " x's Blocks sizes " + text(std::span<const std::size_t>(std::get<0>(xs).block_sizes()));
      if constexpr (has_blocks_code<To>())
        mine += " y's Blocks sizes " + text(std::span<const std::size_t>(std::get<0>(ys).block_sizes()));
      throw MismatchError(std::string(e.what()) + " (rank " + std::to_string(std::get<0>(xs).communicator().rank()) +
                          ":" + mine + ")");
    }
    return;
  }
  // A batch of tensors of different extents on a plain communicator: the exchange between cuts, which
  // takes each tensor's extents (engine/recut.hpp).
  if constexpr (!is_mesh_v<typename X0::communicator_type> && std::tuple_size_v < Xs >> 1 &&
                Layout<typename X0::layout_type> && Layout<To>) {
    if (mixed_extents(xs)) return recut_batch_into<To>(Op::redistribute, layout_code<To>(), xs, ys, wire, loc);
  }
  const void* recut = nullptr;  // only plans between layouts with a Zigzag have recut steps
  if constexpr (has_cut_code<typename X0::layout_type>() || has_cut_code<To>()) {
    recut = recut_hooks<typename X0::memory_space>();
  } else if constexpr (std::tuple_size_v < Xs >> 1) {
    // A batch of different extents on a mesh: every step an exchange between cuts (engine/prepare.hpp).
    if (mixed_extents(xs)) recut = recut_hooks<typename X0::memory_space>();
  }
  operate(Call<K>{.op = Op::redistribute,
                  .plan = &plan,
                  .from = P::from,
                  .dst_codes = P::to.data(),
                  .arg = long(switch_algorithm()),
                  .loc = loc,
                  .recut = recut},
          xs, ys, wire);
}

/// The rules a wire adds: float tensors (for a batch, checked at run time:
/// element types may differ), and no reduction in the plan.
template <class To, class X>
constexpr bool wire_redistribute_ok() {
  if constexpr (redistribute_ok<To, X>() && involves_cut_v<typename tensor_t<X>::layout_type, To>) {
    return true;  // no Partial beside a cut (redistribute_ok)
  } else if constexpr (redistribute_ok<To, X>()) {
    constexpr bool reduces = plan_reduces(plan_of<X, To>::plan);
    static_assert(!reduces,
                  "dsp::redistribute(x, wire): the plan has a reduction (a Partial placement); a reduction's sum "
                  "cannot travel on a low-precision wire (its error would grow with the number of ranks), so "
                  "reduce first with an exact redistribute.");
    return !reduces;
  }
  return false;
}

/// Whether redistribute<To> of a plain communicator's tensor is one of the
/// paper's primitives (then it is that call: switch, gather or split).
template <class To, class X>
constexpr bool is_primitive_step() {
  using L = typename tensor_t<X>::layout_type;
  if constexpr (is_mesh_v<typename tensor_t<X>::communicator_type>) return false;
  else return Layout<L> && Layout<To> && !(is_replicated_v<L> && is_replicated_v<To>);
}

}  // namespace detail

/// Moves `x` to layout To: on a dsp::Mesh, To is dsp::Axes<...> (one
/// placement per axis); on a plain communicator, one placement. Runs
/// redistribute_plan's steps, each one collective (or none) on one mesh
/// axis's communicator; never modifies `x`. Returns a new tensor (a recycled
/// block when one is idle). Collective over the whole mesh, with one
/// agreement check first: ranks that disagree (extents, element type,
/// layouts, mesh shape, call site) or a rank that fails locally make every
/// rank raise, before anything is communicated. On a plain communicator,
/// between Replicated and Sharded layouts, it is exactly dynamic_switch,
/// gather or split.
template <class To, class X>
auto redistribute(const X& x, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::redistribute_ok<To, X>()) {
    using Xt = detail::tensor_t<X>;
    using L = typename Xt::layout_type;
    if constexpr (detail::involves_cut_v<L, To>) {
      static_assert(!is_blocks_v<To>,
                    "dsp::redistribute<Blocks<D>>(x): the output's block sizes say where the blocks go; "
                    "construct it (DistTensor{comm, extents, sizes}) and call dsp::redistribute<Blocks<D>>(x, y).");
      if constexpr (!is_blocks_v<To>) {
        using Y = detail::relayout_t<X, To>;
        Y y = detail::allocate_cut_output<Y>(x, loc);
        detail::recut_into<To>(x, y, detail::NoWire{}, loc);
        return y;
      } else {
        return detail::Invalid{};
      }
    } else if constexpr (detail::is_primitive_step<To, X>()) {
      if constexpr (is_replicated_v<L>) return split<To::dim>(x);
      else if constexpr (is_replicated_v<To>) return gather(x, loc);
      else return dynamic_switch<To::dim>(x, loc);
    } else {
      using Y = detail::relayout_t<X, To>;
      Y y = detail::allocate_output<Y>(x, detail::Op::redistribute, 0, loc);
      detail::redistribute_into<To>(std::tie(x), std::tie(y), detail::NoWire{}, loc, detail::plan_of<X, To>::plan);
      return y;
    }
  } else {
    return detail::Invalid{};
  }
}

/// As above, into an existing tensor `y` of layout To, the same global
/// extents and the same communicator or mesh. Allocates nothing once warm.
template <class To, class X, class Y>
void redistribute(const X& x, Y& y, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::redistribute_ok<To, X>()) {
    if constexpr (detail::output_type_ok<Y, X, detail::relayout_t<X, To>>()) {
      using L = typename detail::tensor_t<X>::layout_type;
      if constexpr (detail::involves_cut_v<L, To>) {
        detail::recut_into<To>(x, y, detail::NoWire{}, loc);
      } else if constexpr (detail::is_primitive_step<To, X>()) {
        if constexpr (is_replicated_v<L>) split<To::dim>(x, y);
        else if constexpr (is_replicated_v<To>) gather(x, y, loc);
        else dynamic_switch<To::dim>(x, y, loc);
      } else {
        detail::redistribute_into<To>(std::tie(x), std::tie(y), detail::NoWire{}, loc, detail::plan_of<X, To>::plan);
      }
    }
  }
}

/// redistribute<To>(x) with the elements of every switch and gather step on
/// the wire as `wire` (x must hold float; a plan with a reduction does not
/// compile). Each such step rounds once (wire.hpp): bf16 and fp16 rounding is
/// idempotent, so a multi-step plan keeps one step's bound; fp8's bound holds
/// per step. Wire::exact is the plain redistribute. Collective.
template <class To, class X>
auto redistribute(const X& x, Wire wire, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::wire_redistribute_ok<To, X>()) {
    static_assert(detail::wire_ok_for<X>(),
                  "dsp::redistribute(x, wire): a wire carries float, double, dsp::bfloat16 and dsp::float16 tensors "
                  "(which wire takes which: wire.hpp); this element type travels exact only.");
    using Y = detail::relayout_t<X, To>;
    if constexpr (detail::involves_cut_v<typename detail::tensor_t<X>::layout_type, To>) {
      static_assert(
          !is_blocks_v<To>,
          "dsp::redistribute<Blocks<D>>(x, wire): the output's block sizes say where the blocks go; "
          "construct it (DistTensor{comm, extents, sizes}) and call dsp::redistribute<Blocks<D>>(x, y, wire).");
      if constexpr (!is_blocks_v<To>) {
        Y y = detail::allocate_cut_output<Y>(x, loc);
        detail::recut_into<To>(x, y, wire, loc);
        return y;
      } else {
        return detail::Invalid{};
      }
    } else {
      Y y = detail::allocate_output<Y>(x, detail::Op::redistribute, 0, loc);
      redistribute<To>(x, y, wire, loc);
      return y;
    }
  } else {
    return detail::Invalid{};
  }
}

/// redistribute<To>(x, y) on a wire; as above.
template <class To, class X, class Y>
void redistribute(const X& x, Y& y, Wire wire, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::wire_redistribute_ok<To, X>()) {
    static_assert(detail::wire_ok_for<X>(),
                  "dsp::redistribute(x, y, wire): a wire carries float, double, dsp::bfloat16 and dsp::float16 tensors "
                  "(which wire takes which: wire.hpp); this element type travels exact only.");
    if constexpr (detail::output_type_ok<Y, X, detail::relayout_t<X, To>>() && detail::wire_ok_for<X>()) {
      if constexpr (detail::involves_cut_v<typename detail::tensor_t<X>::layout_type, To>)
        detail::recut_into<To>(x, y, wire, loc);
      else detail::redistribute_into<To>(std::tie(x), std::tie(y), wire, loc, detail::plan_of<X, To>::plan);
    }
  }
}

namespace detail {
/// The rules of a batch redistribution: the batch's own (batch.hpp), then
/// redistribute<To>'s for its first tensor.
template <class To, class... X>
constexpr bool batch_redistribute_ok() {
  if constexpr (batch_members_ok<X...>()) return redistribute_ok<To, batch_first_t<X...>>();
  return false;
}

template <class To, class XB, class YB>
struct batch_redistribute_into_check : std::false_type {};
template <class To, class... X, class... Y>
struct batch_redistribute_into_check<To, Batch<X...>, Batch<Y...>> {
  static constexpr bool value = [] {
    if constexpr (batch_redistribute_ok<To, X...>()) {
      if constexpr (sizeof...(X) == sizeof...(Y)) {
        return (output_type_ok<Y, X, relayout_t<X, To>>() && ...);
      } else {
        static_assert(sizeof...(X) == sizeof...(Y),
                      "dsp::redistribute<To>(batch(x...), batch(y...)): the two batches must hold as many tensors.");
        return false;
      }
    }
    return false;
  }();
};
}  // namespace detail

namespace detail {
template <class To, class W, class... X>
auto batch_redistribute(Batch<X...> xs, W wire, const std::source_location& loc) {
  using X0 = batch_first_t<X...>;
  if constexpr (involves_cut_v<typename tensor_t<X0>::layout_type, To>) {
    static_assert(!is_blocks_v<To>,
                  "dsp::redistribute<Blocks<D>>(batch(x...)): the outputs' block sizes say where the blocks go; "
                  "construct them (DistTensor{comm, extents, sizes}) and pass batch(y...).");
    if constexpr (!is_blocks_v<To>) {
      std::tuple<relayout_t<X, To>...> ys{std::apply(
          [&](const auto&... x) {
        return std::tuple<relayout_t<X, To>...>{allocate_cut_output<relayout_t<X, To>>(x, loc)...};
          },
          xs.tensors)};
      recut_batch_into<To>(Op::redistribute, layout_code<To>(), xs.tensors, ys, wire, loc);
      return ys;
    } else {
      return Invalid{};
    }
  } else {
    std::tuple<relayout_t<X, To>...> ys{std::apply(
        [&](const auto&... x) {
      return std::tuple<relayout_t<X, To>...>{allocate_output<relayout_t<X, To>>(x, Op::redistribute, 0, loc)...};
        },
        xs.tensors)};
    redistribute_into<To>(xs.tensors, ys, wire, loc, plan_of<X0, To>::plan);
    return ys;
  }
}
template <class To, class... X>
constexpr bool batch_wire_ok() {
  if constexpr (batch_redistribute_ok<To, X...>()) return wire_redistribute_ok<To, batch_first_t<X...>>();
  return false;
}
}  // namespace detail

/// Moves every tensor of the batch `xs` to layout To, step by step, each
/// step's exchanges of all the tensors posted together (one packed exchange,
/// or each tensor's own point-to-point exchange in flight at once), with one
/// agreement check for the whole call. Returns the new tensors as a
/// std::tuple, in order. Errors as redistribute: on every rank, the inputs
/// unchanged. Collective.
template <class To, class... X>
auto redistribute(Batch<X...> xs, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::batch_redistribute_ok<To, X...>())
    return detail::batch_redistribute<To>(xs, detail::NoWire{}, loc);
  else return detail::Invalid{};
}

/// As above, the elements of every switch and gather step on the wire as
/// `wire` (every tensor float, checked on every rank; a plan with a
/// reduction does not compile).
template <class To, class... X>
auto redistribute(Batch<X...> xs, Wire wire, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::batch_wire_ok<To, X...>()) return detail::batch_redistribute<To>(xs, wire, loc);
  else return detail::Invalid{};
}

/// As above, into the existing tensors of the batch `ys` (one per input, in
/// order, each of layout To). Once warm, it allocates nothing. Collective.
template <class To, class... X, class... Y>
void redistribute(Batch<X...> xs, Batch<Y...> ys, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::batch_redistribute_into_check<To, Batch<X...>, Batch<Y...>>::value) {
    using X0 = detail::batch_first_t<X...>;
    if constexpr (detail::involves_cut_v<typename detail::tensor_t<X0>::layout_type, To>)
      detail::recut_batch_into<To>(detail::Op::redistribute, detail::layout_code<To>(), xs.tensors, ys.tensors,
                                   detail::NoWire{}, loc);
    else detail::redistribute_into<To>(xs.tensors, ys.tensors, detail::NoWire{}, loc, detail::plan_of<X0, To>::plan);
  }
}

/// As above, on a wire.
template <class To, class... X, class... Y>
void redistribute(Batch<X...> xs, Batch<Y...> ys, Wire wire,
                  std::source_location loc = std::source_location::current()) {
  if constexpr (detail::batch_redistribute_into_check<To, Batch<X...>, Batch<Y...>>::value &&
                detail::batch_wire_ok<To, X...>()) {
    using X0 = detail::batch_first_t<X...>;
    if constexpr (detail::involves_cut_v<typename detail::tensor_t<X0>::layout_type, To>)
      detail::recut_batch_into<To>(detail::Op::redistribute, detail::layout_code<To>(), xs.tensors, ys.tensors, wire,
                                   loc);
    else detail::redistribute_into<To>(xs.tensors, ys.tensors, wire, loc, detail::plan_of<X0, To>::plan);
  }
}

namespace detail {

/// The layout `L` with axis A's placement replaced by P.
template <class L, std::size_t A, class P>
struct with_axis {
  using type = P;  // a plain communicator: the one placement
};
template <class... Q, std::size_t A, class P>
struct with_axis<Axes<Q...>, A, P> {
  template <std::size_t... I>
  static auto make(std::index_sequence<I...>) -> Axes<std::conditional_t<I == A, P, Q>...>;
  using type = decltype(make(std::index_sequence_for<Q...>{}));
};

/// The plan of the single step that sets axis A of placement `s` to code q
/// (no step when it already is q).
template <std::size_t A, long q, std::size_t K>
constexpr MeshPlan<K> one_step(const std::array<long, K>& s) {
  MeshPlan<K> m;
  const int kind = step_kind(s, A, q);
  if (kind >= 0) {
    m.steps[0] = MeshStep{static_cast<StepKind>(kind), int(A), s[A], q};
    m.size = 1;
  }
  m.found = true;
  return m;
}

/// The rules of one exact step on axis A, in one place, each with its sentence.
template <std::size_t A, class P, class X>
constexpr bool axis_step_ok() {
  static_assert(is_dist_tensor_v<X>, "dsp::redistribute_axis: the argument must be a dsp::DistTensor.");
  if constexpr (is_dist_tensor_v<X>) {
    using Xt = tensor_t<X>;
    using G = typename Xt::communicator_type;
    constexpr std::size_t K = group_traits<G>::axes;
    static_assert(A < K, "dsp::redistribute_axis<A, P>: A must be an axis of the mesh (less than its axis count).");
    static_assert(Placement<P>,
                  "dsp::redistribute_axis<A, P>: P is one placement: Replicated, Sharded<D> or "
                  "Partial<Op>.");
    if constexpr (A < K && Placement<P>) {
      static_assert(layout_fits_v<P, Xt::rank>,
                    "dsp::redistribute_axis<A, P>: Sharded<D> names a dim D that is not "
                    "less than the tensor's rank.");
      constexpr auto s = codes_v<typename Xt::layout_type>;
      constexpr long q = layout_code<P>();
      constexpr int kind = step_kind(s, A, q);
      constexpr long p = s[A];
      static_assert(!(p >= 0 && kind < 0 && q != p && !innermost(s, A, p)),
                    "dsp::redistribute_axis<A, P>: axis A is not the innermost axis sharding the dim it gives up "
                    "(a later axis also shards that dim), so one step on A cannot move it exactly; move the later "
                    "axis first, or use dsp::redistribute, which plans the steps.");
      static_assert(!(q >= 0 && kind < 0 && q != p && (p < 0 || innermost(s, A, p)) && !innermost(s, A, q)),
                    "dsp::redistribute_axis<A, P>: a later axis already shards the dim that axis A would shard; "
                    "a dim sharded by several axes is split in axis order, so axis A cannot join it in one step. "
                    "Use dsp::redistribute, which plans the steps.");
      static_assert(!(is_cut_code(p) && kind < 0 && q != p),
                    "dsp::redistribute_axis<A, P>: axis A holds a Zigzag<D> or Blocks<D>, and moving it to P is "
                    "not one exact step here (a later axis cuts its dim, or P is Partial); use dsp::redistribute, "
                    "which plans the steps.");
      static_assert(!(is_partial_code(q) && p >= 0),
                    "dsp::redistribute_axis<A, P>: Sharded -> Partial is not one step (gather first); use "
                    "dsp::redistribute.");
      static_assert(!(is_partial_code(q) && is_partial_code(p) && q != p),
                    "dsp::redistribute_axis<A, P>: one Partial cannot become another in one step; use "
                    "dsp::redistribute.");
      return (kind >= 0 || q == p) && redistribute_ok<typename with_axis<typename Xt::layout_type, A, P>::type, X>();
    }
  }
  return false;
}

}  // namespace detail

/// One exact step on mesh axis A: axis A's placement becomes P, with one
/// collective (or none) on mesh.axis(A): a switch (Sharded -> Sharded), a
/// gather (Sharded -> Replicated), a split (Replicated -> Sharded, local), an
/// all-reduce (Partial -> Replicated), a reduce-scatter (Partial -> Sharded),
/// or Replicated -> Partial (local). A step is exact only when A is the
/// innermost axis sharding each dim it touches; other steps do not compile,
/// with a sentence naming the rule. Collective over the mesh (one agreement
/// check on its world communicator); returns a new tensor.
template <std::size_t A, class P, class X>
auto redistribute_axis(const X& x, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::axis_step_ok<A, P, X>()) {
    using To = typename detail::with_axis<typename detail::tensor_t<X>::layout_type, A, P>::type;
    using Y = detail::relayout_t<X, To>;
    using Pl = detail::plan_of<X, To>;
    constexpr MeshPlan<Pl::axes> one = detail::one_step<A, detail::layout_code<P>()>(Pl::from);
    Y y = detail::allocate_output<Y>(x, detail::Op::redistribute, 0, loc);
    detail::redistribute_into<To>(std::tie(x), std::tie(y), detail::NoWire{}, loc, one);
    return y;
  } else {
    return detail::Invalid{};
  }
}

}  // namespace dsp
