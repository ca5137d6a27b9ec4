// SPDX-License-Identifier: BSD-3-Clause
// dsp: typed pipelines of layout transitions.
//
//   constexpr auto p = dsp::steps::split<1> | dsp::steps::switch_to<2>
//                    | dsp::steps::switch_to<1> | dsp::steps::gather;
//   auto y = p(x);                         // runs split<1>, dynamic_switch<2>, dynamic_switch<1>, gather
//   constexpr auto back = p.adjoint();     // split<1> | switch_to<2> | switch_to<1> | gather, derived from types
//   static_assert(p.cost(std::array<std::size_t, 4>{B, T, S, C}, sizeof(float), N, 0).max_bytes <= budget);
//
// The steps live in dsp::steps because dsp::split, dsp::gather (and
// dsp::dynamic_switch) already name the primitives. steps::to<L> is a
// dsp::redistribute to layout L: on a plain communicator any placement
// (Partial included), on a dsp::Mesh any dsp::Axes<...>; it accepts any input.
//
// A composition that cannot run (split after a step that leaves the tensor
// Sharded, switch_to or gather after one that leaves it Replicated) does not
// compile; neither does applying a pipeline to a tensor whose layout the first
// step does not accept, or whose rank a step's dim exceeds.
#pragma once

#include <dsp/cost.hpp>
#include <dsp/layout.hpp>
#include <dsp/primitives.hpp>
#include <dsp/redistribute.hpp>
#include <dsp/tensor.hpp>

#include <array>
#include <cstddef>
#include <source_location>
#include <tuple>
#include <type_traits>
#include <utility>

namespace dsp {

namespace detail {
template <std::size_t D>
struct SplitStep {
  static constexpr std::size_t dim = D;
};
template <std::size_t D>
struct SwitchStep {
  static constexpr std::size_t dim = D;
};
struct GatherStep {};
/// steps::to<L>: a planned redistribution to layout L.
template <class L>
struct ToStep {};

/// What a step needs of the layout before it, and what it leaves.
enum class LayoutKind { any, sharded, replicated, other };
template <class L>
constexpr LayoutKind cat_of() {
  if constexpr (is_sharded_v<L>) return LayoutKind::sharded;
  else if constexpr (is_replicated_v<L>) return LayoutKind::replicated;
  else return LayoutKind::other;
}

/// The layout of the gradient of a tensor of layout L (for adjoints): the
/// gradient of a Partial tensor is Replicated (every partial term has the
/// gradient of the sum), of anything else the same layout.
template <class L>
struct grad_layout {
  using type = std::conditional_t<is_partial_v<L>, Replicated, L>;
};
template <class... P>
struct grad_layout<Axes<P...>> {
  using type = Axes<typename grad_layout<P>::type...>;
};

template <class S>
struct step_traits;
template <std::size_t D>
struct step_traits<SplitStep<D>> {
  static constexpr LayoutKind needs = LayoutKind::replicated;
  static constexpr LayoutKind leaves = LayoutKind::sharded;
  static constexpr std::size_t max_dim = D;
  template <class In>
  using out = Sharded<D>;
  template <class In>
  using adjoint = GatherStep;  // Sharded<D> -> Replicated
};
template <std::size_t D>
struct step_traits<SwitchStep<D>> {
  static constexpr LayoutKind needs = LayoutKind::sharded;
  static constexpr LayoutKind leaves = LayoutKind::sharded;
  static constexpr std::size_t max_dim = D;
  template <class In>
  using out = Sharded<D>;
  template <class In>
  using adjoint = SwitchStep<In::dim>;  // Sharded<D> -> Sharded<i>
};
template <>
struct step_traits<GatherStep> {
  static constexpr LayoutKind needs = LayoutKind::sharded;
  static constexpr LayoutKind leaves = LayoutKind::replicated;
  static constexpr std::size_t max_dim = 0;
  template <class In>
  using out = Replicated;
  template <class In>
  using adjoint = SplitStep<In::dim>;  // Replicated -> Sharded<i>
};
template <class L>
struct step_traits<ToStep<L>> {
  static constexpr LayoutKind needs = LayoutKind::any;
  static constexpr LayoutKind leaves = cat_of<L>();
  static constexpr std::size_t max_dim = fitting_rank<L, L>() - 1;
  template <class In>
  using out = L;
  // The adjoint of a redistribution In -> L moves the gradient back, L -> In,
  // with Partial placements read as Replicated: the adjoint of a
  // reduce-scatter (Partial -> Sharded) is an all-gather (Sharded ->
  // Replicated), of an all-reduce the identity.
  template <class In>
  using adjoint = ToStep<typename grad_layout<In>::type>;
};

template <class S, class L>
inline constexpr bool step_accepts_v = step_traits<S>::needs == LayoutKind::any || step_traits<S>::needs == cat_of<L>();

template <class S>
inline constexpr bool is_to_step_v = false;
template <class L>
inline constexpr bool is_to_step_v<ToStep<L>> = true;

/// Marks a pipeline whose input layout its first step does not fix.
struct UnknownLayout {};

/// std::tuple<L0, L1, ..., LK>: the layout before each step and after the last.
template <class In, class... Steps>
struct layout_chain;
template <class In>
struct layout_chain<In> {
  using type = std::tuple<In>;
};
template <class In, class S, class... Rest>
struct layout_chain<In, S, Rest...> {
  using next = typename step_traits<S>::template out<In>;
  using type = decltype(std::tuple_cat(std::declval<std::tuple<In>>(),
                                       std::declval<typename layout_chain<next, Rest...>::type>()));
};

template <class... Steps>
struct first_input {
  using type = UnknownLayout;
};
template <std::size_t D, class... Rest>
struct first_input<SplitStep<D>, Rest...> {
  using type = Replicated;
};

template <class A, class B>
constexpr bool junction_ok() {
  return step_traits<B>::needs == LayoutKind::any || step_traits<B>::needs == step_traits<A>::leaves;
}

template <class... Steps>
constexpr bool valid_chain() {
  if constexpr (sizeof...(Steps) < 2) {
    return true;
  } else {
    constexpr LayoutKind needs[] = {step_traits<Steps>::needs...};
    constexpr LayoutKind leaves[] = {step_traits<Steps>::leaves...};
    for (std::size_t k = 1; k < sizeof...(Steps); ++k)
      if (needs[k] != LayoutKind::any && needs[k] != leaves[k - 1]) return false;
    return true;
  }
}
}  // namespace detail

/// A pipeline's cost on one rank: each step's, and the sums. `max_bytes` of the
/// total is the largest total over ranks (not the sum of the steps' maxima).
template <std::size_t K>
struct PipelineCost {
  std::array<TransitionCost, K> steps{};
  std::size_t collectives = 0;
  std::size_t bytes = 0;
  std::size_t max_bytes = 0;
};

/// A sequence of layout transitions, checked and priced at compile time.
/// Build one with `|` from dsp::steps::split<D>, switch_to<D>, gather and to<L>.
template <class... Steps>
class Pipeline {
  static_assert(detail::valid_chain<Steps...>(),
                "dsp::Pipeline: each step must accept the layout the step before it leaves (split needs "
                "Replicated, switch_to and gather need Sharded; to<L> takes any).");

 public:
  /// Number of steps.
  static constexpr std::size_t size = sizeof...(Steps);
  /// The input layout the first step fixes (Replicated before a split), else detail::UnknownLayout.
  using default_input = typename detail::first_input<Steps...>::type;
  /// The layout after the last step, for input layout In.
  template <class In>
  using output_layout = std::tuple_element_t<size, typename detail::layout_chain<In, Steps...>::type>;

  /// Runs the steps on `x` in order and returns the result. `x` is not
  /// modified; the result is a new tensor, except for the empty pipeline,
  /// which returns `x` itself (a copy of the handle, sharing its block). Each
  /// step is collective as its primitive is; `loc`, the pipeline's call site,
  /// identifies every step's collective for the agreement check.
  template <class X>
  auto operator()(const X& x, std::source_location loc = std::source_location::current()) const {
    if constexpr (applicable<X>()) return run<Steps...>(x, loc);
    else return detail::Invalid{};
  }

  /// The adjoint pipeline for backward passes, derived from the types: steps in
  /// reverse order, switch i->j as j->i, split<D> as gather, gather from
  /// Sharded<D> as split<D>, to<L> from In as to<In> (Partial read as
  /// Replicated: the adjoint of a reduce-scatter is an all-gather). `In` is
  /// the forward input layout (defaults to the one the first step fixes).
  template <class In = default_input>
  constexpr auto adjoint() const {
    if constexpr (check_input<In>()) {
      using Chain = typename detail::layout_chain<In, Steps...>::type;
      return adjoint_impl<Chain>(std::make_index_sequence<size>{});
    } else {
      return detail::Invalid{};
    }
  }
  /// Same as adjoint() for pipelines without Partial placements, where every
  /// step is invertible and its inverse is its adjoint.
  template <class In = default_input>
  constexpr auto inverse() const {
    return adjoint<In>();
  }

  /// What each step and the whole pipeline send from rank `rank` of `n` (a
  /// plain communicator), for a tensor of global extents `e` with
  /// `elem_bytes`-byte elements entering as `In`. constexpr: usable in
  /// static_assert. Throws dsp::InvalidArgument when n == 0 or rank >= n, or
  /// when a byte count overflows std::size_t.
  template <class In = default_input, std::size_t R>
  constexpr PipelineCost<size> cost(const std::array<std::size_t, R>& e, std::size_t elem_bytes, std::size_t n,
                                    std::size_t rank) const {
    constexpr bool input_ok = check_input<In>();
    static_assert(((step_max_dim<Steps>() < R) && ...),
                  "dsp::Pipeline: a step names a dim D that is not less than the tensor's rank.");
    detail::check_cost_args(n, rank);
    PipelineCost<size> c;
    if constexpr (input_ok && ((step_max_dim<Steps>() < R) && ...)) {
      using Chain = typename detail::layout_chain<In, Steps...>::type;
      c = cost_on<Chain>(e, elem_bytes, n, rank, std::make_index_sequence<size>{});
      for (std::size_t q = 0; q < n; ++q) {
        const std::size_t b = cost_on<Chain>(e, elem_bytes, n, q, std::make_index_sequence<size>{}).bytes;
        if (b > c.max_bytes) c.max_bytes = b;
      }
    }
    return c;
  }

  /// The same on the rank at `coords` of a mesh of `shape`, for pipelines of
  /// steps::to<Axes<...>>. `max_bytes` is the largest total over the mesh's
  /// ranks.
  template <class In, std::size_t R, std::size_t K>
  constexpr PipelineCost<size> cost(const std::array<std::size_t, R>& e, std::size_t elem_bytes,
                                    const std::array<int, K>& shape, const std::array<int, K>& coords) const {
    static_assert((detail::is_to_step_v<Steps> && ...),
                  "dsp::Pipeline: on a mesh, every step is a dsp::steps::to<dsp::Axes<...>>.");
    detail::check_mesh_args(shape, coords);
    PipelineCost<size> c;
    if constexpr ((detail::is_to_step_v<Steps> && ...)) {
      using Chain = typename detail::layout_chain<In, Steps...>::type;
      c = cost_on<Chain>(e, elem_bytes, shape, coords, std::make_index_sequence<size>{});
      c.max_bytes = detail::max_over_mesh(shape, [&](const std::array<int, K>& q) {
        return cost_on<Chain>(e, elem_bytes, shape, q, std::make_index_sequence<size>{}).bytes;
      });
    }
    return c;
  }

 private:
  template <class S>
  static constexpr std::size_t step_max_dim() {
    return detail::step_traits<S>::max_dim;
  }

  template <class L>
  static constexpr bool first_accepts() {
    if constexpr (size == 0) return true;
    else return detail::step_accepts_v<std::tuple_element_t<0, std::tuple<Steps...>>, L>;
  }

  /// The rules for an input layout named for adjoint() or cost(): one place.
  template <class In>
  static constexpr bool check_input() {
    static_assert(!std::is_same_v<In, detail::UnknownLayout>,
                  "dsp::Pipeline: the first step does not fix the input layout; name it, as in "
                  "p.adjoint<dsp::Sharded<1>>() or p.cost<dsp::Sharded<1>>(...).");
    if constexpr (!std::is_same_v<In, detail::UnknownLayout>) {
      constexpr bool layout = Placement<In> || is_axes_v<In>;
      static_assert(layout,
                    "dsp::Pipeline: the input layout must be dsp::Replicated, dsp::Sharded<D>, dsp::Partial<Op> or "
                    "dsp::Axes<...>.");
      if constexpr (layout) {
        static_assert(first_accepts<In>(),
                      "dsp::Pipeline: the first step does not accept the input's layout (split needs a Replicated "
                      "tensor, switch_to and gather a Sharded one).");
        return first_accepts<In>();
      }
    }
    return false;
  }

  /// The rules for applying the pipeline to a tensor: one place.
  template <class X>
  static constexpr bool applicable() {
    static_assert(is_dist_tensor_v<X>, "dsp::Pipeline: the argument must be a dsp::DistTensor.");
    if constexpr (is_dist_tensor_v<X>) {
      using Xt = std::remove_cvref_t<X>;
      constexpr bool fits = ((step_max_dim<Steps>() < Xt::rank) && ...);
      static_assert(fits, "dsp::Pipeline: a step names a dim D that is not less than the tensor's rank.");
      constexpr bool accepted = first_accepts<typename Xt::layout_type>();
      static_assert(accepted,
                    "dsp::Pipeline: the first step does not accept the input's layout (split needs a Replicated "
                    "tensor, switch_to and gather a Sharded one).");
      return fits && accepted;
    }
    return false;
  }

  template <class... S, class X>
  static auto run(const X& x, const std::source_location& loc) {
    if constexpr (sizeof...(S) == 0) return x;
    else return run_from<S...>(x, loc);
  }
  template <class S, class... Rest, class X>
  static auto run_from(const X& x, const std::source_location& loc) {
    return run<Rest...>(run_step(S{}, x, loc), loc);
  }
  template <std::size_t D, class X>
  static auto run_step(detail::SplitStep<D>, const X& x, const std::source_location&) {
    return ::dsp::split<D>(x);
  }
  template <std::size_t D, class X>
  static auto run_step(detail::SwitchStep<D>, const X& x, const std::source_location& loc) {
    return ::dsp::dynamic_switch<D>(x, loc);
  }
  template <class X>
  static auto run_step(detail::GatherStep, const X& x, const std::source_location& loc) {
    return ::dsp::gather(x, loc);
  }
  template <class L, class X>
  static auto run_step(detail::ToStep<L>, const X& x, const std::source_location& loc) {
    return ::dsp::redistribute<L>(x, loc);
  }

  template <class Chain, std::size_t... I>
  static constexpr auto adjoint_impl(std::index_sequence<I...>) {
    using StepTuple = std::tuple<Steps...>;
    return Pipeline<typename detail::step_traits<std::tuple_element_t<size - 1 - I, StepTuple>>::template adjoint<
        std::tuple_element_t<size - 1 - I, Chain>>...>{};
  }

  /// One step from layout From to To, on rank `rank` of `n` or at `coords` of a mesh.
  template <class S, class From, class To, std::size_t R, class Shape>
  static constexpr TransitionCost step_cost(const std::array<std::size_t, R>& e, std::size_t elem_bytes,
                                            const Shape& shape, const Shape& where) {
    static_assert(!detail::has_blocks_code<From>() && !detail::has_blocks_code<To>(),
                  "dsp::Pipeline::cost: a Blocks<D> layout's cost depends on its run-time sizes; use "
                  "redistribute_plan<From, To>::cost(e, elem_bytes, shape, coords, from_sizes, to_sizes) for that "
                  "step.");
    if constexpr (detail::is_to_step_v<S>) {
      using P = redistribute_plan<From, To, R>;
      MeshPlan<P::axes> plan = P::plan;
      std::array<int, P::axes> sh{}, at{};
      if constexpr (std::is_integral_v<Shape>) sh[0] = int(shape), at[0] = int(where);
      else sh = shape, at = where;
      const auto rc = detail::plan_cost_on(plan, P::from, e, elem_bytes, sh, at);
      TransitionCost t;
      t.primitive = Primitive::redistribute;
      t.collective = P::collectives() ? Collective::planned : Collective::none;
      t.collectives = rc.collectives;
      t.bytes = rc.bytes;
      return t;
    } else {
      return transition_cost<From, To>(e, elem_bytes, shape, where);
    }
  }

  template <class Chain, std::size_t R, class Shape, std::size_t... I>
  static constexpr PipelineCost<size> cost_on(const std::array<std::size_t, R>& e, std::size_t elem_bytes,
                                              const Shape& shape, const Shape& where, std::index_sequence<I...>) {
    using StepTuple = std::tuple<Steps...>;
    PipelineCost<size> c;
    ((c.steps[I] = step_cost<std::tuple_element_t<I, StepTuple>, std::tuple_element_t<I, Chain>,
                             std::tuple_element_t<I + 1, Chain>>(e, elem_bytes, shape, where)),
     ...);
    for (const auto& s : c.steps) {
      c.collectives += s.collectives;
      c.bytes = detail::checked_add(c.bytes, s.bytes);
    }
    return c;
  }
};

namespace detail {
template <class... A>
using last_step_t = std::tuple_element_t<sizeof...(A) - 1, std::tuple<A...>>;
}  // namespace detail

/// Composes two pipelines: b runs after a. Does not compile when b's first step
/// cannot take the layout a's last step leaves.
template <class... A, class... B>
constexpr auto operator|(Pipeline<A...>, Pipeline<B...>) {
  if constexpr (sizeof...(A) == 0 || sizeof...(B) == 0) {
    return Pipeline<A..., B...>{};
  } else {
    using Last = detail::last_step_t<A...>;
    using First = std::tuple_element_t<0, std::tuple<B...>>;
    constexpr auto needs = detail::step_traits<First>::needs;
    constexpr auto leaves = detail::step_traits<Last>::leaves;
    constexpr bool split_after_sharded =
        needs == detail::LayoutKind::replicated && leaves == detail::LayoutKind::sharded;
    constexpr bool sharded_after_gather =
        needs == detail::LayoutKind::sharded && leaves == detail::LayoutKind::replicated;
    static_assert(!split_after_sharded,
                  "dsp::Pipeline: split<D> needs a Replicated tensor, but the step before it leaves the tensor "
                  "Sharded. Move a shard with switch_to<D>.");
    static_assert(!sharded_after_gather,
                  "dsp::Pipeline: switch_to<D> and gather need a Sharded tensor, but the step before them "
                  "(gather) leaves the tensor Replicated. Enter a sharding with split<D>.");
    constexpr bool other = !split_after_sharded && !sharded_after_gather && !detail::junction_ok<Last, First>();
    static_assert(!other,
                  "dsp::Pipeline: split<D>, switch_to<D> and gather need a Replicated or Sharded tensor on a plain "
                  "communicator, but the step before them leaves a Partial or mesh layout; continue with to<L>.");
    if constexpr (detail::junction_ok<Last, First>()) return Pipeline<A..., B...>{};
    else return detail::Invalid{};
  }
}

/// The steps a pipeline is built from. Each is a one-step dsp::Pipeline.
namespace steps {
/// Replicated -> Sharded<D>: a local slice, no communication.
template <std::size_t D>
inline constexpr Pipeline<detail::SplitStep<D>> split{};
/// `Sharded<i>` -> `Sharded<D>`: one all-to-all (none when i == D).
template <std::size_t D>
inline constexpr Pipeline<detail::SwitchStep<D>> switch_to{};
/// `Sharded<i>` -> Replicated: one all-gather.
inline constexpr Pipeline<detail::GatherStep> gather{};
/// Any layout -> L: dsp::redistribute<L> (a plan of single-axis steps).
template <class L>
inline constexpr Pipeline<detail::ToStep<L>> to{};
}  // namespace steps

}  // namespace dsp
