// SPDX-License-Identifier: BSD-3-Clause
// dsp::model: the DSP paper's experiments (Zhao et al., ICML 2025) as inputs
// to the cluster model: Table 5's end-to-end points on 128 GPUs (Figure 5)
// and Table 7's weak scaling (Figure 6 by its caption, 7 in the appendix's
// text), and the paper's claims about them. dsp-plan --preset prints them;
// docs/paper-reproduction.md sets them beside the paper's claims.
#pragma once

#include <dsp/model/transformer.hpp>

#include <array>
#include <cstddef>
#include <vector>

namespace dsp::model {

/// The paper's job on one sample of T x 4096 tokens per SP group: bf16,
/// recomputation, and Open-Sora's frozen T5-XXL text encoder on every GPU
/// (about 4.7 billion parameters in bf16: 9.5 GB, an assumption: the paper
/// does not say where its captions were encoded).
inline Workload paper_workload(std::size_t temporal, std::size_t batch = 1) {
  Workload w;
  w.batch = batch;
  w.temporal = temporal;
  w.spatial = 4096;
  w.elem_bytes = 2;
  w.recompute = true;
  w.resident_bytes = 9.5e9;
  return w;
}

/// One point of Table 5: a model, a temporal length (tokens = T x 4096), and
/// the SP size each method ran with (0: "/", did not run), in Table 5's
/// columns: DSP, Ulysses, Megatron-SP, Ring (sp_for() maps a strategy).
struct Table5Point {
  Transformer model;
  std::size_t temporal = 0;
  std::array<int, 4> sp{};  // DSP, Ulysses, Megatron-SP, Ring
  /// The SP `s` ran with; both Ulysses strategies take Table 5's Ulysses column.
  int sp_for(Strategy s) const {
    switch (s) {
      case Strategy::dsp: return sp[0];
      case Strategy::ulysses:
      case Strategy::ulysses_opensora: return sp[1];
      case Strategy::megatron_sp: return sp[2];
      case Strategy::ring: return sp[3];
    }
    return 0;
  }
};

/// The paper's GPUs for Figure 5.
inline constexpr int paper_gpus = 128;

/// Table 5: 720M and 3B at 0.5M, 1M, 2M and 4M tokens on 128 GPUs, their
/// layers laid out as `layout` (Open-Sora's, which the paper's runs trained,
/// by default).
inline std::vector<Table5Point> paper_table5(LayerLayout layout = LayerLayout::opensora) {
  const Transformer a = with_layout(model_720m(), layout), b = with_layout(model_3b(), layout);
  return {
      {a, 128, {2, 2, 2, 2}}, {a, 256, {4, 4, 4, 4}},  {a, 512, {8, 8, 16, 8}},   {a, 1024, {16, 16, 0, 16}},
      {b, 128, {4, 4, 4, 4}}, {b, 256, {8, 8, 16, 8}}, {b, 512, {16, 16, 0, 16}}, {b, 1024, {32, 32, 0, 32}},
  };
}

/// What the paper reports for Figure 5 (section 5 and the abstract): DSP's
/// end-to-end throughput over a method, as a range; and the FLOPS drop from
/// 0.5M to 4M tokens: at most 23% for DSP, at least 40% for the others.
struct PaperSpeedup {
  double lo = 0, hi = 0;  ///< lo 0: no lower bound ("up to hi")
};
/// DSP over Ulysses: 1.32x to 1.75x (both Ulysses strategies take it); over
/// Megatron-SP and Ring: up to 10x (the paper's "32.2% to 10x" spans all the
/// embedded methods, its low end Ulysses'); DSP over itself: 1.
inline PaperSpeedup paper_dsp_speedup(Strategy s) {
  switch (s) {
    case Strategy::dsp: return {1, 1};
    case Strategy::ulysses:
    case Strategy::ulysses_opensora: return {1.32, 1.75};
    case Strategy::megatron_sp:
    case Strategy::ring: return {0, 10};
  }
  return {};
}
inline constexpr double paper_dsp_flops_drop = 0.23;     ///< DSP's FLOPS drop from 0.5M to 4M tokens: at most
inline constexpr double paper_others_flops_drop = 0.40;  ///< the others': at least
/// Weak scaling (3B, 8 to 64 GPUs): DSP loses 15%, and is 80.7% faster than the other methods.
inline constexpr double paper_weak_scaling_loss = 0.15;
inline constexpr double paper_weak_scaling_dsp_over_others = 1.807;

/// A method at one Table 5 point: the prediction on the paper's mesh (when it
/// ran) and the smallest SP the model finds fitting (0: none).
struct Figure5Row {
  const Table5Point* point = nullptr;
  Strategy strategy = Strategy::dsp;
  int paper_sp = 0;
  int model_sp = 0;
  Prediction prediction;  ///< on (paper_sp, 128 / paper_sp); default (step_time 0) when paper_sp == 0
};

/// Every method at every point of `table` (paper_table5()), on cluster `c`.
inline std::vector<Figure5Row> figure5(const Cluster& c, const std::vector<Table5Point>& table) {
  std::vector<Figure5Row> rows;
  for (const auto& pt : table)
    for (std::size_t k = 0; k < all_strategies.size(); ++k) {
      Figure5Row r;
      r.point = &pt;
      r.strategy = all_strategies[k];
      r.paper_sp = pt.sp_for(r.strategy);
      const Workload w = paper_workload(pt.temporal);
      r.model_sp = smallest_fitting_sp(c, pt.model, w, r.strategy, paper_gpus);
      if (r.paper_sp > 0) r.prediction = predict(c, pt.model, w, r.strategy, r.paper_sp, paper_gpus / r.paper_sp);
      rows.push_back(r);
    }
  return rows;
}

/// One point of the weak scaling (Figure 6 by its caption, Figure 7 in the
/// appendix's text; Table 7: 3B, T = 128, 8 to 64 GPUs, the batch growing with
/// the GPUs): `gpus` GPUs, one sample per 8 GPUs. `one_group`: all GPUs one SP
/// group over the whole batch, sequence parallelism only, the paper's layout
/// (A.3.3 and the figure's caption); otherwise SP groups of 8 (one node) and
/// DP across them, for comparison.
struct Figure7Row {
  int gpus = 0;
  bool one_group = false;
  Strategy strategy = Strategy::dsp;
  Prediction prediction;
  double efficiency = 0;  ///< tokens/s per GPU relative to the 8-GPU point (0 when that did not run)
};

/// Every strategy at 8, 16, 32 and 64 GPUs, SP groups of 8 first, then one
/// SP group; the 3B model laid out as `layout`.
inline std::vector<Figure7Row> figure7(const Cluster& c, LayerLayout layout = LayerLayout::opensora) {
  std::vector<Figure7Row> rows;
  const Transformer m = with_layout(model_3b(), layout);
  for (bool one : {false, true})
    for (Strategy s : all_strategies) {
      double base = 0;
      for (int gpus : {8, 16, 32, 64}) {
        Figure7Row r;
        r.gpus = gpus, r.one_group = one, r.strategy = s;
        const int samples = gpus / 8;
        r.prediction = one ? predict(c, m, paper_workload(128, std::size_t(samples)), s, gpus, 1)
                           : predict(c, m, paper_workload(128), s, 8, samples);
        const double per_gpu = r.prediction.runs ? r.prediction.tokens_per_second / gpus : 0;
        if (gpus == 8) base = per_gpu;
        r.efficiency = base > 0 ? per_gpu / base : 0;
        rows.push_back(r);
      }
    }
  return rows;
}

}  // namespace dsp::model
