// SPDX-License-Identifier: BSD-3-Clause
// dsp-plan: which sequence-parallel strategy and which SP x DP mesh, before
// renting the GPUs. Prices each strategy's exact per-layer traffic (dsp's cost
// model) on a cluster model (include/dsp/model/), with compute and memory, and
// recommends one; --preset prints the DSP paper's Figure 5 and its weak
// scaling (Figure 6 by its caption, 7 in its appendix's text) as the model
// predicts them, beside the paper's figures. docs/cluster-model.md explains the model.
//
//   dsp-plan --model 720M --temporal 1024 --gpus 128
//   dsp-plan --model 3B --temporal 512 --gpus 64 --calibrate intra.csv --calibrate inter.csv
//   dsp-plan --preset paper-fig5
#include <dsp/model.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace dsp::model;

constexpr double GiB = 1024.0 * 1024 * 1024;

// `v` as printf's format `f` writes it, whole: %.3f of a step time of 1e300 s
// (--efficiency 1e-300) has over 300 digits.
std::string fmt(const char* f, double v) {
  const int n = std::snprintf(nullptr, 0, f, v);
  if (n <= 0) return {};
  std::string b(std::size_t(n) + 1, '\0');
  std::snprintf(b.data(), b.size(), f, v);
  b.resize(std::size_t(n));
  return b;
}

std::string describe(const Cluster& c) {
  return c.name + " (" + std::to_string(c.gpus_per_node) + " GPUs per node; in a node " +
         fmt("%.0f", c.intra.bandwidth / 1e9) + " GB/s, " + fmt("%.1f", c.intra.latency * 1e6) + " us; across nodes " +
         fmt("%.1f", c.inter.bandwidth / 1e9) + " GB/s, " + fmt("%.1f", c.inter.latency * 1e6) +
         " us; collectives across nodes " + fmt("%.0f", c.collective_bandwidth / 1e9) + " GB/s; device memory " +
         fmt("%.0f", c.memory_bandwidth / 1e9) + " GB/s; " + fmt("%.4g", c.peak_flops / 1e12) + " TFLOP/s at " +
         fmt("%.3g", c.efficiency * 100) + "%; " + fmt("%.0f", c.memory_bytes / GiB) + " GiB per GPU)";
}

std::string describe(const Transformer& m) {
  return m.name + " (" + std::to_string(m.layers) + " layers, hidden " + std::to_string(m.hidden) + ", " +
         std::to_string(m.heads) + " heads, MLP x" + std::to_string(m.mlp_ratio) + ", " + std::to_string(m.mlps) +
         " MLP(s) and " +
         (m.cross_tokens ? "cross-attention to " + std::to_string(m.cross_tokens) + " text tokens"
                         : std::string("no cross-attention")) +
         " per layer; " + fmt("%.2f", m.parameters() / 1e9) + " B parameters)";
}

// Where one link's numbers come from: the cluster preset, a --calibrate fit
// (the last file whose runs fitted it), and options set after the fit.
struct LinkOrigin {
  std::string file;  // the file of the fit; empty: not calibrated
  int points = 0;
  bool bandwidth_option = false, latency_option = false;

  bool calibrated() const { return points > 0; }
  bool preset_only() const { return !calibrated() && !bandwidth_option && !latency_option; }
  // The csv field: preset, calibrated, options (both numbers from options),
  // preset+option or calibrated+option (one of them).
  std::string code() const {
    if (bandwidth_option && latency_option) return "options";
    return std::string(calibrated() ? "calibrated" : "preset") + (bandwidth_option || latency_option ? "+option" : "");
  }
  // For the text header, e.g. "calibrated from node.csv (3 points)".
  std::string text(const std::string& preset, const char* gbs, const char* us) const {
    if (bandwidth_option && latency_option) return std::string("set by ") + gbs + " and " + us;
    std::string t = calibrated() ? "calibrated from " + file + " (" + std::to_string(points) + " points)"
                                 : "the " + preset + " preset's (not calibrated)";
    if (bandwidth_option) t += ", bandwidth set by " + std::string(gbs);
    if (latency_option) t += ", latency set by " + std::string(us);
    return t;
  }
};

struct Links {
  std::string preset;  // the --cluster preset
  LinkOrigin intra, inter;
  std::string header() const {
    return "# links: in a node " + intra.text(preset, "--intra-gbs", "--intra-latency-us") + "; across nodes " +
           inter.text(preset, "--inter-gbs", "--inter-latency-us") + "\n";
  }
};

// Whether any group of the prediction's mesh spans nodes: its SP group, or its
// DP group (one GPU of each SP group).
bool spans_nodes(const Cluster& c, const Prediction& p) {
  return consecutive_group(c, p.sp).spans_nodes() || (p.dp > 1 && strided_group(c, p.dp, p.sp).spans_nodes());
}

// On stderr: one link calibrated, the other wholly the preset's, and groups
// that span nodes, whose times mix the fitted link with the preset one (an
// all-to-all takes the slower of the two levels; a ring the link across nodes).
void warn_half_calibrated(const Links& l, const Cluster& c, const std::vector<const Prediction*>& ps) {
  const bool intra_only = l.intra.calibrated() && l.inter.preset_only();
  const bool inter_only = l.inter.calibrated() && l.intra.preset_only();
  if (!intra_only && !inter_only) return;
  std::size_t spanning = 0;
  for (const Prediction* p : ps) spanning += spans_nodes(c, *p) ? 1 : 0;
  if (spanning == 0) return;
  const Link& other = intra_only ? c.inter : c.intra;
  std::cerr << "dsp-plan: warning: only the link " << (intra_only ? "in a node" : "across nodes")
            << " is calibrated (from " << (intra_only ? l.intra.file : l.inter.file) << "); the link "
            << (intra_only ? "across nodes" : "in a node") << " is still the " << l.preset << " preset's ("
            << fmt("%.4g", other.bandwidth / 1e9) << " GB/s, " << fmt("%.4g", other.latency * 1e6) << " us), and "
            << spanning << " of the " << ps.size()
            << " rows have groups that span nodes, whose times mix the two: calibrate "
            << (intra_only ? "across nodes too (a dsp-bench run on the ranks of more than one node)"
                           : "in a node too (a dsp-bench run on the ranks of one node)")
            << " or set " << (intra_only ? "--inter-gbs and --inter-latency-us" : "--intra-gbs and --intra-latency-us")
            << "\n";
}

void print_predictions(const std::vector<Prediction>& ps, const std::string& format, const Links& links) {
  if (format == "csv") {
    // intra_link, inter_link: where each link's numbers come from (LinkOrigin::code).
    std::cout << "strategy,sp,dp,runs,fits,layer_bytes,layer_ops,comm_s,compute_s,dp_s,step_s,tokens_per_s,"
                 "model_tflops_per_gpu,memory_gib,note,intra_link,inter_link\n";
    for (const auto& p : ps)
      std::cout << name(p.strategy) << ',' << p.sp << ',' << p.dp << ',' << p.runs << ',' << p.fits << ','
                << p.layer_bytes << ',' << p.layer_operations << ',' << p.comm_time << ',' << p.compute_time << ','
                << p.dp_time << ',' << p.step_time << ',' << p.tokens_per_second << ',' << p.flops_per_gpu() / 1e12
                << ',' << p.memory_bytes / GiB << ',' << p.why << ',' << links.intra.code() << ',' << links.inter.code()
                << '\n';
    return;
  }
  std::printf("%-16s %4s %4s %16s %4s %9s %9s %8s %9s %12s %8s %8s  %s\n", "strategy", "SP", "DP", "layer bytes/GPU",
              "ops", "comm s", "compute s", "DP s", "step s", "tokens/s", "TFLOP/s", "GiB/GPU", "note");
  for (const auto& p : ps) {
    if (!p.runs) {
      std::printf("%-16s %4d %4d %16s  cannot run: %s\n", name(p.strategy), p.sp, p.dp, "-", p.why.c_str());
      continue;
    }
    std::string note = p.fits ? "" : "does not fit: " + p.why;
    std::printf("%-16s %4d %4d %16zu %4zu %9.3f %9.3f %8.3f %9.3f %12.0f %8.1f %8.1f  %s\n", name(p.strategy), p.sp,
                p.dp, p.layer_bytes, p.layer_operations, p.comm_time, p.compute_time, p.dp_time, p.step_time,
                p.tokens_per_second, p.flops_per_gpu() / 1e12, p.memory_bytes / GiB, note.c_str());
  }
}

int plan(const Cluster& c, const Links& links, const Transformer& m, const Workload& w, int gpus,
         const std::vector<Strategy>& strategies, const std::vector<int>& sps, const std::string& format) {
  std::vector<Prediction> ps;
  if (sps.empty()) {
    ps = predict_all(c, m, w, gpus, strategies);
  } else {
    for (Strategy s : strategies)
      for (int sp : sps) ps.push_back(predict(c, m, w, s, sp, gpus / sp));
  }
  const Prediction* best = recommend(ps);
  std::vector<const Prediction*> rows;
  for (const auto& p : ps) rows.push_back(&p);
  warn_half_calibrated(links, c, rows);
  if (format == "text") {
    std::cout << "# dsp-plan: " << describe(m) << "\n# " << w.batch << " x " << w.temporal << " x " << w.spatial
              << " tokens per SP group (batch x temporal x spatial), " << w.elem_bytes << "-byte elements, "
              << (w.recompute ? "recomputation" : "no recomputation") << "; " << gpus << " GPUs of " << describe(c)
              << "\n"
              << links.header() << "# per training step; layer bytes: the busiest GPU's per layer, forward "
              << "(dsp's cost model); tokens/s: the whole job's\n";
  }
  print_predictions(ps, format, links);
  if (format == "text") {
    if (best && best->sp == 1) {
      std::cout << "# recommended: no sequence parallelism: DP " << best->dp << " (every strategy is plain data "
                << "parallelism at SP 1): " << fmt("%.3f", best->step_time) << " s per step, "
                << fmt("%.0f", best->tokens_per_second) << " tokens/s, " << fmt("%.1f", best->memory_bytes / GiB)
                << " GiB per GPU\n";
    } else if (best) {
      std::cout << "# recommended: " << name(best->strategy) << " with SP " << best->sp << " x DP " << best->dp << ": "
                << fmt("%.3f", best->step_time) << " s per step, " << fmt("%.0f", best->tokens_per_second)
                << " tokens/s, " << fmt("%.1f", best->memory_bytes / GiB) << " GiB per GPU\n";
    } else {
      // Say how far off the closest row is, and which knobs move it.
      const Prediction* least = nullptr;
      for (const auto& p : ps)
        if (p.runs && (!least || p.memory_bytes < least->memory_bytes)) least = &p;
      std::cout << "# recommended: none: nothing runs and fits";
      if (least)
        std::cout << "; the least memory is " << fmt("%.1f", least->memory_bytes / GiB) << " GiB per GPU ("
                  << name(least->strategy) << " SP " << least->sp << ") of " << fmt("%.1f", c.memory_bytes / GiB)
                  << " GiB: a larger SP (more GPUs), a shorter sequence, a smaller batch or less resident memory";
      std::cout << "\n";
    }
  }
  return 0;
}

// "1.32-1.75" or "<=10": the paper's figure of DSP over `s` ("-" when none).
std::string paper_range(Strategy s) {
  const PaperSpeedup p = paper_dsp_speedup(s);
  if (s == Strategy::dsp || !(p.hi > 0)) return "-";
  if (!(p.lo > 0)) return "<=" + fmt("%g", p.hi);
  return fmt("%.2f", p.lo) + "-" + fmt("%.2f", p.hi);
}

// Where `v` lies against [lo, hi]: "in", or how far off the nearest bound (-12%: 12% below lo).
std::string against(double v, double lo, double hi) {
  if (v >= lo && v <= hi) return "in";
  return fmt("%+.0f%%", (v < lo ? v / lo - 1 : v / hi - 1) * 100);
}

int paper_fig5(const Cluster& c, const Links& links, const std::string& format, LayerLayout layout) {
  const auto table = paper_table5(layout);
  const auto rows = figure5(c, table);
  const std::size_t ns = all_strategies.size();
  std::vector<const Prediction*> priced;
  for (const auto& r : rows)
    if (r.paper_sp > 0) priced.push_back(&r.prediction);
  warn_half_calibrated(links, c, priced);
  if (format == "csv") {
    std::cout << "model,temporal,tokens,strategy,paper_sp,paper_dp,model_sp,layer_bytes,comm_s,compute_s,dp_s,step_s,"
                 "tokens_per_s,model_tflops_per_gpu,memory_gib,dsp_speedup,paper_dsp_speedup_lo,paper_dsp_speedup_hi\n";
  } else {
    std::cout
        << "# dsp-plan --preset paper-fig5: the DSP paper's Figure 5 (Table 5's meshes on " << paper_gpus
        << " GPUs, spatial 4096, one sample per SP group, bf16, recomputation, 9.5 GB frozen text encoder; "
        << (layout == LayerLayout::a1 ? "the paper's A.1 layer: two blocks, no cross-attention"
                                      : "Open-Sora's STDiT layer: spatial, temporal and cross-attention, one MLP")
        << ")\n"
        << "# cluster: " << describe(c) << "\n"
        << links.header()
        << "# SP,DP: Table 5's mesh (/: did not run; both Ulysses take its Ulysses column); model SP: the smallest "
           "SP the model finds fitting (0: none); x DSP: DSP's predicted throughput over this method's; paper: "
           "the paper's figure for it; vs: in its range, or how far outside\n";
    std::printf("%-5s %6s %-16s %7s %8s %16s %8s %9s %8s %8s %12s %8s %7s %7s %9s %5s\n", "model", "tokens", "method",
                "SP,DP", "model SP", "layer bytes/GPU", "comm s", "compute s", "DP s", "step s", "tokens/s", "TFLOP/s",
                "GiB", "x DSP", "paper", "vs");
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const Prediction& dsp = rows[i - (i % ns)].prediction;
    const Prediction& p = r.prediction;
    const double tokens = double(r.point->temporal) * 4096;
    const double speedup = r.paper_sp > 0 && p.tokens_per_second > 0 ? dsp.tokens_per_second / p.tokens_per_second : 0;
    const PaperSpeedup paper = paper_dsp_speedup(r.strategy);
    const std::string tok = fmt("%.1fM", tokens / (1024.0 * 1024));
    if (format == "csv") {
      // Table 5's "/" (did not run): the mesh and prediction fields stay empty.
      std::cout << r.point->model.name << ',' << r.point->temporal << ',' << std::size_t(tokens) << ','
                << name(r.strategy) << ',';
      if (r.paper_sp == 0) {
        std::cout << ",," << r.model_sp << ",,,,,,,,,," << paper.lo << ',' << paper.hi << '\n';
        continue;
      }
      std::cout << r.paper_sp << ',' << paper_gpus / r.paper_sp << ',' << r.model_sp << ',' << p.layer_bytes << ','
                << p.comm_time << ',' << p.compute_time << ',' << p.dp_time << ',' << p.step_time << ','
                << fmt("%.0f", p.tokens_per_second) << ',' << p.flops_per_gpu() / 1e12 << ',' << p.memory_bytes / GiB
                << ',' << speedup << ',' << paper.lo << ',' << paper.hi << '\n';
      continue;
    }
    if (r.paper_sp == 0) {
      std::printf("%-5s %6s %-16s %7s %8d %16s\n", r.point->model.name.c_str(), tok.c_str(), name(r.strategy), "/",
                  r.model_sp, "-");
      continue;
    }
    const std::string mesh = std::to_string(r.paper_sp) + "," + std::to_string(paper_gpus / r.paper_sp);
    const std::string vs = r.strategy == Strategy::dsp ? "" : against(speedup, paper.lo, paper.hi);
    std::printf("%-5s %6s %-16s %7s %8d %16zu %8.3f %9.3f %8.3f %8.3f %12.0f %8.1f %7.1f %7.2f %9s %5s\n",
                r.point->model.name.c_str(), tok.c_str(), name(r.strategy), mesh.c_str(), r.model_sp, p.layer_bytes,
                p.comm_time, p.compute_time, p.dp_time, p.step_time, p.tokens_per_second, p.flops_per_gpu() / 1e12,
                p.memory_bytes / GiB, speedup, paper_range(r.strategy).c_str(), vs.c_str());
  }
  if (format == "csv") return 0;
  // Per method, over the points it ran: DSP's speedup and DSP's share of its bytes.
  std::cout << "# DSP over each method, predicted over the points it ran (paper), and DSP's bytes per layer over its "
               "(paper: DSP's volume under 25% of the embedded methods'):\n";
  for (std::size_t k = 1; k < ns; ++k) {
    double lo = 0, hi = 0, span_lo = 0, span_hi = 0, vol_lo = 0, vol_hi = 0;
    for (std::size_t i = k; i < rows.size(); i += ns) {
      const Prediction& p = rows[i].prediction;
      if (rows[i].paper_sp == 0 || !(p.tokens_per_second > 0)) continue;
      const Prediction& d = rows[i - k].prediction;
      const double x = d.tokens_per_second / p.tokens_per_second;
      const double v = p.layer_bytes > 0 ? double(d.layer_bytes) / double(p.layer_bytes) : 0;
      lo = lo > 0 ? std::min(lo, x) : x, hi = std::max(hi, x);
      vol_lo = vol_lo > 0 ? std::min(vol_lo, v) : v, vol_hi = std::max(vol_hi, v);
      if (consecutive_group(c, rows[i].paper_sp).spans_nodes())
        span_lo = span_lo > 0 ? std::min(span_lo, x) : x, span_hi = std::max(span_hi, x);
    }
    std::printf("#   %-16s %5.2fx to %5.2fx (paper %s); where the SP group spans nodes %s; bytes %.0f%% to %.0f%%\n",
                name(all_strategies[k]), lo, hi, paper_range(all_strategies[k]).c_str(),
                span_hi > 0 ? (fmt("%.2fx", span_lo) + " to " + fmt("%.2fx", span_hi)).c_str() : "none", vol_lo * 100,
                vol_hi * 100);
  }
  // The FLOPS drop from 0.5M to 4M tokens per method, where it ran at both.
  std::cout << "# FLOP/s per GPU, 0.5M -> 4M tokens (model FLOPs: 3 x forward; paper: DSP drops at most "
            << fmt("%.0f", paper_dsp_flops_drop * 100) << "%, the others at least "
            << fmt("%.0f", paper_others_flops_drop * 100) << "%):\n";
  for (const char* mname : {"720M", "3B"})
    for (std::size_t k = 0; k < ns; ++k) {
      const Figure5Row *lo = nullptr, *hi = nullptr;
      for (const auto& r : rows)
        if (r.point->model.name == mname && r.strategy == all_strategies[k] && r.paper_sp > 0) {
          if (r.point->temporal == 128) lo = &r;
          hi = &r;
        }
      if (!lo || !hi) continue;
      const double a = lo->prediction.flops_per_gpu(), b = hi->prediction.flops_per_gpu();
      const double drop = 1 - b / a;
      const bool is_dsp = all_strategies[k] == Strategy::dsp;
      const bool holds = is_dsp ? drop <= paper_dsp_flops_drop : drop >= paper_others_flops_drop;
      std::printf("#   %-4s %-16s %7.1f -> %7.1f TFLOP/s at %.1fM tokens: %+.0f%% (paper: %s %.0f%%): %s\n", mname,
                  name(all_strategies[k]), a / 1e12, b / 1e12, double(hi->point->temporal) * 4096 / (1024.0 * 1024),
                  -drop * 100, is_dsp ? "at most" : "at least",
                  (is_dsp ? paper_dsp_flops_drop : paper_others_flops_drop) * 100, holds ? "holds" : "misses");
    }
  std::cout << "# the paper: DSP over Ulysses +32% to +75%, over the embedded methods 32.2% to 10x; from 0.5M to 4M "
               "tokens DSP's FLOPS drop at most 23%, the others' at least 40%; volume under 25% of theirs\n";
  return 0;
}

int paper_fig7(const Cluster& c, const Links& links, const std::string& format, LayerLayout layout) {
  const auto rows = figure7(c, layout);
  const std::size_t per = 4;  // GPU counts per (layout, strategy)
  std::vector<const Prediction*> priced;
  for (const auto& r : rows)
    if (r.prediction.runs) priced.push_back(&r.prediction);
  warn_half_calibrated(links, c, priced);
  // DSP's row at the same GPUs and layout: strategies in all_strategies' order, DSP first.
  auto dsp_of = [&](std::size_t i) -> const Figure7Row& {
    const std::size_t block = per * all_strategies.size();
    return rows[(i / block) * block + i % per];
  };
  if (format == "csv") {
    std::cout << "gpus,layout,strategy,sp,dp,batch,runs,step_s,tokens_per_s,efficiency,dsp_speedup\n";
  } else {
    std::cout << "# dsp-plan --preset paper-fig7 (also paper-fig6): the DSP paper's weak scaling, Figure 6 by its "
                 "caption, Figure 7 in the appendix's text (Table 7: 3B, temporal 128, spatial 4096, one sample per 8 "
                 "GPUs; "
              << (layout == LayerLayout::a1 ? "the paper's A.1 layer" : "Open-Sora's STDiT layer")
              << ")\n# the paper's layout (A.3.3, the figure's caption): one SP group over all GPUs, sequence "
                 "parallelism only; SP 8 per node with DP across is for comparison\n# cluster: "
              << describe(c) << "\n"
              << links.header()
              << "# efficiency: tokens/s per GPU over the 8-GPU point's; x DSP: DSP's throughput over this method's\n";
    std::printf("%5s %-22s %-16s %4s %4s %9s %12s %10s %7s\n", "GPUs", "layout", "method", "SP", "DP", "step s",
                "tokens/s", "efficiency", "x DSP");
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const Prediction& p = r.prediction;
    const Prediction& d = dsp_of(i).prediction;
    const double x = p.runs && p.tokens_per_second > 0 ? d.tokens_per_second / p.tokens_per_second : 0;
    const char* lay = r.one_group ? "one SP group, batch" : "SP 8 per node, DP";
    if (format == "csv") {
      std::cout << r.gpus << ',' << (r.one_group ? "one-group" : "sp8-dp") << ',' << name(r.strategy) << ',' << p.sp
                << ',' << p.dp << ',' << r.gpus / 8 << ',' << p.runs << ',';
      if (p.runs)
        std::cout << p.step_time << ',' << fmt("%.0f", p.tokens_per_second) << ',' << r.efficiency << ',' << x << '\n';
      else std::cout << ",,,\n";
    } else if (!p.runs) {
      std::printf("%5d %-22s %-16s %4d %4d   cannot run: %s\n", r.gpus, lay, name(r.strategy), p.sp, p.dp,
                  p.why.c_str());
    } else {
      std::printf("%5d %-22s %-16s %4d %4d %9.3f %12.0f %9.0f%% %7.2f\n", r.gpus, lay, name(r.strategy), p.sp, p.dp,
                  p.step_time, p.tokens_per_second, r.efficiency * 100, x);
    }
  }
  if (format == "csv") return 0;
  // The paper's two claims, on its layout (one SP group).
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i].one_group && rows[i].strategy == Strategy::dsp && rows[i].gpus == 64)
      std::printf("# one SP group: DSP loses %.0f%% from 8 to 64 GPUs (paper: %.0f%%)\n",
                  (1 - rows[i].efficiency) * 100, paper_weak_scaling_loss * 100);
  std::cout << "# one SP group: DSP over the other methods where they run, lowest to highest (paper: +"
            << fmt("%.1f", (paper_weak_scaling_dsp_over_others - 1) * 100) << "%):\n";
  for (Strategy s : all_strategies) {
    if (s == Strategy::dsp) continue;
    double lo = 0, hi = 0;
    std::string at;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      if (!r.one_group || r.strategy != s || !r.prediction.runs) continue;
      const double x = dsp_of(i).prediction.tokens_per_second / r.prediction.tokens_per_second;
      lo = lo > 0 ? std::min(lo, x) : x, hi = std::max(hi, x);
      at += (at.empty() ? "" : ", ") + std::to_string(r.gpus);
    }
    if (hi > 0)
      std::printf("#   %-16s %+.1f%% to %+.1f%% (at %s GPUs)\n", name(s), (lo - 1) * 100, (hi - 1) * 100, at.c_str());
    else std::printf("#   %-16s cannot run at any point\n", name(s));
  }
  return 0;
}

// Validators with messages a user reads (CLI11's ranges print the type's
// limits, e.g. 1.8e308 written out, and call a word "not in range").
/// A finite number, > 0 when `positive`, else >= 0, and at most `most`.
/// strtod, not stod: stod throws for a value that underflows (1e-310, which
/// is a number) or overflows (1e400, which is not finite).
CLI::Validator number(bool positive, double most = HUGE_VAL) {
  return CLI::Validator(
      [positive, most](std::string& s) -> std::string {
        const char* begin = s.c_str();
        char* end = nullptr;
        const double v = std::strtod(begin, &end);
        if (end == begin || *end != '\0') return "'" + s + "' is not a number";
        if (!std::isfinite(v) || (positive ? !(v > 0) : v < 0))
          return std::string(positive ? "must be a positive number" : "must be a number >= 0") + ", not " + s;
        if (v > most) return "must be at most " + fmt("%g", most) + ", not " + s;
        return "";
      },
      positive ? "> 0" : ">= 0");
}
CLI::Validator whole(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        std::size_t used = 0;
        long long v = 0;
        try {
          v = std::stoll(s, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != s.size()) return "'" + s + "' is not a whole number";
        if (v < lo || v > hi)
          return "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", not " + s;
        return "";
      },
      std::to_string(lo) + ".." + std::to_string(hi));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "dsp-plan: predicts, per sequence-parallel strategy (DSP; DeepSpeed-Ulysses as the paper's Table 3 prices it, "
      "in the temporal attention, and as Open-Sora 1.0 runs it, in every attention; Megatron-SP; Ring-Attention) and "
      "SP x DP mesh, a spatial-temporal transformer's training step on a GPU cluster: communication (the exact bytes "
      "of dsp's cost model, priced by a hierarchical alpha-beta model, NCCL's collectives across nodes on all of a "
      "node's NICs, and the copies around each all-to-all), compute, and memory per GPU; and recommends the fastest "
      "that fits.",
      "dsp-plan"};
  app.footer(
      "Examples:\n"
      "  dsp-plan --model 720M --temporal 1024 --gpus 128\n"
      "  dsp-plan --layers 24 --hidden 1024 --heads 16 --temporal 256 --spatial 1024 --gpus 16 --strategies "
      "dsp,ulysses\n"
      "  dsp-plan --model 3B --temporal 512 --gpus 64 --calibrate intra.csv --calibrate inter.csv\n"
      "  dsp-plan --preset paper-fig5\n"
      "  dsp-plan --preset paper-fig5 --layer a1\n"
      "Calibration: run dsp-bench -o alltoall -b 1M -e 1G -F csv -O FILE on the ranks of one node (fits the link "
      "inside a node) and across nodes (fits the link between nodes), then pass each FILE to --calibrate.\n"
      "The model, its assumptions and the paper comparison: docs/cluster-model.md, docs/paper-reproduction.md.");

  std::string preset, model_name, cluster_name = "h100", format = "text", layer_name,
                                  strategy_list = "dsp,ulysses,ulysses-opensora,megatron-sp,ring", sp_list;
  std::optional<std::size_t> layers, hidden, heads, mlp_ratio, cross_tokens, mlps;
  std::size_t temporal = 0, spatial = 4096, batch = 1, elem_bytes = 2;
  int gpus = 0;
  bool no_recompute = false;
  std::optional<double> resident_gb;
  std::optional<int> gpn;
  std::optional<double> intra_gbs, inter_gbs, intra_us, inter_us, collective_gbs, memory_gbs, peak_tflops, efficiency,
      memory_gib;
  std::vector<std::string> calibrate_files;

  auto* o_preset = app.add_option("--preset", preset,
                                  "print a paper experiment beside the paper's figures: paper-fig5 (Figure 5 on Table "
                                  "5's meshes) or paper-fig6 (the weak scaling: Figure 6 by its caption, 7 in the "
                                  "appendix's text; also paper-fig7)")
                       ->check(CLI::IsMember({"paper-fig5", "paper-fig6", "paper-fig7"}));
  auto* o_model = app.add_option("--model", model_name,
                                 "the paper's models: 720M or 3B (Table 4); the options "
                                 "below override its numbers")
                      ->check(CLI::IsMember({"720M", "3B"}, CLI::ignore_case));
  auto* o_layers =
      app.add_option("--layers", layers, "layers (a spatial and a temporal attention each)")->check(whole(1, 100000));
  auto* o_hidden = app.add_option("--hidden", hidden, "hidden size C")->check(whole(1, 1LL << 20));
  auto* o_heads =
      app.add_option("--heads", heads, "attention heads (a divisor of --hidden)")->check(whole(1, 1LL << 20));
  auto* o_ratio = app.add_option("--mlp-ratio", mlp_ratio, "MLP width over hidden [4]")->check(whole(1, 64));
  auto* o_cross = app.add_option("--cross-tokens", cross_tokens, "text tokens of the cross-attention, 0: none [120]")
                      ->check(whole(0, 1LL << 20));
  auto* o_mlps = app.add_option("--mlps", mlps, "MLPs per layer [1]")->check(whole(1, 16));
  auto* o_layer =
      app.add_option("--layer", layer_name,
                     "the layer's layout: opensora (Open-Sora's STDiT: spatial, temporal and "
                     "cross-attention to 120 text tokens, one MLP) or a1 (the paper's appendix A.1: a "
                     "spatial and a temporal block, each attention and MLP, no cross-attention) [opensora]; "
                     "with --model or a --preset")
          ->check(CLI::IsMember({"opensora", "a1"}));
  o_layer->excludes(o_cross)->excludes(o_mlps);
  auto* o_temporal =
      app.add_option("--temporal", temporal, "temporal length T (frames after patching)")->check(whole(1, 1LL << 30));
  auto* o_spatial =
      app.add_option("--spatial", spatial, "spatial length S (patches per frame) [4096]")->check(whole(1, 1LL << 30));
  auto* o_batch = app.add_option("--batch", batch, "samples per SP group [1]")->check(whole(1, 1LL << 20));
  auto* o_gpus = app.add_option("--gpus", gpus, "GPUs in all (SP x DP)")->check(whole(1, 1 << 20));
  auto* o_strat =
      app.add_option("--strategies", strategy_list,
                     "comma-separated: dsp, ulysses (Table 3's: the temporal attention), ulysses-opensora (Open-Sora "
                     "1.0's: every attention), megatron-sp, ring [all]");
  auto* o_sp =
      app.add_option("--sp", sp_list, "comma-separated SP sizes to price (divisors of --gpus) [every divisor]");
  auto* o_bytes = app.add_option("--element-bytes", elem_bytes, "bytes per activation element [2: bf16]")
                      ->check(CLI::IsMember({1, 2, 4, 8}));
  auto* o_norec =
      app.add_flag("--no-recompute", no_recompute, "keep every layer's activations (no gradient checkpointing)");
  auto* o_res = app.add_option("--resident-gb", resident_gb, "GB per GPU of frozen models the job keeps there [0]")
                    ->check(number(false));
  app.add_option("--cluster", cluster_name, "cluster preset [h100]")->check(CLI::IsMember(cluster_presets()));
  app.add_option("--gpus-per-node", gpn, "GPUs per node")->check(whole(1, 1 << 16));
  app.add_option("--intra-gbs", intra_gbs, "achieved GB/s per GPU inside a node")->check(number(true));
  app.add_option("--inter-gbs", inter_gbs, "achieved GB/s per GPU across nodes")->check(number(true));
  app.add_option("--intra-latency-us", intra_us, "latency per collective step inside a node, us")->check(number(false));
  app.add_option("--inter-latency-us", inter_us, "latency per collective step across nodes, us")->check(number(false));
  app.add_option(
         "--collective-gbs", collective_gbs,
         "bus GB/s per GPU of an all-gather, reduce-scatter or all-reduce across nodes over whole nodes (NCCL's "
         "channels on all the node's NICs)")
      ->check(number(true));
  app.add_option("--memory-gbs", memory_gbs,
                 "device-memory GB/s (read + written) of the copies around an all-to-all (dsp's own pack and unpack "
                 "kernels: their measured rate)")
      ->check(number(true));
  app.add_option("--peak-tflops", peak_tflops, "dense TFLOP/s per GPU in the training precision")->check(number(true));
  app.add_option("--efficiency", efficiency, "fraction of peak the math reaches, in (0, 1]")->check(number(true, 1));
  app.add_option("--memory-gib", memory_gib, "GiB per GPU the job may use")->check(number(true));
  app.add_option("--calibrate", calibrate_files,
                 "dsp-bench -F csv output (alltoall rows) to fit the links to; "
                 "repeatable (one node's run, a run across nodes)")
      ->check(CLI::ExistingFile);
  app.add_option("--format", format, "text or csv [text]")->check(CLI::IsMember({"text", "csv"}));
  for (auto* o : {o_model, o_layers, o_hidden, o_heads, o_ratio, o_cross, o_mlps, o_temporal, o_spatial, o_batch,
                  o_gpus, o_strat, o_sp, o_bytes, o_norec, o_res})
    o_preset->excludes(o);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message (or the help); every refusal exits with 2, as dsp-plan's own.
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    Cluster c = cluster_preset(cluster_name);
    if (gpn) c.gpus_per_node = *gpn;
    Links links;
    links.preset = cluster_name;
    for (const auto& f : calibrate_files) {
      std::ifstream in(f);
      if (!in) throw dsp::InvalidArgument("dsp-plan: cannot read " + f);
      const Calibration cal = calibrate(c, read_bench_csv(in, f));
      if (format == "text")
        std::cout << "# calibrated from " << f << ": " << cal.intra_points << " points for the link in a node, "
                  << cal.inter_points << " across nodes\n";
      // A later file's fit of a link replaces an earlier one's.
      if (cal.intra_points > 0) links.intra.file = f, links.intra.points = cal.intra_points;
      if (cal.inter_points > 0) links.inter.file = f, links.inter.points = cal.inter_points;
    }
    links.intra.bandwidth_option = bool(intra_gbs), links.intra.latency_option = bool(intra_us);
    links.inter.bandwidth_option = bool(inter_gbs), links.inter.latency_option = bool(inter_us);
    // --gpus-per-node applies before the fit (it decides which link a file's runs
    // measure); the other numbers after it, so that they override it.
    const bool overridden = intra_gbs || inter_gbs || intra_us || inter_us || collective_gbs || memory_gbs ||
                            peak_tflops || efficiency || memory_gib;
    if (gpn || overridden) c.name += " (modified)";
    if (intra_gbs) c.intra.bandwidth = *intra_gbs * 1e9;
    if (inter_gbs) c.inter.bandwidth = *inter_gbs * 1e9;
    if (intra_us) c.intra.latency = *intra_us * 1e-6;
    if (inter_us) c.inter.latency = *inter_us * 1e-6;
    if (collective_gbs) c.collective_bandwidth = *collective_gbs * 1e9;
    if (memory_gbs) c.memory_bandwidth = *memory_gbs * 1e9;
    if (peak_tflops) c.peak_flops = *peak_tflops * 1e12;
    if (efficiency) c.efficiency = *efficiency;
    if (memory_gib) c.memory_bytes = *memory_gib * GiB;
    check(c);

    const LayerLayout layout = layer_name.empty() ? LayerLayout::opensora : parse_layer_layout(layer_name);
    if (preset == "paper-fig5") return paper_fig5(c, links, format, layout);
    if (preset == "paper-fig6" || preset == "paper-fig7") return paper_fig7(c, links, format, layout);

    Transformer m;
    if (!model_name.empty()) {
      m = with_layout(model_preset(model_name), layout);
    } else if (!layers || !hidden || !heads) {
      throw dsp::InvalidArgument(
          "dsp-plan: name a model: --model 720M|3B, or --layers, --hidden and --heads "
          "(or --preset paper-fig5 | paper-fig6)");
    } else if (!layer_name.empty()) {
      throw dsp::InvalidArgument(
          "dsp-plan: --layer lays out the paper's models (--model or a --preset); with --layers, --hidden and "
          "--heads set --cross-tokens and --mlps instead");
    }
    if (layers) m.layers = *layers;
    if (hidden) m.hidden = *hidden;
    if (heads) m.heads = *heads;
    if (mlp_ratio) m.mlp_ratio = *mlp_ratio;
    if (cross_tokens) m.cross_tokens = *cross_tokens;
    if (mlps) m.mlps = *mlps;
    if (m.hidden % m.heads != 0)
      throw dsp::InvalidArgument("dsp-plan: --hidden " + std::to_string(m.hidden) + " is no multiple of --heads " +
                                 std::to_string(m.heads));
    if (temporal == 0) throw dsp::InvalidArgument("dsp-plan: --temporal is required (the temporal length T)");
    if (gpus == 0) throw dsp::InvalidArgument("dsp-plan: --gpus is required (GPUs in all)");

    Workload w;
    w.batch = batch, w.temporal = temporal, w.spatial = spatial, w.elem_bytes = elem_bytes;
    w.recompute = !no_recompute;
    if (resident_gb) w.resident_bytes = *resident_gb * 1e9;

    std::vector<Strategy> strategies;
    for (const auto& s : detail::split(strategy_list, ',')) {
      Strategy x{};
      try {
        x = parse_strategy(s);
      } catch (const dsp::Error&) {
        throw dsp::InvalidArgument("--strategies: unknown strategy '" + s + "' (known: " + strategy_names() + ")");
      }
      if (std::find(strategies.begin(), strategies.end(), x) != strategies.end())
        throw dsp::InvalidArgument("--strategies: '" + s + "' is named twice");
      strategies.push_back(x);
    }
    std::vector<int> sps;
    if (!sp_list.empty())
      for (const auto& s : detail::split(sp_list, ',')) {
        std::size_t used = 0;
        int v = 0;
        try {
          v = std::stoi(s, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != s.size() || v < 1)
          throw dsp::InvalidArgument("dsp-plan: --sp: '" + s + "' is not a positive integer");
        if (gpus % v != 0)
          throw dsp::InvalidArgument("dsp-plan: --sp " + s + " does not divide --gpus " + std::to_string(gpus));
        if (std::find(sps.begin(), sps.end(), v) != sps.end())
          throw dsp::InvalidArgument("--sp: " + s + " is named twice");
        sps.push_back(v);
      }
    return plan(c, links, m, w, gpus, strategies, sps, format);
  } catch (const dsp::Error& e) {
    std::string what = e.what();
    if (what.find("overflows") != std::string::npos)
      what = "dsp-plan: the tensors are too large to count in bytes (" + what +
             "): check --temporal, --spatial, --batch and --hidden";
    else if (what.rfind("dsp-plan", 0) != 0 && what.rfind("--", 0) != 0) what = "dsp-plan: " + what;
    std::cerr << what << "\n";
    return 2;
  }
}
