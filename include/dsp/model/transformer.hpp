// SPDX-License-Identifier: BSD-3-Clause
// dsp::model: what one layer of a spatial-temporal transformer sends under
// each sequence-parallel strategy (from dsp's cost model, cost.hpp), its
// FLOPs and memory, and a predicted training step on a cluster (cluster.hpp).
//
// The layer is the paper's (Zhao et al., ICML 2025): x[B, T, S, C] with T
// sharded over the SP group; spatial attention over S, temporal attention over
// T, optional cross-attention to text tokens, and MLPs. The strategies, per
// layer and forward pass:
//   DSP               switch T -> S before the temporal attention, S -> T after (2 all-to-alls)
//   Ulysses           (the paper's Table 3) q, k, v [B, T, S, H, d] from T- to head-sharded in
//                     the temporal attention, the output back (4 all-to-alls)
//   Ulysses-OpenSora  (the baseline the paper measured: Open-Sora 1.0's STDiT) the same in
//                     every attention: q, k, v in one all-to-all and the output in another in
//                     the spatial and the temporal attention, q and the output in the
//                     cross-attention (6 all-to-alls, 10 tensors)
//   Megatron-SP       per sub-block an all-gather over T and a reduce-scatter over T
//   Ring              k and v passed around the SP ring in the temporal attention
#pragma once

#include <dsp/cost.hpp>
#include <dsp/model/cluster.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace dsp::model {

enum class Strategy { dsp, ulysses, ulysses_opensora, megatron_sp, ring };

inline constexpr std::array<Strategy, 5> all_strategies{Strategy::dsp, Strategy::ulysses, Strategy::ulysses_opensora,
                                                        Strategy::megatron_sp, Strategy::ring};

/// "dsp", "ulysses", "ulysses-opensora", "megatron-sp", "ring": the names the CLI takes.
inline const char* name(Strategy s) {
  switch (s) {
    case Strategy::dsp: return "dsp";
    case Strategy::ulysses: return "ulysses";
    case Strategy::ulysses_opensora: return "ulysses-opensora";
    case Strategy::megatron_sp: return "megatron-sp";
    case Strategy::ring: return "ring";
  }
  return "?";
}

/// The paper's names: "DSP", "DeepSpeed-Ulysses", "Megatron-SP", "Ring-Attention";
/// "DeepSpeed-Ulysses (Open-Sora 1.0)" for the Ulysses of every attention.
inline const char* paper_name(Strategy s) {
  switch (s) {
    case Strategy::dsp: return "DSP";
    case Strategy::ulysses: return "DeepSpeed-Ulysses";
    case Strategy::ulysses_opensora: return "DeepSpeed-Ulysses (Open-Sora 1.0)";
    case Strategy::megatron_sp: return "Megatron-SP";
    case Strategy::ring: return "Ring-Attention";
  }
  return "?";
}

/// The known strategies' names, comma-separated ("dsp, ulysses, ...").
inline std::string strategy_names() {
  std::string known;
  for (Strategy x : all_strategies) known += (known.empty() ? "" : ", ") + std::string(name(x));
  return known;
}

/// The strategy called `s` (name()), or InvalidArgument naming the known ones.
inline Strategy parse_strategy(const std::string& s) {
  for (Strategy x : all_strategies)
    if (s == name(x)) return x;
  throw InvalidArgument("dsp::model: unknown strategy '" + s + "' (known: " + strategy_names() + ")");
}

// ------------------------------------------------------------ the traffic ----

/// One sequence-parallel layer's tensor: x[B, T, S, C] with `heads` attention
/// heads of C / heads channels, `elem_bytes` per element, T sharded.
/// `sub_blocks`: how many sub-blocks Megatron-SP wraps in an all-gather and a
/// reduce-scatter (4: spatial and temporal attention with an MLP each, as in
/// the paper's Table 3, or spatial, temporal and cross-attention and one MLP).
/// `cross_attention`: whether the layer has a cross-attention to text (1, as
/// Open-Sora's STDiT) or not (0), which Ulysses-OpenSora also shards by heads.
struct LayerShape {
  std::size_t B = 1, T = 1, S = 1, C = 1, heads = 1;
  std::size_t elem_bytes = 2;
  std::size_t sub_blocks = 4;
  std::size_t cross_attention = 1;
};

enum class OpKind { all_to_all, all_gather, reduce_scatter, ring_pass };

inline const char* name(OpKind k) {
  switch (k) {
    case OpKind::all_to_all: return "all-to-all";
    case OpKind::all_gather: return "all-gather";
    case OpKind::reduce_scatter: return "reduce-scatter";
    case OpKind::ring_pass: return "ring pass";
  }
  return "?";
}

/// `count` identical operations: each sends `bytes` from the rank asked about
/// and at most `max_bytes` from any rank of the group. `copy_bytes`: the
/// device-memory traffic (read plus written) of packing and unpacking around
/// each, on the busiest rank: 2 x (its block before + its block after) for an
/// all-to-all, about 4 bytes per byte of the block; 0 for the ring passes,
/// all-gathers and reduce-scatters, whose blocks over T are contiguous.
struct TrafficOp {
  OpKind kind = OpKind::all_to_all;
  std::size_t count = 1;
  std::size_t bytes = 0;
  std::size_t max_bytes = 0;
  std::size_t copy_bytes = 0;
};

/// One layer's forward communication on one rank of an SP group.
struct LayerTraffic {
  std::vector<TrafficOp> ops;
  /// Bytes the rank sends in the layer (each op's bytes times its count);
  /// InvalidArgument when that overflows std::size_t.
  std::size_t bytes() const {
    std::size_t b = 0;
    for (const auto& o : ops) b = dsp::detail::checked_add(b, dsp::detail::checked_mul(o.count, o.bytes));
    return b;
  }
  /// Operations that communicate (a ring pass counts its n - 1 steps as one).
  std::size_t operations() const {
    std::size_t c = 0;
    for (const auto& o : ops) c += o.max_bytes > 0 ? o.count : 0;
    return c;
  }
  /// Device-memory traffic of the copies around the layer's all-to-alls on
  /// the busiest rank (each op's copy_bytes times its count).
  std::size_t copy_bytes() const {
    std::size_t b = 0;
    for (const auto& o : ops) b = dsp::detail::checked_add(b, dsp::detail::checked_mul(o.count, o.copy_bytes));
    return b;
  }
};

namespace detail {
/// Bytes of the largest block (rank 0's: dsp's partition gives the first
/// ranks one more) of a tensor of extents `e` split along `dim` over `n`.
template <std::size_t R>
std::size_t largest_block_bytes(const std::array<std::size_t, R>& e, std::size_t elem_bytes, std::size_t dim,
                                std::size_t n) {
  std::size_t b = elem_bytes;
  for (std::size_t d = 0; d < R; ++d) b = dsp::detail::checked_mul(b, d == dim ? Partition{e[d], n}.count(0) : e[d]);
  return b;
}
}  // namespace detail

/// What rank `rank` of an SP group of `n` sends in one layer's forward pass
/// under `s`, priced by dsp's cost model (transition_cost, redistribute_plan's
/// cost, ring_pass_cost): exact for uneven partitions, and what a
/// CountingCommunicator counts when the layer runs through dsp
/// (examples/spatial_temporal tests that on every strategy but
/// Ulysses-OpenSora, whose ops are Ulysses' in more places). The backward pass
/// sends the same (the adjoint of each switch, gather and reduce-scatter); a
/// ring's backward passes dk and dv as well.
///
/// Ulysses-OpenSora, as Open-Sora 1.0's STDiT runs it: in the spatial and the
/// temporal attention q, k and v go from T- to head-sharded in one all-to-all
/// (three tensors' bytes) and the output back in another; in the
/// cross-attention q goes and the output comes back (k and v of the text are
/// split locally). 10 tensors in 6 all-to-alls, 10M(n-1)/n^2 on even shapes;
/// 8 in 4 without a cross-attention.
inline LayerTraffic layer_traffic(Strategy s, const LayerShape& l, std::size_t n, std::size_t rank) {
  if (l.heads == 0 || l.C % l.heads != 0)
    throw InvalidArgument("dsp::model: the hidden size " + std::to_string(l.C) + " is no multiple of the " +
                          std::to_string(l.heads) + " heads");
  const std::array<std::size_t, 4> g4{l.B, l.T, l.S, l.C};
  const std::array<std::size_t, 5> g5{l.B, l.T, l.S, l.heads, l.C / l.heads};
  const std::size_t e = l.elem_bytes;
  auto op = [](OpKind k, std::size_t count, auto cost) { return TrafficOp{k, count, cost.bytes, cost.max_bytes, 0}; };
  // An all-to-all of `tensors` tensors at once, from a split of dim i to one of
  // dim j, and the copies around it (0 when it sends nothing).
  auto a2a = [&](std::size_t count, std::size_t tensors, auto cost, const auto& g, std::size_t i, std::size_t j) {
    using dsp::detail::checked_mul;
    TrafficOp o{OpKind::all_to_all, count, checked_mul(tensors, cost.bytes), checked_mul(tensors, cost.max_bytes), 0};
    if (o.max_bytes > 0)
      o.copy_bytes = checked_mul(
          checked_mul(2, tensors),
          dsp::detail::checked_add(detail::largest_block_bytes(g, e, i, n), detail::largest_block_bytes(g, e, j, n)));
    return o;
  };
  LayerTraffic t;
  switch (s) {
    case Strategy::dsp:
      t.ops.push_back(a2a(1, 1, transition_cost<Sharded<1>, Sharded<2>>(g4, e, n, rank), g4, 1, 2));
      t.ops.push_back(a2a(1, 1, transition_cost<Sharded<2>, Sharded<1>>(g4, e, n, rank), g4, 2, 1));
      break;
    case Strategy::ulysses:
      t.ops.push_back(a2a(3, 1, transition_cost<Sharded<1>, Sharded<3>>(g5, e, n, rank), g5, 1, 3));
      t.ops.push_back(a2a(1, 1, transition_cost<Sharded<3>, Sharded<1>>(g5, e, n, rank), g5, 3, 1));
      break;
    case Strategy::ulysses_opensora: {
      const auto to_heads = transition_cost<Sharded<1>, Sharded<3>>(g5, e, n, rank);
      const auto back = transition_cost<Sharded<3>, Sharded<1>>(g5, e, n, rank);
      // spatial and temporal attention: q, k, v in one all-to-all, the output in another
      t.ops.push_back(a2a(2, 3, to_heads, g5, 1, 3));
      t.ops.push_back(a2a(2, 1, back, g5, 3, 1));
      if (l.cross_attention) {  // cross-attention: q, and the output back
        t.ops.push_back(a2a(1, 1, to_heads, g5, 1, 3));
        t.ops.push_back(a2a(1, 1, back, g5, 3, 1));
      }
      break;
    }
    case Strategy::megatron_sp: {
      using ReduceScatterT = redistribute_plan<Partial<>, Sharded<1>, 4>;
      static_assert(ReduceScatterT::size() == 1 && ReduceScatterT::collectives() == 1, "one reduce-scatter");
      t.ops.push_back(op(OpKind::all_gather, l.sub_blocks, transition_cost<Sharded<1>, Replicated>(g4, e, n, rank)));
      t.ops.push_back(op(OpKind::reduce_scatter, l.sub_blocks, ReduceScatterT::cost(g4, e, n, rank)));
      break;
    }
    case Strategy::ring:  // k and v, each [B, T, S, C] sharded over T, around the ring together
      t.ops.push_back(op(OpKind::ring_pass, 2, ring_pass_cost<Sharded<1>>(g4, e, n, rank)));
      break;
  }
  return t;
}

// ----------------------------------------------------- the model and job ----

/// A spatial-temporal transformer (the paper's Table 4). Each layer: a spatial
/// self-attention (over S) and a temporal one (over T), a cross-attention to
/// `cross_tokens` text tokens when that is not 0, and `mlps` MLPs of hidden
/// width mlp_ratio * hidden. Open-Sora's STDiT, the paper's model: 120 text
/// tokens and one MLP; the layer of examples/spatial_temporal: 0 and 2.
struct Transformer {
  std::string name = "custom";
  std::size_t layers = 1, hidden = 1, heads = 1;
  std::size_t mlp_ratio = 4;
  std::size_t cross_tokens = 120;
  std::size_t mlps = 1;

  /// Weights of the linear layers (biases and norms, under 0.1%, left out):
  /// 4 C^2 per self-attention, 4 C^2 for the cross-attention (its k and v act
  /// on the text), 2 C F per MLP.
  double parameters() const {
    const double C = double(hidden), F = double(mlp_ratio * hidden);
    return double(layers) * (8 * C * C + (cross_tokens ? 4 * C * C : 0) + 2 * C * F * double(mlps));
  }
  /// The sub-blocks Megatron-SP wraps: every attention and MLP.
  std::size_t sub_blocks() const { return 2 + (cross_tokens ? 1 : 0) + mlps; }
};

/// The paper's 720M model: 28 layers, hidden 1152, 16 heads (Open-Sora STDiT-XL/2).
inline Transformer model_720m() { return {"720M", 28, 1152, 16}; }
/// The paper's 3B model: 36 layers, hidden 2048, 32 heads. The paper prints
/// hidden 2038, which 32 heads do not divide; 2048 gives its 3B parameters.
inline Transformer model_3b() { return {"3B", 36, 2048, 32}; }

inline Transformer model_preset(const std::string& name) {
  if (name == "720M" || name == "720m") return model_720m();
  if (name == "3B" || name == "3b") return model_3b();
  throw InvalidArgument("dsp::model: unknown model '" + name + "' (known: 720M, 3B)");
}

/// The layer's layout: `opensora`, Open-Sora's STDiT block (spatial, temporal
/// and cross-attention to 120 text tokens, one MLP: 40 C^2 linear FLOPs per
/// token), which the paper's code trains; or `a1`, the paper's appendix A.1
/// (a spatial and a temporal block, each an attention and an MLP, no
/// cross-attention: 48 C^2).
enum class LayerLayout { opensora, a1 };

/// "opensora", "a1": the names the CLI takes.
inline const char* name(LayerLayout l) { return l == LayerLayout::a1 ? "a1" : "opensora"; }

/// The layout called `s`, or InvalidArgument naming the known ones.
inline LayerLayout parse_layer_layout(const std::string& s) {
  if (s == "opensora") return LayerLayout::opensora;
  if (s == "a1") return LayerLayout::a1;
  throw InvalidArgument("dsp::model: unknown layer layout '" + s + "' (known: opensora, a1)");
}

/// `m` with its layers laid out as `l`: a1 sets no cross-attention and two
/// MLPs, opensora 120 text tokens and one MLP.
inline Transformer with_layout(Transformer m, LayerLayout l) {
  if (l == LayerLayout::a1) {
    m.cross_tokens = 0, m.mlps = 2;
  } else {
    m.cross_tokens = 120, m.mlps = 1;
  }
  return m;
}

/// One training step's data: `batch` samples per SP group, each T x S tokens,
/// elements of `elem_bytes` (2: bf16), activations recomputed per layer in the
/// backward pass when `recompute` (gradient checkpointing; the paper's code
/// turns it on).
struct Workload {
  std::size_t batch = 1, temporal = 1, spatial = 1;
  std::size_t elem_bytes = 2;
  bool recompute = true;
  double resident_bytes = 0;  ///< per GPU, frozen models the job keeps there (a text encoder, a VAE)
  double tokens() const { return double(batch) * double(temporal) * double(spatial); }
};

/// Forward FLOPs of one layer per token: 2 per multiply-add of the linear
/// layers on the token (q, k, v, o of each self-attention; q and o of the
/// cross-attention; the MLPs) plus attention, 4 C L for a sequence of L keys
/// (scores and weighted sum): L = S, T, and the text tokens.
inline double layer_flops_per_token(const Transformer& m, const Workload& w) {
  const double C = double(m.hidden), F = double(m.mlp_ratio * m.hidden);
  const double linear = 16 * C * C + (m.cross_tokens ? 4 * C * C : 0) + 4 * C * F * double(m.mlps);
  return linear + 4 * C * (double(w.spatial) + double(w.temporal) + double(m.cross_tokens));
}

/// Forward FLOPs of the temporal attention alone per token (what a ring can hide its passes behind).
inline double temporal_attention_flops_per_token(const Transformer& m, const Workload& w) {
  return 4.0 * double(m.hidden) * double(w.temporal);
}

// --------------------------------------------------------- the prediction ----

/// The predicted training step of `strategy` on an SP x DP mesh.
struct Prediction {
  Strategy strategy = Strategy::dsp;
  int sp = 1, dp = 1;
  bool runs = true;             ///< false: the strategy cannot run on this SP size (heads), see `why`
  bool fits = true;             ///< memory_bytes <= the cluster's memory
  std::string why;              ///< why it cannot run or does not fit
  std::size_t layer_bytes = 0;  ///< per layer, forward: each operation's busiest GPU's bytes, summed (the cost model)
  std::size_t layer_operations = 0;  ///< communicating operations per layer, forward
  double comm_time = 0;              ///< seconds per step, SP communication not hidden behind compute
  double compute_time = 0;           ///< seconds per step, math
  double dp_time = 0;                ///< seconds per step, the DP group's gradient and parameter exchange
  double step_time = 0;              ///< comm + compute + dp
  double memory_bytes = 0;           ///< per GPU: model states, checkpoints, one layer's activations, buffers
  double model_flops = 0;            ///< per GPU per step, on average: 3 x forward (recomputation not counted)
  double tokens_per_second = 0;      ///< the whole job's
  /// Model FLOP/s per GPU.
  double flops_per_gpu() const { return step_time > 0 ? model_flops / step_time : 0; }
};

namespace detail {
/// `v` rounded to a whole number and written out in full ("2793967739"; "inf"
/// when it is), never through an integer type that could wrap.
inline std::string whole_number(double v) {
  const int n = std::snprintf(nullptr, 0, "%.0f", v);
  std::string s(n > 0 ? std::size_t(n) + 1 : 1, '\0');
  if (n > 0) std::snprintf(s.data(), s.size(), "%.0f", v);
  s.resize(n > 0 ? std::size_t(n) : 0);
  return s;
}

/// Seconds of one forward pass of the layer's SP communication.
inline double layer_comm_time(const Cluster& c, const Group& g, const LayerTraffic& t) {
  double s = 0;
  for (const auto& o : t.ops) {
    const double b = double(o.max_bytes);
    switch (o.kind) {
      case OpKind::all_to_all:  // the exchange, then the copies around it (they do not overlap)
        s += double(o.count) * (all_to_all_time(c, g, b) + (b > 0 ? copy_time(c, double(o.copy_bytes)) : 0));
        break;
      case OpKind::all_gather: s += double(o.count) * all_gather_time(c, g, b); break;
      case OpKind::reduce_scatter: s += double(o.count) * reduce_scatter_time(c, g, b); break;
      case OpKind::ring_pass: s += ring_pass_time(c, g, double(o.count) * b); break;  // the tensors travel together
    }
  }
  return s;
}
}  // namespace detail

namespace detail {
/// The arguments of predict, checked.
inline void check_prediction_args(const Transformer& m, const Workload& w, int sp, int dp) {
  if (sp < 1 || dp < 1) throw InvalidArgument("dsp::model: SP and DP sizes must be at least 1");
  if (m.layers == 0 || m.hidden == 0 || m.heads == 0 || m.mlp_ratio == 0)
    throw InvalidArgument("dsp::model: the model needs layers, hidden, heads and mlp_ratio >= 1");
  if (m.hidden % m.heads != 0)
    throw InvalidArgument("dsp::model: hidden " + std::to_string(m.hidden) + " is no multiple of " +
                          std::to_string(m.heads) + " heads");
  if (w.batch == 0 || w.temporal == 0 || w.spatial == 0 || w.elem_bytes == 0)
    throw InvalidArgument("dsp::model: batch, temporal and spatial lengths and element size must be at least 1");
  // The DP exchange counts the parameters' bytes in std::size_t (the cost
  // model): refused here, before a conversion of more than 2^64 could wrap.
  if (!(m.parameters() * double(w.elem_bytes) < 0x1p63))
    throw InvalidArgument("dsp::model: the model's " + whole_number(m.parameters()) + " parameters of " +
                          std::to_string(w.elem_bytes) +
                          " bytes are too many to count in bytes (2^63): fewer layers, or a smaller hidden size, "
                          "MLP ratio or MLP count");
}

/// Why `strategy` cannot run on SP `sp` ("" when it can): Ulysses (both) and
/// Megatron-SP shard the heads over the SP group.
inline std::string head_sharding_error(const Transformer& m, Strategy strategy, int sp) {
  if (strategy == Strategy::dsp || strategy == Strategy::ring) return "";
  if (std::size_t(sp) > m.heads) return "SP " + std::to_string(sp) + " > " + std::to_string(m.heads) + " heads";
  if (m.heads % std::size_t(sp) != 0)
    return std::to_string(m.heads) + " heads do not divide over SP " + std::to_string(sp);
  return "";
}

/// Seconds per step of the DP exchange, from the cost model on a flat tensor
/// of the parameters: ZeRO-2's reduce-scatter and all-gather, or (Megatron-SP)
/// an all-reduce of each tensor-parallel shard's gradients.
inline double dp_exchange_time(const Cluster& c, const Transformer& m, const Workload& w, Strategy strategy, int sp,
                               int dp) {
  if (dp <= 1) return 0;
  const std::size_t params = std::size_t(m.parameters());
  const Group gd = strided_group(c, dp, sp);
  if (strategy == Strategy::megatron_sp) {
    const std::array<std::size_t, 1> shard{(params + std::size_t(sp) - 1) / std::size_t(sp)};
    return all_reduce_time(
        c, gd,
        double(redistribute_plan<Partial<>, Replicated, 1>::cost(shard, w.elem_bytes, std::size_t(dp), 0).max_bytes));
  }
  const std::array<std::size_t, 1> all{params};
  const auto rs = redistribute_plan<Partial<>, Sharded<0>, 1>::cost(all, w.elem_bytes, std::size_t(dp), 0);
  const auto ag = transition_cost<Sharded<0>, Replicated>(all, w.elem_bytes, std::size_t(dp), 0);
  return reduce_scatter_time(c, gd, double(rs.max_bytes)) + all_gather_time(c, gd, double(ag.max_bytes));
}

/// Bytes per GPU: model states (ZeRO-2: 2 bytes of parameters each plus 14
/// sharded over DP; Megatron-SP: 16 sharded over SP), a checkpoint per
/// layer, one layer's saved activations, and the strategy's buffers.
inline double memory_per_gpu(const Transformer& m, const Workload& w, Strategy strategy, int sp, int dp,
                             double local_tokens) {
  const double C = double(m.hidden), e = double(w.elem_bytes), L = double(m.layers);
  const double P = m.parameters(), F = double(m.mlp_ratio) * C;
  const double states = strategy == Strategy::megatron_sp ? 16 * P / sp : 2 * P + 14 * P / dp;
  // Saved for the backward of one layer, per token: per self-attention its input,
  // normed input, q, k, v and output (6 C); cross-attention its input, q and output
  // (3 C); per MLP its input, normed input, and the two F-wide hidden tensors.
  const double per_token = 12 * C + (m.cross_tokens ? 3 * C : 0) + (2 * C + 2 * F) * double(m.mlps);
  const double layers_saved = w.recompute ? 1 : L;     // recomputation keeps one layer's activations
  const double checkpoints = w.recompute ? L * C : 0;  // each layer's input
  // Megatron-SP splits its activations by heads and columns rather than by
  // tokens: the same amount per GPU.
  const double act = per_token * layers_saved * local_tokens;
  double buffers = 0;
  switch (strategy) {
    case Strategy::dsp:  // the switched tensor and the switch's send and receive buffers
      buffers = 3 * C * local_tokens;
      break;
    case Strategy::ulysses:           // q, k, v and the output in head layout, beside their T-sharded selves
    case Strategy::ulysses_opensora:  // the same, one attention at a time
      buffers = 4 * C * local_tokens;
      break;
    case Strategy::ring:  // k and v of the block in flight and the next, dk and dv accumulators
      buffers = 6 * C * local_tokens;
      break;
    case Strategy::megatron_sp:  // each sub-block's gathered input, saved for its first linear
                                 // layer's weight gradient, and the gradient of one: whole sequence
      buffers = double(m.sub_blocks() + 1) * C * w.tokens();
      break;
  }
  if (sp == 1) buffers = 0;  // nothing to communicate: every strategy is plain data parallelism
  return w.resident_bytes + states + e * (checkpoints * local_tokens + act + buffers);
}
}  // namespace detail

/// Predicts one training step of `m` on `w` with `strategy` over `sp` x `dp`
/// GPUs of `c` (SP groups of consecutive GPUs, the DP axis across them).
///
/// Per layer: forward FLOPs x 3 (x 4 with recomputation) at the cluster's
/// efficiency; the layer's SP traffic (layer_traffic, the busiest GPU) priced
/// by the collective times, each all-to-all with the copies around it
/// (copy_time), once forward, once backward and once more when
/// recomputing; a ring's backward passes twice the bytes (k, v and dk, dv),
/// and each ring pass hides behind the temporal attention it feeds. The DP
/// exchange: ZeRO-2's reduce-scatter of the bf16 gradients and all-gather of
/// the parameters (DSP, Ulysses, Ring), an all-reduce of each tensor-parallel
/// shard's gradients (Megatron-SP), priced by dsp's cost model and not hidden.
/// Memory: model states (ZeRO-2: 2 bytes of parameters each plus 14 sharded
/// over DP; Megatron-SP: 16 sharded over SP), a checkpoint per layer, one
/// layer's saved activations (flash attention: no score matrix), and each
/// strategy's buffers (docs/cluster-model.md).
inline Prediction predict(const Cluster& c, const Transformer& m, const Workload& w, Strategy strategy, int sp,
                          int dp) {
  check(c);
  detail::check_prediction_args(m, w, sp, dp);
  Prediction p;
  p.strategy = strategy;
  p.sp = sp, p.dp = dp;
  p.why = detail::head_sharding_error(m, strategy, sp);
  p.runs = p.why.empty();

  const Group g = consecutive_group(c, sp);
  const double L = double(m.layers);
  // The busiest GPU holds ceil(T / SP) frames (dsp's partition: the first
  // T % SP ranks hold one more); the work is set by it, the useful FLOPs by the average.
  const double local_tokens =
      double(w.batch) * double(w.spatial) * double(Partition{w.temporal, std::size_t(sp)}.count(0));
  const double passes = w.recompute ? 4 : 3;  // FLOPs: forward, (recompute,) backward = 2 forwards

  const LayerShape shape{w.batch, w.temporal,   w.spatial,      m.hidden,
                         m.heads, w.elem_bytes, m.sub_blocks(), m.cross_tokens ? 1u : 0u};
  const LayerTraffic t = layer_traffic(strategy, shape, std::size_t(sp), 0);
  for (const auto& o : t.ops)
    p.layer_bytes = dsp::detail::checked_add(p.layer_bytes, dsp::detail::checked_mul(o.count, o.max_bytes));
  p.layer_operations = t.operations();

  const double fwd = layer_flops_per_token(m, w) * local_tokens;
  p.compute_time = L * compute_time(c, fwd * passes);
  p.model_flops = L * layer_flops_per_token(m, w) * (w.tokens() / sp) * 3;
  const double comm = detail::layer_comm_time(c, g, t);
  if (strategy == Strategy::ring) {
    // Forward and recompute pass k, v; the backward k, v and dk, dv: each pass
    // hides behind the attention over T it feeds (twice the math backward).
    const double attn = compute_time(c, temporal_attention_flops_per_token(m, w) * local_tokens);
    const double units = (w.recompute ? 2 : 1) + 2;
    p.comm_time = L * units * std::max(0.0, comm - attn);
  } else {
    p.comm_time = L * (w.recompute ? 3 : 2) * comm;
  }
  p.dp_time = detail::dp_exchange_time(c, m, w, strategy, sp, dp);
  p.step_time = p.compute_time + p.comm_time + p.dp_time;
  p.tokens_per_second = w.tokens() * dp / p.step_time;

  p.memory_bytes = detail::memory_per_gpu(m, w, strategy, sp, dp, local_tokens);
  if (p.memory_bytes > c.memory_bytes) {
    p.fits = false;
    if (p.why.empty())
      p.why = "needs " + detail::whole_number(p.memory_bytes / (1024.0 * 1024 * 1024)) + " GiB per GPU";
  }
  return p;
}

/// Every (strategy, SP) of `gpus` GPUs, DP = gpus / SP, for SP dividing `gpus`:
/// predicted, in the order of `strategies` then SP.
inline std::vector<Prediction> predict_all(const Cluster& c, const Transformer& m, const Workload& w, int gpus,
                                           const std::vector<Strategy>& strategies = {all_strategies.begin(),
                                                                                      all_strategies.end()}) {
  if (gpus < 1) throw InvalidArgument("dsp::model: need at least one GPU");
  std::vector<Prediction> out;
  for (Strategy s : strategies)
    for (int sp = 1; sp <= gpus; ++sp)
      if (gpus % sp == 0) out.push_back(predict(c, m, w, s, sp, gpus / sp));
  return out;
}

/// The recommendation among `all`: the highest throughput among those that
/// run and fit; nullptr when none does.
inline const Prediction* recommend(const std::vector<Prediction>& all) {
  const Prediction* best = nullptr;
  for (const auto& p : all)
    if (p.runs && p.fits && (!best || p.tokens_per_second > best->tokens_per_second)) best = &p;
  return best;
}

/// The smallest SP (a divisor of `gpus`) at which `strategy` runs and fits,
/// 0 when none: the paper's rule for its Table 5.
inline int smallest_fitting_sp(const Cluster& c, const Transformer& m, const Workload& w, Strategy strategy, int gpus) {
  for (int sp = 1; sp <= gpus; ++sp)
    if (gpus % sp == 0) {
      const Prediction p = predict(c, m, w, strategy, sp, gpus / sp);
      if (p.runs && p.fits) return sp;
    }
  return 0;
}

}  // namespace dsp::model
