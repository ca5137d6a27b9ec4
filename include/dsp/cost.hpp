// SPDX-License-Identifier: BSD-3-Clause
// dsp: a constexpr model of what each layout transition sends, exact for
// uneven partitions. Built on primitive_for / collective_for (layout.hpp);
// and redistribute_plan, the plan redistribute<To> runs between two
// placements (plan/mesh_plan.hpp), with its cost.
#pragma once

#include <dsp/error.hpp>
#include <dsp/extents.hpp>
#include <dsp/layout.hpp>
#include <dsp/partition.hpp>
#include <dsp/plan/mesh_plan.hpp>
#include <dsp/wire.hpp>

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace dsp {

/// The cost of one transition on one rank.
///
/// `bytes` is what rank `rank` sends to OTHER ranks (the chunk a rank keeps is
/// copied locally and never counted), `max_bytes` the largest such value over
/// all ranks. `collectives` counts collectives that move data between ranks:
/// 0 for split and identity, and 0 when N == 1 or the tensor is empty (the
/// engine may still make a one-rank call that moves nothing). These are exactly
/// what a CountingCommunicator records as `bytes_sent` and (for N > 1)
/// `collectives()`.
struct TransitionCost {
  Primitive primitive = Primitive::identity;
  Collective collective = Collective::none;
  std::size_t collectives = 0;
  std::size_t bytes = 0;
  std::size_t max_bytes = 0;
  friend constexpr bool operator==(const TransitionCost&, const TransitionCost&) = default;
};

namespace detail {
/// a * b, or InvalidArgument when it overflows std::size_t: in a constant
/// expression (a static_assert on a cost) the overflow is a compile error.
constexpr std::size_t checked_mul(std::size_t a, std::size_t b) {
  if (mul_overflows(a, b)) throw InvalidArgument("dsp cost model: a byte count overflows std::size_t");
  return a * b;
}
/// a + b, or InvalidArgument when it overflows std::size_t.
constexpr std::size_t checked_add(std::size_t a, std::size_t b) {
  if (add_overflows(a, b)) throw InvalidArgument("dsp cost model: a byte count overflows std::size_t");
  return a + b;
}

template <std::size_t R>
constexpr std::size_t product_except(const std::array<std::size_t, R>& e, std::size_t a, std::size_t b) {
  std::size_t p = 1;
  for (std::size_t d = 0; d < R; ++d)
    if (d != a && d != b) p = checked_mul(p, e[d]);
  return p;
}

/// Throws InvalidArgument (and so is no constant expression) for n == 0 or rank >= n.
constexpr void check_cost_args(std::size_t n, std::size_t rank) {
  if (n == 0 || rank >= n) throw InvalidArgument("dsp cost model: need 0 <= rank < N and N >= 1");
}

/// Bytes rank p of n sends moving From -> To (extents e, elem_bytes each).
template <Layout From, Layout To, std::size_t R>
constexpr std::size_t bytes_sent(const std::array<std::size_t, R>& e, std::size_t elem_bytes, std::size_t n,
                                 std::size_t p) {
  constexpr Primitive prim = primitive_for<From, To>();
  if constexpr (prim == Primitive::dynamic_switch) {
    // Rank p holds count_i(p) of dim i and sends peer q its count_j(q) of dim j.
    constexpr std::size_t i = From::dim, j = To::dim;
    const Partition pi{e[i], n}, pj{e[j], n};
    return checked_mul(checked_mul(checked_mul(elem_bytes, product_except(e, i, j)), pi.count(p)), e[j] - pj.count(p));
  } else if constexpr (prim == Primitive::gather) {
    // Rank p's block goes to each of the n - 1 others.
    constexpr std::size_t d = From::dim;
    return checked_mul(checked_mul(checked_mul(elem_bytes, product_except(e, d, d)), Partition{e[d], n}.count(p)),
                       n - 1);
  } else {
    return 0;  // split and identity: local
  }
}
}  // namespace detail

/// The cost of moving a tensor of global extents `e` with `elem_bytes`-byte
/// elements From -> To on rank `rank` of `n`. constexpr: usable in static_assert.
/// Throws dsp::InvalidArgument when n == 0 or rank >= n, or when a byte count
/// overflows std::size_t (in a constant expression: a compile error).
template <Layout From, Layout To, std::size_t R>
constexpr TransitionCost transition_cost(const std::array<std::size_t, R>& e, std::size_t elem_bytes, std::size_t n,
                                         std::size_t rank) {
  static_assert(layout_fits_v<From, R> && layout_fits_v<To, R>,
                "dsp::transition_cost: a Sharded<D> layout names a dim D >= the tensor's rank.");
  detail::check_cost_args(n, rank);
  TransitionCost c;
  c.primitive = primitive_for<From, To>();
  c.collective = collective_for<From, To>();
  std::size_t total = 1;
  for (std::size_t x : e) total = detail::checked_mul(total, x);
  c.collectives = (c.collective != Collective::none && n > 1 && total > 0) ? 1 : 0;
  c.bytes = detail::bytes_sent<From, To>(e, elem_bytes, n, rank);
  for (std::size_t q = 0; q < n; ++q) {
    const std::size_t b = detail::bytes_sent<From, To>(e, elem_bytes, n, q);
    if (b > c.max_bytes) c.max_bytes = b;
  }
  return c;
}

namespace detail {
/// How placement L cuts a tensor of extents e over n ranks (Blocks: `starts`,
/// the n + 1 prefix offsets of its sizes).
template <class L, std::size_t R>
constexpr CutSide cost_side(const std::array<std::size_t, R>& e, std::size_t n, const std::size_t* starts) {
  if constexpr (is_zigzag_v<L>) return CutSide{L::dim, Cut{Cut::Kind::zigzag, e[L::dim], n, nullptr}};
  else if constexpr (is_blocks_v<L>) return CutSide{L::dim, Cut{Cut::Kind::blocks, e[L::dim], n, starts}};
  else if constexpr (is_sharded_v<L>) return CutSide{L::dim, Cut{Cut::Kind::even, e[L::dim], n, nullptr}};
  else return CutSide{0, Cut{Cut::Kind::whole, e[0], n, nullptr}};
}

/// The indices of one dim that part p of cut a and part q of cut b both hold.
constexpr std::size_t shared_indices(const Cut& a, std::size_t p, const Cut& b, std::size_t q) {
  Piece x[2], y[2];
  const std::size_t kx = a.pieces(p, x), ky = b.pieces(q, y);
  std::size_t both = 0;
  for (std::size_t u = 0; u < kx; ++u)
    for (std::size_t v = 0; v < ky; ++v) {
      const std::size_t lo = x[u].offset > y[v].offset ? x[u].offset : y[v].offset;
      const std::size_t hx = x[u].offset + x[u].count, hy = y[v].offset + y[v].count;
      const std::size_t hi = hx < hy ? hx : hy;
      both += hi > lo ? hi - lo : 0;
    }
  return both;
}

/// Elements rank p sends moving from cut a to cut b: its block but the part
/// it keeps, to the one rank that wants each element (to every other rank
/// for a whole b); nothing from a whole a.
template <std::size_t R>
constexpr std::size_t cut_elems_sent(const std::array<std::size_t, R>& e, const CutSide& a, const CutSide& b,
                                     std::size_t n, std::size_t p) {
  if (a.cut.kind == Cut::Kind::whole) return 0;
  const std::size_t in = a.cut.count(p);
  if (b.cut.kind == Cut::Kind::whole) return checked_mul(checked_mul(product_except(e, a.dim, a.dim), in), n - 1);
  if (a.dim != b.dim)  // keeps its out-count of dim b.dim of each of its rows
    return checked_mul(checked_mul(product_except(e, a.dim, b.dim), in), e[b.dim] - b.cut.count(p));
  return checked_mul(product_except(e, a.dim, a.dim), in - shared_indices(a.cut, p, b.cut, p));
}

/// Elements rank p sends rank q (q != p) moving from cut a to cut b.
template <std::size_t R>
constexpr std::size_t cut_elems_to(const std::array<std::size_t, R>& e, const CutSide& a, const CutSide& b,
                                   std::size_t p, std::size_t q) {
  if (a.cut.kind == Cut::Kind::whole) return 0;
  if (b.cut.kind == Cut::Kind::whole) return checked_mul(product_except(e, a.dim, a.dim), a.cut.count(p));
  if (a.dim != b.dim) return checked_mul(checked_mul(product_except(e, a.dim, b.dim), a.cut.count(p)), b.cut.count(q));
  return checked_mul(product_except(e, a.dim, a.dim), shared_indices(a.cut, p, b.cut, q));
}

/// The cost of a redistribution between two cuts (one rank of n).
template <std::size_t R>
constexpr TransitionCost cut_cost(const std::array<std::size_t, R>& e, std::size_t elem_bytes, std::size_t n,
                                  std::size_t rank, const CutSide& a, const CutSide& b) {
  check_cost_args(n, rank);
  TransitionCost c;
  c.primitive = Primitive::redistribute;
  std::size_t total = 1;
  for (std::size_t x : e) total = checked_mul(total, x);
  const bool moves = a.cut.kind != Cut::Kind::whole && n > 1 && total > 0;
  c.collective = a.cut.kind == Cut::Kind::whole ? Collective::none : Collective::all_to_all;
  c.collectives = moves ? 1 : 0;
  c.bytes = checked_mul(cut_elems_sent(e, a, b, n, rank), elem_bytes);
  for (std::size_t q = 0; q < n; ++q) {
    const std::size_t v = checked_mul(cut_elems_sent(e, a, b, n, q), elem_bytes);
    if (v > c.max_bytes) c.max_bytes = v;
  }
  return c;
}

/// The prefix offsets of Blocks sizes (empty for no sizes).
inline std::vector<std::size_t> cost_starts(std::span<const std::size_t> sizes) {
  std::vector<std::size_t> s;
  if (sizes.empty()) return s;
  s.push_back(0);
  for (std::size_t v : sizes) s.push_back(checked_add(s.back(), v));
  return s;
}
}  // namespace detail

/// The cost of a redistribution with a Zigzag side (the other Zigzag,
/// Sharded or Replicated), one exchange: what rank `rank` of `n` sends
/// (its block but the part it keeps; to every other rank for a Replicated
/// target), the most any rank sends, and one collective where data moves.
/// Exactly what a CountingCommunicator records. constexpr.
template <class From, class To, std::size_t R>
requires(is_cut_v<From> || is_cut_v<To>) constexpr TransitionCost
    transition_cost(const std::array<std::size_t, R>& e, std::size_t elem_bytes, std::size_t n, std::size_t rank) {
  static_assert(!is_blocks_v<From> && !is_blocks_v<To>,
                "dsp::transition_cost: a Blocks<D> side's cost depends on its run-time sizes: pass them "
                "(transition_cost<From, To>(e, elem_bytes, n, rank, from_sizes, to_sizes)).");
  static_assert(!is_partial_v<From> && !is_partial_v<To>,
                "dsp::transition_cost: between Partial and Zigzag there is no one exchange.");
  static_assert(layout_fits_v<From, R> && layout_fits_v<To, R>,
                "dsp::transition_cost: a layout names a dim D >= the tensor's rank.");
  return detail::cut_cost(e, elem_bytes, n, rank, detail::cost_side<From>(e, n, nullptr),
                          detail::cost_side<To>(e, n, nullptr));
}

/// As above, with a Blocks side (or two): `from_sizes` and `to_sizes` are the
/// Blocks sizes of From and To (one per rank; empty for a side that is not
/// Blocks). Throws InvalidArgument for sizes that are not one per rank or do
/// not sum to the extent.
template <class From, class To, std::size_t R>
requires(is_cut_v<From> || is_cut_v<To>) TransitionCost
    transition_cost(const std::array<std::size_t, R>& e, std::size_t elem_bytes, std::size_t n, std::size_t rank,
                    std::span<const std::size_t> from_sizes, std::span<const std::size_t> to_sizes) {
  static_assert(!is_partial_v<From> && !is_partial_v<To>,
                "dsp::transition_cost: between Partial and Zigzag or Blocks there is no one exchange.");
  static_assert(layout_fits_v<From, R> && layout_fits_v<To, R>,
                "dsp::transition_cost: a layout names a dim D >= the tensor's rank.");
  auto check = [&](bool blocks, std::span<const std::size_t> sizes, std::size_t d, const char* which) {
    if (!blocks) return;
    std::size_t sum = 0;
    for (std::size_t v : sizes) sum = detail::checked_add(sum, v);
    if (sizes.size() != n || sum != e[d])
      throw InvalidArgument(std::string("dsp::transition_cost: ") + which +
                            "'s Blocks sizes must be one per rank and sum to the extent");
  };
  std::size_t fd = 0, td = 0;
  if constexpr (is_cut_v<From> || is_sharded_v<From>) fd = From::dim;
  if constexpr (is_cut_v<To> || is_sharded_v<To>) td = To::dim;
  check(is_blocks_v<From>, from_sizes, fd, "From");
  check(is_blocks_v<To>, to_sizes, td, "To");
  const std::vector<std::size_t> fs = detail::cost_starts(from_sizes), ts = detail::cost_starts(to_sizes);
  return detail::cut_cost(e, elem_bytes, n, rank, detail::cost_side<From>(e, n, fs.data()),
                          detail::cost_side<To>(e, n, ts.data()));
}

/// The cost of a switch or gather From -> To whose elements travel as `wire`
/// (wire.hpp): per peer, the bytes of its section in the wire type, padding
/// and fp8 scales included, exactly what a CountingCommunicator records.
/// A gather on a wire: each rank's block as one section, to every other rank.
/// Wire::exact is transition_cost above. A batch costs the sum of its
/// tensors' costs. Throws InvalidArgument for a low-precision wire on a split
/// (local: nothing travels).
template <Layout From, Layout To, std::size_t R>
constexpr TransitionCost transition_cost(const std::array<std::size_t, R>& e, std::size_t elem_bytes, std::size_t n,
                                         std::size_t rank, Wire wire) {
  TransitionCost c = transition_cost<From, To>(e, elem_bytes, n, rank);
  constexpr Primitive prim = primitive_for<From, To>();
  if (wire == Wire::exact) return c;
  auto with_max = [&](auto sent) {
    c.bytes = sent(rank);
    c.max_bytes = 0;
    for (std::size_t q = 0; q < n; ++q)
      if (sent(q) > c.max_bytes) c.max_bytes = sent(q);
    return c;
  };
  if constexpr (prim == Primitive::identity) {
    return c;
  } else if constexpr (prim == Primitive::split) {
    throw InvalidArgument("dsp cost model: split sends nothing, on any wire");
  } else if constexpr (prim == Primitive::gather) {
    // Rank p's block, as one wire section, to each of the n - 1 others.
    constexpr std::size_t d = From::dim;
    return with_max([&](std::size_t p) {
      const std::size_t elems = detail::checked_mul(detail::product_except(e, d, d), Partition{e[d], n}.count(p));
      return detail::checked_mul(wire_section_bytes(wire, elems, elem_bytes), n - 1);
    });
  } else {
    // Per peer, its section of this rank's block.
    constexpr std::size_t i = From::dim, j = To::dim;
    return with_max([&](std::size_t p) {
      const Partition pi{e[i], n}, pj{e[j], n};
      const std::size_t row = detail::checked_mul(detail::product_except(e, i, j), pi.count(p));
      std::size_t b = 0;
      for (std::size_t q = 0; q < n; ++q)
        if (q != p)
          b = detail::checked_add(b, wire_section_bytes(wire, detail::checked_mul(row, pj.count(q)), elem_bytes));
      return b;
    });
  }
}

/// What passing every rank's block of a `From = Sharded<D>` tensor around a
/// ring of n ranks sends: n - 1 point-to-point steps; at step s rank p forwards
/// the block that started on rank p - s to rank p + 1. This is a ring
/// all-gather, and how Ring-Attention moves k and v. Rank p forwards every
/// block but its successor's. `steps`: n - 1 (0 when n == 1 or the tensor is
/// empty); `bytes` what rank `rank` sends, `max_bytes` the largest over ranks.
struct RingCost {
  std::size_t steps = 0;
  std::size_t bytes = 0;
  std::size_t max_bytes = 0;
  friend constexpr bool operator==(const RingCost&, const RingCost&) = default;
};

template <Layout From, std::size_t R>
constexpr RingCost ring_pass_cost(const std::array<std::size_t, R>& e, std::size_t elem_bytes, std::size_t n,
                                  std::size_t rank) {
  static_assert(is_sharded_v<From>, "dsp::ring_pass_cost: the blocks passed are those of a Sharded<D> layout.");
  static_assert(layout_fits_v<From, R>, "dsp::ring_pass_cost: Sharded<D> names a dim D >= the tensor's rank.");
  detail::check_cost_args(n, rank);
  constexpr std::size_t d = From::dim;
  const Partition pd{e[d], n};
  std::size_t total = 1;
  for (std::size_t x : e) total = detail::checked_mul(total, x);
  auto sent = [&](std::size_t p) {
    return n > 1 ? detail::checked_mul(detail::checked_mul(elem_bytes, detail::product_except(e, d, d)),
                                       e[d] - pd.count((p + 1) % n))
                 : std::size_t{0};
  };
  RingCost c;
  c.steps = n > 1 && total > 0 ? n - 1 : 0;
  c.bytes = sent(rank);
  for (std::size_t q = 0; q < n; ++q)
    if (sent(q) > c.max_bytes) c.max_bytes = sent(q);
  return c;
}

/// What one step of a redistribution costs on one rank (see RedistributeCost).
struct StepCost {
  MeshStep step;
  std::size_t collectives = 0;  ///< 1 when the step moves data between ranks of its axis, else 0
  std::size_t bytes = 0;        ///< bytes this rank sends to other ranks
};

/// The cost of a redistribution plan on one rank of a mesh, exact for uneven
/// partitions: per step, and in total. `max_bytes` is the largest total over
/// all ranks of the mesh. Bytes follow the CountingCommunicator's rules
/// (comm/counting.hpp): a switch sends all but its own chunk, a gather sends
/// its block to every other rank of the axis, a reduce-scatter all but its own
/// chunk, an all-reduce a reduce-scatter and an all-gather of the 1-D pieces.
template <std::size_t S = kMaxSteps>
struct RedistributeCost {
  std::array<StepCost, S> steps{};
  std::size_t size = 0;
  std::size_t collectives = 0;
  std::size_t bytes = 0;
  std::size_t max_bytes = 0;
};

namespace detail {

/// Bytes and collectives of one step for the rank at `coords`.
template <std::size_t K, std::size_t R>
constexpr StepCost step_cost_exact(const MeshStep& st, const std::array<long, K>& state,
                                   const std::array<std::size_t, R>& e, std::size_t elem_bytes,
                                   const std::array<int, K>& shape, const std::array<int, K>& coords,
                                   Wire wire = Wire::exact, CutSizes z = {}) {
  const std::size_t a = std::size_t(st.axis);
  const auto g = group_extents(e, state, a, shape, coords, z);
  const std::size_t n = std::size_t(shape[a]), p = std::size_t(coords[a]);
  std::size_t total = 1;
  for (std::size_t x : g) total = checked_mul(total, x);
  StepCost c;
  c.step = st;
  c.collectives = step_communicates(st.kind, st.from) && n > 1 && total > 0 ? 1 : 0;
  switch (st.kind) {
    case StepKind::switch_dims: {
      const std::size_t i = std::size_t(st.from), j = std::size_t(st.to);
      const Partition pi{g[i], n}, pj{g[j], n};
      if (wire == Wire::exact) {
        c.bytes =
            checked_mul(checked_mul(checked_mul(elem_bytes, product_except(g, i, j)), pi.count(p)), g[j] - pj.count(p));
      } else {  // per peer, its section of this rank's block in the wire type
        const std::size_t row = checked_mul(product_except(g, i, j), pi.count(p));
        for (std::size_t q = 0; q < n; ++q)
          if (q != p)
            c.bytes = checked_add(c.bytes, wire_section_bytes(wire, checked_mul(row, pj.count(q)), elem_bytes));
      }
      break;
    }
    case StepKind::gather: {
      const std::size_t d = std::size_t(st.from);
      const std::size_t elems = checked_mul(product_except(g, d, d), Partition{g[d], n}.count(p));
      c.bytes = checked_mul(
          wire == Wire::exact ? checked_mul(elem_bytes, elems) : wire_section_bytes(wire, elems, elem_bytes), n - 1);
      break;
    }
    case StepKind::all_reduce: {
      const std::size_t mine = Partition{total, n}.count(p);
      c.bytes = checked_mul(elem_bytes, checked_add(total - mine, checked_mul(mine, n - 1)));
      break;
    }
    case StepKind::reduce_scatter: {
      const std::size_t j = std::size_t(st.to);
      c.bytes = checked_mul(elem_bytes, total - checked_mul(product_except(g, j, j), Partition{g[j], n}.count(p)));
      break;
    }
    case StepKind::recut: {  // to each peer its part, exact or as one wire section
      const CutSide from = code_side(st.from, g, n, z), to = code_side(st.to, g, n, z);
      for (std::size_t q = 0; q < n; ++q) {
        const std::size_t elems = q == p ? 0 : cut_elems_to(g, from, to, p, q);
        c.bytes = checked_add(c.bytes, wire == Wire::exact || elems == 0 ? checked_mul(elem_bytes, elems)
                                                                         : wire_section_bytes(wire, elems, elem_bytes));
      }
      break;
    }
    default: break;
  }
  if (n <= 1) c.bytes = 0;
  return c;
}

/// The cost of `plan` from placement `from` on the rank at `coords`, without max_bytes.
template <std::size_t K, std::size_t R>
constexpr RedistributeCost<> plan_cost_on(const MeshPlan<K>& plan, const std::array<long, K>& from,
                                          const std::array<std::size_t, R>& e, std::size_t elem_bytes,
                                          const std::array<int, K>& shape, const std::array<int, K>& coords,
                                          Wire wire = Wire::exact, CutSizes z = {}) {
  RedistributeCost<> c;
  std::array<long, K> state = from;
  for (std::size_t t = 0; t < plan.size; ++t) {
    c.steps[t] = step_cost_exact(plan.steps[t], state, e, elem_bytes, shape, coords, wire, z);
    state[std::size_t(plan.steps[t].axis)] = plan.steps[t].to;
    c.collectives += c.steps[t].collectives;
    c.bytes = checked_add(c.bytes, c.steps[t].bytes);
  }
  c.size = plan.size;
  return c;
}

/// The largest f(coords) over every rank of a mesh of `shape` (row-major).
template <std::size_t K, class F>
constexpr std::size_t max_over_mesh(const std::array<int, K>& shape, F&& f) {
  std::size_t ranks = 1, best = 0;
  for (int x : shape) ranks *= std::size_t(x);
  for (std::size_t r = 0; r < ranks; ++r) {
    std::array<int, K> q{};
    std::size_t rest = r;
    for (std::size_t a = K; a-- > 0;) q[a] = int(rest % std::size_t(shape[a])), rest /= std::size_t(shape[a]);
    const std::size_t v = f(q);
    if (v > best) best = v;
  }
  return best;
}

/// Throws InvalidArgument (and so is no constant expression) unless every
/// extent of `shape` is at least 1 and every coordinate lies in it.
template <std::size_t K>
constexpr void check_mesh_args(const std::array<int, K>& shape, const std::array<int, K>& coords) {
  for (std::size_t a = 0; a < K; ++a)
    if (shape[a] < 1 || coords[a] < 0 || coords[a] >= shape[a])
      throw InvalidArgument("dsp cost model: need mesh extents >= 1 and 0 <= coords[a] < shape[a]");
}

}  // namespace detail

/// The exact cost of `plan` (a MeshPlan, as redistribute_plan<...>::plan
/// holds) for a tensor of global extents `e` with `elem_bytes`-byte elements
/// entering as placement codes `from`, on the rank at `coords` of a mesh of
/// `shape`, its switch and gather steps on `wire` (a section per peer in the
/// wire type, padding and fp8 scales included; a plan with a reduction on a
/// low-precision wire throws InvalidArgument). A batch costs the sum of its
/// tensors' costs. constexpr: usable in static_assert. max_bytes takes every
/// rank of the mesh into account (a loop over product(shape) ranks). A plan
/// with a Blocks code takes the sizes (`z`: prefix offsets; the overload of
/// redistribute_plan::cost with sizes makes them); without them it throws
/// InvalidArgument.
template <std::size_t K, std::size_t R>
constexpr RedistributeCost<> redistribute_cost(const MeshPlan<K>& plan, const std::array<long, K>& from,
                                               const std::array<std::size_t, R>& e, std::size_t elem_bytes,
                                               const std::array<int, K>& shape, const std::array<int, K>& coords,
                                               Wire wire = Wire::exact, detail::CutSizes z = {}) {
  detail::check_mesh_args(shape, coords);
  auto sized = [&](long code) {  // a Blocks code's sizes were passed
    if (detail::is_blocks_code(code) && !(detail::is_blocks_out_code(code) ? z.out : z.in))
      throw InvalidArgument(
          "dsp cost model: a plan with a Blocks<D> placement costs what its run-time sizes say: pass them "
          "(redistribute_plan::cost(e, elem_bytes, shape, coords, from_sizes, to_sizes))");
  };
  for (long code : from) sized(code);
  for (const MeshStep& st : plan) {
    if (wire != Wire::exact && (st.kind == StepKind::all_reduce || st.kind == StepKind::reduce_scatter))
      throw InvalidArgument("dsp cost model: a plan with a reduction moves exactly, on no wire");
    sized(st.from), sized(st.to);
  }
  RedistributeCost<> c = detail::plan_cost_on(plan, from, e, elem_bytes, shape, coords, wire, z);
  c.max_bytes = detail::max_over_mesh(shape, [&](const std::array<int, K>& q) {
    return detail::plan_cost_on(plan, from, e, elem_bytes, shape, q, wire, z).bytes;
  });
  return c;
}

namespace detail {

/// The smallest tensor rank that fits both layouts.
template <class From, class To>
constexpr std::size_t fitting_rank() {
  std::size_t r = 1;
  for (long x : codes_v<From>)
    r = code_dim(x) >= 0 && std::size_t(code_dim(x)) + 1 > r ? std::size_t(code_dim(x)) + 1 : r;
  for (long x : codes_v<To>)
    r = code_dim(x) >= 0 && std::size_t(code_dim(x)) + 1 > r ? std::size_t(code_dim(x)) + 1 : r;
  return r;
}

template <class From, class To, std::size_t Rank>
constexpr auto make_plan() {
  constexpr auto f = codes_v<From>;
  constexpr auto t = plan_codes(codes_v<To>);
  static_assert(f.size() == t.size(), "dsp::redistribute_plan: From and To must have the same number of axes.");
  return plan_mesh<f.size(), plan_states(f, t, Rank)>(f, t, Rank);
}

}  // namespace detail

/// The plan dsp::redistribute runs to move a tensor of `Rank` dims from
/// layout From to layout To (both dsp::Axes<...> with one placement per mesh
/// axis, or both single placements for a plain communicator), fixed at
/// compile time: the cheapest sequence of exact single-axis steps on a
/// reference mesh (every axis of 8 ranks, evenly divisible extents; ties: fewer
/// collectives, then fewer steps). `cost()` is its exact cost for given
/// extents and mesh shape. Rank defaults to the smallest rank the layouts fit;
/// name it to let the plan pass through dims the layouts do not name.
template <class From, class To, std::size_t Rank = detail::fitting_rank<From, To>()>
struct redistribute_plan {
  static_assert(layout_fits_v<From, Rank> && layout_fits_v<To, Rank>,
                "dsp::redistribute_plan: a Sharded<D> names a dim D >= the tensor's rank.");
  /// The number of mesh axes (1 for a plain communicator).
  static constexpr std::size_t axes = detail::codes_v<From>.size();
  static constexpr std::array<long, axes> from = detail::codes_v<From>;
  static constexpr std::array<long, axes> to = detail::plan_codes(detail::codes_v<To>);  // Blocks: kBlocksOut
  /// The steps, in order.
  static constexpr MeshPlan<axes> plan = detail::make_plan<From, To, Rank>();
  /// Where From and To hold the same Blocks<D> on one mesh axis: the plan
  /// that runs when their sizes are equal (that axis's Blocks stays; `plan`
  /// recuts it to the output's sizes). Else `plan`.
  static constexpr std::array<long, axes> kept_to = detail::keeps_blocks<From, To>() ? detail::codes_v<To> : to;
  static constexpr MeshPlan<axes> kept_plan = [] {
    if constexpr (detail::keeps_blocks<From, To>())
      return detail::plan_mesh<axes, detail::plan_states(from, kept_to, Rank)>(from, kept_to, Rank);
    else return plan;
  }();
  static_assert(plan.found, "dsp::redistribute_plan: no plan found (a bug: every placement reaches every other).");

  /// The number of steps (0: From == To, a copy).
  static constexpr std::size_t size() { return plan.size; }
  /// Step k: its kind (StepKind), axis, and the axis's placement code before and after.
  static constexpr MeshStep step(std::size_t k) { return plan.steps[k]; }
  /// The number of steps that communicate.
  static constexpr std::size_t collectives() {
    std::size_t c = 0;
    for (const auto& s : plan) c += step_communicates(s.kind, s.from) ? 1 : 0;
    return c;
  }

  /// The exact cost on the rank at `coords` of a mesh of `shape`, for a
  /// tensor of global extents `e` with `elem_bytes`-byte elements, switch and
  /// gather steps on `wire`: per step (collectives, bytes this rank sends),
  /// totals, and the largest total over the mesh's ranks. A batch costs the
  /// sum over its tensors. constexpr. Throws InvalidArgument for a coordinate
  /// outside the shape, a reduction on a low-precision wire, and when a byte
  /// count overflows std::size_t.
  template <std::size_t R>
  static constexpr RedistributeCost<> cost(const std::array<std::size_t, R>& e, std::size_t elem_bytes,
                                           const std::array<int, axes>& shape, const std::array<int, axes>& coords,
                                           Wire wire = Wire::exact) {
    static_assert(R == Rank, "dsp::redistribute_plan::cost: the extents must have the plan's Rank.");
    return redistribute_cost(plan, from, e, elem_bytes, shape, coords, wire);
  }
  /// The same where From or To has a Blocks<D> on a mesh axis: `from_sizes`
  /// and `to_sizes` are its sizes (one per rank of that axis, summing to the
  /// extent of D; empty for a side without Blocks). Where both hold the same
  /// Blocks on one axis with equal sizes, it is kept_plan's cost (what
  /// dsp::redistribute runs then). Not constexpr. Throws InvalidArgument for
  /// sizes that do not fit.
  template <std::size_t R>
  static RedistributeCost<> cost(const std::array<std::size_t, R>& e, std::size_t elem_bytes,
                                 const std::array<int, axes>& shape, const std::array<int, axes>& coords,
                                 std::span<const std::size_t> from_sizes, std::span<const std::size_t> to_sizes,
                                 Wire wire = Wire::exact) {
    static_assert(R == Rank, "dsp::redistribute_plan::cost: the extents must have the plan's Rank.");
    auto starts =
        [&](std::span<const std::size_t> sizes, const std::array<long, axes>& codes, int axis, const char* which) {
      if (axis < 0) {
        if (!sizes.empty())
          throw InvalidArgument(std::string("dsp::redistribute_plan::cost: ") + which +
                                " has no Blocks<D>, so its sizes must be empty");
        return std::vector<std::size_t>();
      }
      std::size_t sum = 0;
      for (std::size_t v : sizes) sum = detail::checked_add(sum, v);
      const std::size_t dim = std::size_t(detail::code_dim(codes[std::size_t(axis)]));
      if (sizes.size() != std::size_t(shape[std::size_t(axis)]) || sum != e[dim])
        throw InvalidArgument(std::string("dsp::redistribute_plan::cost: ") + which + "'s Blocks sizes are " +
                              std::to_string(sizes.size()) + " summing to " + std::to_string(sum) +
                              "; they must be one per rank of mesh axis " + std::to_string(axis) + " (" +
                              std::to_string(shape[std::size_t(axis)]) + ") and sum to the extent of dim " +
                              std::to_string(dim) + " (" + std::to_string(e[dim]) + ")");
      return detail::cost_starts(sizes);
    };
    const std::vector<std::size_t> fs = starts(from_sizes, from, detail::blocks_axis<From>(), "From"),
                                   ts = starts(to_sizes, to, detail::blocks_axis<To>(), "To");
    const bool kept = detail::keeps_blocks<From, To>() && fs == ts;
    return redistribute_cost(kept ? kept_plan : plan, from, e, elem_bytes, shape, coords, wire,
                             detail::CutSizes{fs.empty() ? nullptr : fs.data(), ts.empty() ? nullptr : ts.data()});
  }
  /// The same on a plain communicator: rank `rank` of `n`.
  template <std::size_t R>
  static constexpr RedistributeCost<> cost(const std::array<std::size_t, R>& e, std::size_t elem_bytes, std::size_t n,
                                           std::size_t rank, Wire wire = Wire::exact) requires(axes == 1) {
    return cost(e, elem_bytes, std::array<int, 1>{int(n)}, std::array<int, 1>{int(rank)}, wire);
  }

  /// The steps as text, e.g. "switch on axis 0: Sharded<1> -> Sharded<0>".
  static std::string text() {
    // if constexpr: nvcc warns that `k < plan.size` compares with zero (a warning is an error in dsp's tests).
    if constexpr (plan.size == 0) {
      return "(none: a copy)";
    } else {
      std::string t;
      for (std::size_t k = 0; k < plan.size; ++k) {
        const auto& s = plan.steps[k];
        auto name = [](long c) {  // the output's Blocks: its own sizes
          return detail::layout_text(c) + (detail::is_blocks_out_code(c) ? " (y's sizes)" : "");
        };
        t += (k ? "; " : "") + std::string(step_name(s.kind)) + " on axis " + std::to_string(s.axis) + ": " +
             name(s.from) + " -> " + name(s.to);
      }
      return t;
    }
  }
};

}  // namespace dsp
