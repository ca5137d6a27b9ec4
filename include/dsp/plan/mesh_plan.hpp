// SPDX-License-Identifier: BSD-3-Clause
// dsp: the planner of dsp::redistribute on a process mesh. Pure, constexpr.
//
// A placement of a tensor on a K-axis mesh is one code per axis (layout.hpp:
// D for Sharded<D>, -1 Replicated, -2.. Partial). A step changes the code of
// one axis with one collective on that axis's communicator (or none):
//
//   Sharded<i> -> Sharded<j>   switch          all-to-all
//   Sharded<i> -> Replicated   gather          all-gather
//   Replicated -> Sharded<j>   split           local
//   Partial    -> Replicated   all-reduce
//   Partial    -> Sharded<j>   reduce-scatter
//   Replicated -> Partial      local (the rank at coordinate 0 keeps the value)
//   to or from Zigzag<d>       recut           one exchange (from Replicated: local)
//
// A step on axis a that touches dim d is exact only when a is the innermost
// axis sharding d, before (for the dim it leaves) and after (for the dim it
// enters): no axis b > a shards d. Then the ranks along axis a hold one block
// of d between them, split by the 1-D rule, and the step is the 1-D primitive
// on that block. A Zigzag or Blocks code stays on the axes that hold it in the
// input or the output (a tensor's layout has at most one of each), and a
// Blocks code on the first axis that cuts its dim (its sizes cut the whole
// extent); the output's Blocks is a code of its own (kBlocksOut), so that
// Blocks -> Blocks with other sizes on one axis is a recut. planner() finds the cheapest sequence of such steps by an
// A* search over placements (Dijkstra's order plus an admissible bound to the
// goal), at compile time.
#pragma once

#include <dsp/extents.hpp>
#include <dsp/partition.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace dsp {

enum class StepKind : int { switch_dims, gather, split, all_reduce, reduce_scatter, to_partial, recut };

constexpr const char* step_name(StepKind k) {
  switch (k) {
    case StepKind::switch_dims: return "switch";
    case StepKind::gather: return "gather";
    case StepKind::split: return "split";
    case StepKind::all_reduce: return "all-reduce";
    case StepKind::reduce_scatter: return "reduce-scatter";
    case StepKind::to_partial: return "to-partial";
    case StepKind::recut: return "recut";
  }
  return "?";
}

/// Whether a step kind communicates (one collective on its axis); a recut
/// from Replicated does not (step_communicates).
constexpr bool communicates(StepKind k) { return k != StepKind::split && k != StepKind::to_partial; }
/// Whether a step of kind k from code `from` communicates.
constexpr bool step_communicates(StepKind k, long from) {
  return communicates(k) && !(k == StepKind::recut && from == -1);
}

/// One step of a plan: on `axis`, the placement code goes from `from` to `to`.
struct MeshStep {
  StepKind kind = StepKind::split;
  int axis = 0;
  long from = 0, to = 0;
  friend constexpr bool operator==(const MeshStep&, const MeshStep&) = default;
};

/// The most steps a plan may have (a bound the planner checks).
inline constexpr std::size_t kMaxSteps = 16;

template <std::size_t K>
struct MeshPlan {
  std::array<MeshStep, kMaxSteps> steps{};
  std::size_t size = 0;
  bool found = false;
  constexpr const MeshStep* begin() const { return steps.data(); }
  constexpr const MeshStep* end() const { return steps.data() + size; }
};

}  // namespace dsp

namespace dsp::detail {

/// Whether no axis after `a` cuts `dim` in state s (so `a` is innermost for it).
template <std::size_t K>
constexpr bool innermost(const std::array<long, K>& s, std::size_t a, long dim) {
  for (std::size_t b = a + 1; b < K; ++b)
    if (code_dim(s[b]) == dim) return false;
  return true;
}

/// The step rules, in one place: the kind of the step that changes one axis's
/// code from p to q, given whether that axis is the innermost one sharding
/// p's dim and q's dim (true for codes that are not dims), or -1 when no
/// single exact step does.
constexpr int step_rule(long p, long q, bool p_innermost, bool q_innermost) {
  const bool pp = is_partial_code(p), qp = is_partial_code(q);
  if (p == q) return -1;
  if (is_cut_code(p) || is_cut_code(q)) {  // one exchange between the two cuts (none from Replicated)
    if (pp || qp) return -1;
    return (code_dim(p) < 0 || p_innermost) && (code_dim(q) < 0 || q_innermost) ? int(StepKind::recut) : -1;
  }
  if (p >= 0 && q >= 0) return p_innermost && q_innermost ? int(StepKind::switch_dims) : -1;
  if (p >= 0 && q == -1) return p_innermost ? int(StepKind::gather) : -1;
  if (p == -1 && q >= 0) return q_innermost ? int(StepKind::split) : -1;
  if (pp && q == -1) return int(StepKind::all_reduce);
  if (pp && q >= 0) return q_innermost ? int(StepKind::reduce_scatter) : -1;
  if (p == -1 && qp) return int(StepKind::to_partial);
  return -1;
}

/// The kind of the single step that sets axis a of state s to code q, or -1
/// when no single exact step does.
template <std::size_t K>
constexpr int step_kind(const std::array<long, K>& s, std::size_t a, long q) {
  const long p = s[a];
  return step_rule(p, q, code_dim(p) < 0 || innermost(s, a, code_dim(p)),
                   code_dim(q) < 0 || innermost(s, a, code_dim(q)));
}

/// The planner's cost of a step from state s, on a reference mesh whose axes
/// all have kRefAxis ranks and a tensor of kRefAxis^K units whose extents
/// divide evenly: bytes per rank (scaled by kRefAxis to stay integral). A
/// switch moves (n-1)/n of the block, a gather receives n-1 blocks, an
/// all-reduce moves 2(n-1)/n (reduce-scatter + all-gather), a reduce-scatter
/// (n-1)/n, local steps nothing; a recut costs what the Sharded step of its
/// kind would (a gather into Replicated, nothing from it, else a switch). The plan's exact cost for real extents and
/// a real mesh is redistribute_cost() (cost.hpp).
inline constexpr std::uint64_t kRefAxis = 8;
template <std::size_t K>
constexpr std::uint64_t step_cost(const std::array<long, K>& s, StepKind k, long from = 0, long to = 0) {
  std::size_t sharding = 0;
  for (long c : s) sharding += code_dim(c) >= 0 ? 1 : 0;
  std::uint64_t b = 1;  // the block, scaled: kRefAxis^(K - sharding)
  for (std::size_t e = sharding; e < K; ++e) b *= kRefAxis;
  const std::uint64_t n = kRefAxis;
  switch (k) {
    case StepKind::switch_dims: return b * (n - 1);
    case StepKind::gather: return b * n * (n - 1);
    case StepKind::all_reduce: return 2 * b * (n - 1);
    case StepKind::reduce_scatter: return b * (n - 1);
    case StepKind::recut: return from == -1 ? 0 : to == -1 ? b * n * (n - 1) : b * (n - 1);
    default: return 0;
  }
}

/// The dims and codes the planner considers: Replicated, the Partial and
/// Zigzag codes named in `from` or `to`, the dims they name, and up to K
/// more dims of the tensor (without sizes, any two unnamed dims are alike,
/// so K of them give every plan that a tensor of more dims could use). A
/// Zigzag code may only stand on an axis where `from` or `to` has it.
template <std::size_t K>
struct Alphabet {
  std::array<long, 1 + 5 * K> codes{};  // Replicated, 2K codes, the dims of K Zigzags each side, K dims
  std::array<long, K> from{}, to{};
  std::size_t size = 0;
  constexpr void add(long c) {
    for (std::size_t k = 0; k < size; ++k)
      if (codes[k] == c) return;
    codes[size++] = c;
  }
  constexpr std::size_t index(long c) const {
    for (std::size_t k = 0; k < size; ++k)
      if (codes[k] == c) return k;
    return size;
  }
};
template <std::size_t K>
constexpr Alphabet<K> alphabet(const std::array<long, K>& from, const std::array<long, K>& to, std::size_t rank) {
  Alphabet<K> a;
  a.from = from, a.to = to;
  a.add(-1);
  for (long c : from) a.add(c), a.add(code_dim(c));
  for (long c : to) a.add(c), a.add(code_dim(c));
  std::size_t extra = 0;
  for (std::size_t d = 0; d < rank && extra < K; ++d)
    if (a.index(long(d)) == a.size) a.add(long(d)), ++extra;
  return a;
}

constexpr std::size_t ipow(std::size_t b, std::size_t e) {
  std::size_t r = 1;
  while (e--) r *= b;
  return r;
}

/// The order of plans so far: by the reference cost, then the number of
/// collectives, then the number of steps, in one integer (each of the last
/// two below 2^10 for any plan of at most kMaxSteps steps).
constexpr std::uint64_t step_key(std::uint64_t cost, bool collective) {
  return cost << 20 | (collective ? std::uint64_t(1) << 10 : 0) | 1;
}

/// A lower bound of the key (cost << 20, collectives << 10, steps) of going
/// from code x to code t on one axis, whatever the other axes do: the A*
/// heuristic of plan_mesh. Each term is at most one step's least cost, so the
/// bound never overestimates and is consistent (a step changes one axis).
constexpr std::uint64_t axis_bound(long x, long t) {
  if (x == t) return 0;
  const std::uint64_t n = kRefAxis;
  const bool xs = code_dim(x) >= 0, ts = code_dim(t) >= 0;                    // cut: Sharded or Zigzag
  if (xs && ts) return step_key(n - 1, true);                                 // a switch at the smallest block
  if (xs) return step_key(n * (n - 1), true);                                 // a gather first
  if (is_partial_code(x)) return step_key(ts ? (n - 1) : 2 * (n - 1), true);  // a reduce-scatter or all-reduce
  return step_key(0, false);                                                  // a local step from Replicated
}

/// An indexed binary min-heap of state indices below N, ordered by key[],
/// with decrease-key: plain arrays keep the constant evaluator within its
/// operation budget.
template <std::size_t N>
struct IndexHeap {
  static constexpr std::size_t none = ~std::size_t(0);
  std::size_t heap[N]{}, pos[N]{};
  std::size_t size = 0;
  constexpr explicit IndexHeap(std::size_t n) {
    for (std::size_t v = 0; v < n; ++v) pos[v] = none;
  }
  constexpr void swap_at(std::size_t i, std::size_t j) {
    const std::size_t t = heap[i];
    heap[i] = heap[j];
    heap[j] = t;
    pos[heap[i]] = i;
    pos[heap[j]] = j;
  }
  /// Inserts v, or moves it up after its key decreased.
  constexpr void push(std::size_t v, const std::uint64_t* key) {
    if (pos[v] == none) heap[size] = v, pos[v] = size, ++size;
    for (std::size_t i = pos[v]; i > 0 && key[heap[i]] < key[heap[(i - 1) / 2]]; i = (i - 1) / 2)
      swap_at(i, (i - 1) / 2);
  }
  constexpr std::size_t pop(const std::uint64_t* key) {
    const std::size_t u = heap[0];
    swap_at(0, size - 1);
    --size;
    pos[u] = none;
    for (std::size_t i = 0;;) {
      std::size_t m = i;
      const std::size_t l = 2 * i + 1, r = l + 1;
      if (l < size && key[heap[l]] < key[heap[m]]) m = l;
      if (r < size && key[heap[r]] < key[heap[m]]) m = r;
      if (m == i) break;
      swap_at(i, m);
      i = m;
    }
    return u;
  }
};

/// Calls f(axis, digit, kind) for every exact step out of state s, whose
/// codes are A.codes[digit[a]]: every axis to every other code of the
/// alphabet, each checked by step_rule. Which axis is the innermost one
/// sharding a dim is found once per state (top), not per step.
template <std::size_t K, class F>
constexpr void for_each_step(const std::array<long, K>& s, const std::array<std::size_t, K>& digit,
                             const Alphabet<K>& A, F&& f) {
  // top[d]: the last axis that cuts dim d (K if none): axis a is innermost
  // for d exactly when top[d] <= a.
  // first[d]: the first axis that cuts d; blocks[d]: the axis of a Blocks on
  // d (K if none). A Blocks stands on the first axis that cuts its dim.
  std::size_t top[kMaxRank] = {}, first[kMaxRank] = {}, blocks[kMaxRank] = {};
  for (std::size_t d = 0; d < kMaxRank; ++d) top[d] = first[d] = blocks[d] = K;
  for (std::size_t a = 0; a < K; ++a)
    if (const long d = code_dim(s[a]); d >= 0 && d < long(kMaxRank)) {
      top[d] = a;
      if (first[d] == K) first[d] = a;
      if (is_blocks_code(s[a])) blocks[d] = a;
    }
  auto inner = [&](long d, std::size_t a) { return d < 0 || d >= long(kMaxRank) || top[d] == K || top[d] <= a; };
  auto blocks_first = [&](long q, std::size_t a) {  // the state with axis a set to q keeps the Blocks rule
    const long d = code_dim(q);
    if (d < 0 || d >= long(kMaxRank)) return true;
    if (is_blocks_code(q) && first[d] < a) return false;
    return blocks[d] == K || blocks[d] <= a;
  };
  for (std::size_t a = 0; a < K; ++a)
    for (std::size_t k = 0; k < A.size; ++k) {
      if (k == digit[a]) continue;
      const long p = s[a], q = A.codes[k];
      if (is_cut_code(q) && q != A.from[a] && q != A.to[a]) continue;  // a Zigzag or Blocks stays on its axis
      if (!blocks_first(q, a)) continue;
      const int kind = step_rule(p, q, inner(code_dim(p), a), inner(code_dim(q), a));
      if (kind >= 0) f(a, k, static_cast<StepKind>(kind));
    }
}

/// The cheapest plan from `from` to `to` for a tensor of `rank` dims: by the
/// reference cost, then the number of collectives, then the number of steps.
/// NStates bounds the state space (alphabet size ^ K). A* with axis_bound.
template <std::size_t K, std::size_t NStates>
constexpr MeshPlan<K> plan_mesh(const std::array<long, K>& from, const std::array<long, K>& to, std::size_t rank) {
  const Alphabet<K> A = alphabet(from, to, rank);
  const std::size_t V = ipow(A.size, K);
  std::array<std::size_t, K> weight{};  // state index = sum over axes of digit * weight
  for (std::size_t a = K; a-- > 0;) weight[a] = a + 1 == K ? 1 : weight[a + 1] * A.size;
  auto encode = [&](const std::array<long, K>& s) {
    std::size_t x = 0;
    for (std::size_t a = 0; a < K; ++a) x += A.index(s[a]) * weight[a];
    return x;
  };
  auto decode = [&](std::size_t x, std::array<long, K>& s, std::array<std::size_t, K>& digit) {
    for (std::size_t a = 0; a < K; ++a) {
      digit[a] = x / weight[a];
      x %= weight[a];
      s[a] = A.codes[digit[a]];
    }
  };
  // The bound to the goal: the larger of two consistent bounds. Per axis, the
  // least one step must cost (axis_bound); and the gathers: only a gather
  // lowers the number of sharding axes, one by one, and a gather at a given
  // number of sharding axes costs what step_cost says, so going from s to the
  // goal's s_t sharding axes costs at least those s - s_t gathers.
  std::size_t goal_sharding = 0;
  for (long c : to) goal_sharding += code_dim(c) >= 0 ? 1 : 0;
  auto bound = [&](const std::array<long, K>& t) {
    std::uint64_t h = 0;
    for (std::size_t a = 0; a < K; ++a) h += axis_bound(t[a], to[a]);
    std::size_t sharding = 0;
    for (long c : t) sharding += code_dim(c) >= 0 ? 1 : 0;
    std::uint64_t g = 0, b = 1, n = kRefAxis;  // gathers at sharding levels sharding, ..., goal_sharding + 1
    for (std::size_t e = sharding; e < K; ++e) b *= n;
    for (std::size_t k = sharding; k > goal_sharding; --k, b *= n) g += step_key(b * n * (n - 1), true);
    return h > g ? h : g;
  };
  constexpr std::uint64_t inf = ~std::uint64_t(0) >> 1;
  std::uint64_t dist[NStates]{}, f[NStates]{};  // f = dist + the bound to the goal: the heap's order
  std::size_t prev[NStates]{};
  MeshStep via[NStates]{};
  bool done[NStates]{};
  IndexHeap<NStates> heap(V);
  for (std::size_t v = 0; v < V; ++v) prev[v] = IndexHeap<NStates>::none, dist[v] = inf;
  const std::size_t s0 = encode(from), goal = encode(to);
  dist[s0] = 0;
  f[s0] = bound(from);
  heap.push(s0, f);
  while (heap.size > 0) {
    const std::size_t u = heap.pop(f);
    done[u] = true;
    if (u == goal) break;
    std::array<long, K> s{};
    std::array<std::size_t, K> digit{};
    decode(u, s, digit);
    for_each_step(s, digit, A, [&](std::size_t a, std::size_t k, StepKind kind) {
      const std::size_t v = u - digit[a] * weight[a] + k * weight[a];
      if (done[v]) return;
      const std::uint64_t nk = dist[u] + step_key(step_cost(s, kind, s[a], A.codes[k]), step_communicates(kind, s[a]));
      if (nk >= dist[v]) return;
      std::array<long, K> t = s;
      t[a] = A.codes[k];
      dist[v] = nk;
      f[v] = nk + bound(t);
      prev[v] = u;
      via[v] = MeshStep{kind, int(a), s[a], A.codes[k]};
      heap.push(v, f);
    });
  }
  MeshPlan<K> plan;
  if (!done[goal]) return plan;
  std::array<MeshStep, kMaxSteps> rev{};
  std::size_t n = 0;
  for (std::size_t v = goal; v != s0; v = prev[v]) {
    if (n == kMaxSteps) return plan;
    rev[n++] = via[v];
  }
  for (std::size_t k = 0; k < n; ++k) plan.steps[k] = rev[n - 1 - k];
  plan.size = n;
  plan.found = true;
  return plan;
}

/// The state space size plan_mesh needs for these placements.
template <std::size_t K>
constexpr std::size_t plan_states(const std::array<long, K>& from, const std::array<long, K>& to, std::size_t rank) {
  return ipow(alphabet(from, to, rank).size, K);
}

/// The group extents of a step on axis `a` from placement `state`: this
/// rank's box with axis a's split undone. A step is exact only where `a` is
/// the innermost axis for the dims it touches, so this is the block the ranks
/// along axis a share, and the step is the 1-D primitive on it.
template <std::size_t K, std::size_t R>
constexpr std::array<std::size_t, R> group_extents(const std::array<std::size_t, R>& global, std::array<long, K> state,
                                                   std::size_t a, const std::array<int, K>& shape,
                                                   const std::array<int, K>& coords, CutSizes z = {}) {
  state[a] = -1;
  return nested_box(global, std::span<const long>(state), std::span<const int>(shape), std::span<const int>(coords), z)
      .count;
}

}  // namespace dsp::detail
