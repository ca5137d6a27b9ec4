// SPDX-License-Identifier: BSD-3-Clause
// Times one spatial-temporal layer per strategy and prints, per strategy, the
// bytes each device sends per layer (counted; max over ranks), the cost model's
// prediction, the paper's Table 3 formula, the time per layer and DSP's speedup.
//
//   mpiexec -n N bench_layer [B T S C H F iterations [DPxSP]]
//
// Output: Markdown table rows (rank 0). Each run's time is the slowest rank's;
// reported: the minimum and the mean over `iterations` runs after one warm-up
// run, and the mean time spent in communication (slowest rank). "DSP speedup"
// is the strategy's minimum time over DSP's.
//
// With DPxSP (e.g. 2x2; DP * SP = N), a second table has one row for the
// data parallel x sequence parallel layer (st::dpsp_layer) on that mesh: the
// counted bytes per device on each mesh axis (max over ranks) beside the cost
// model's, the same times, and its time over the 1-D DSP layer's on N ranks.
#include "../help.hpp"
#include "layer.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>

namespace {

using Layer = std::function<st::Act<dsp::Sharded<1>>(st::Context&, const st::Act<dsp::Sharded<1>>&, const st::Config&,
                                                     const st::Weights&)>;

/// "2x3" -> {2, 3}; {0, 0} when it is not two positive numbers.
std::array<int, 2> parse_mesh(const char* s) {
  int dp = 0, sp = 0;
  char tail = 0;
  if (std::sscanf(s, "%dx%d%c", &dp, &sp, &tail) != 2 || dp < 1 || sp < 1) return {0, 0};
  return {dp, sp};
}

std::size_t max_over(std::size_t v) {
  unsigned long long in = v, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return std::size_t(out);
}
double max_over(double v) {
  double out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

using Comm = std::function<void()>;

/// Only the communication of one layer of each strategy, on preallocated
/// buffers of the layer's sizes (no compute, no allocation): what the
/// strategies' bytes cost on this machine without compute skew.
struct CommOnly {
  Comm dsp, ulysses, megatron, ring;
};

CommOnly make_comm_only(st::Context& ctx, const st::Config& c) {
  using S1 = st::Act<dsp::Sharded<1>>;
  using H1 = dsp::DistTensor<float, 5, dsp::Sharded<1>, st::Counting>;
  using H3 = dsp::DistTensor<float, 5, dsp::Sharded<3>, st::Counting>;
  const int n = ctx.size(), p = ctx.rank();
  const dsp::Partition pt{c.T, std::size_t(n)};
  const std::array<std::size_t, 4> g4{c.B, c.T, c.S, c.C};
  const std::array<std::size_t, 5> g5{c.B, c.T, c.S, c.H, c.head_dim()};
  auto x = std::make_shared<S1>(ctx.comm, g4);
  auto z = std::make_shared<st::Act<dsp::Sharded<2>>>(ctx.comm, g4);
  auto full = std::make_shared<st::Act<dsp::Replicated>>(ctx.comm, g4);
  auto part = std::make_shared<st::Act<dsp::Partial<>>>(ctx.comm, g4);
  const std::size_t maxblk = c.B * pt.count(0) * c.S * c.C;
  auto kv = std::make_shared<std::vector<float>>(2 * maxblk), next = std::make_shared<std::vector<float>>(2 * maxblk);
  CommOnly r;
  r.dsp = [x, z] {
    dsp::dynamic_switch<2>(*x, *z);
    dsp::dynamic_switch<1>(*z, *x);
  };
  if (std::size_t(n) <= c.H) {
    auto q = std::make_shared<H1>(ctx.comm, g5), k = std::make_shared<H1>(ctx.comm, g5),
         v = std::make_shared<H1>(ctx.comm, g5);
    auto qh = std::make_shared<H3>(ctx.comm, g5), kh = std::make_shared<H3>(ctx.comm, g5),
         vh = std::make_shared<H3>(ctx.comm, g5);
    r.ulysses = [q, k, v, qh, kh, vh] {  // as ulysses_layer: q, k, v in one batch, the output back
      dsp::dynamic_switch<3>(dsp::batch(*q, *k, *v), dsp::batch(*qh, *kh, *vh));
      dsp::dynamic_switch<1>(*qh, *q);
    };
    r.megatron = [x, full, part] {
      for (int k = 0; k < 4; ++k) {
        dsp::gather(*x, *full);
        dsp::redistribute<dsp::Sharded<1>>(*part, *x);  // reduce-scatter over T
      }
    };
  }
  r.ring = [&ctx, c, pt, kv, next, n, p] {
    for (int s = 0; s + 1 < n; ++s) {
      const std::size_t blk = c.B * pt.count((p - s + n) % n) * c.S * c.C;
      const std::size_t nblk = c.B * pt.count((p - s - 1 + 2 * n) % n) * c.S * c.C;
      DSP_CHECK_MPI(MPI_Sendrecv(kv->data(), int(2 * blk), MPI_FLOAT, (p + 1) % n, 7, next->data(), int(2 * nblk),
                                 MPI_FLOAT, (p - 1 + n) % n, 7, ctx.raw, MPI_STATUS_IGNORE));
      std::swap(*kv, *next);
    }
  };
  return r;
}

/// Slowest rank's minimum over `iters` runs of f, in ms (after one warm-up).
double min_ms(const Comm& f, int iters) {
  f();
  double best = 1e300;
  for (int i = 0; i < iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    f();
    best = std::min(best, max_over((MPI_Wtime() - t0) * 1e3));
  }
  return best;
}

}  // namespace

constexpr const char* kUsage =
    "usage: mpiexec -n N bench_spatial_temporal [B T S C H F iterations [DPxSP]]\n"
    "  Times one spatial-temporal layer per sequence-parallel strategy; prints Markdown rows (rank 0).";

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (example::asked_for_help(argc, argv, kUsage)) {
    MPI_Finalize();
    return 0;
  }
  int world_size = 0, world_rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const std::array<int, 2> mesh_shape = argc >= 9 ? parse_mesh(argv[8]) : std::array<int, 2>{0, 0};
  if (argc >= 9 && mesh_shape[0] * mesh_shape[1] != world_size) {  // every rank: the same arguments
    if (world_rank == 0)
      std::fprintf(stderr, "bench_layer: mesh '%s' is not DPxSP with DP * SP = %d\n", argv[8], world_size);
    MPI_Finalize();
    return 2;
  }
  Kokkos::initialize(argc, argv);
  {
    st::Config c{1, 16, 64, 64, 4, 256};
    int iters = 3;
    if (argc >= 8) {
      c = st::Config{std::size_t(std::atol(argv[1])), std::size_t(std::atol(argv[2])), std::size_t(std::atol(argv[3])),
                     std::size_t(std::atol(argv[4])), std::size_t(std::atol(argv[5])), std::size_t(std::atol(argv[6]))};
      iters = std::atoi(argv[7]);
    }
    st::Context ctx{MPI_COMM_WORLD};
    const std::size_t n = std::size_t(ctx.size()), p = std::size_t(ctx.rank());

    const auto w = st::make_weights(c);
    st::Act<dsp::Replicated> xr{ctx.comm, {c.B, c.T, c.S, c.C}};
    for (std::size_t k = 0; k < xr.local().size(); ++k) xr.local().data()[k] = float((k * 37) % 101) / 101.0f;
    auto x = dsp::split<1>(xr);

    const double M = double(c.activation_bytes());
    const double N = double(n);
    const auto pred = st::predicted_bytes(c, n, p);
    struct Row {
      const char* name;
      Layer f;
      std::size_t predicted;
      double paper_exact;  // the paper's formula with the (N-1)/N of a rank's own share
      const char* paper;
      bool heads_limited;
      const Comm* comm_only;
    };
    const CommOnly co = make_comm_only(ctx, c);
    // The issue-12 variants of DSP (layer.hpp, Tuning): their bytes from the cost model with the wire type.
    auto tuned = [](st::Tuning t) {
      return Layer([t](st::Context& cx, const st::Act<dsp::Sharded<1>>& xx, const st::Config& cc,
                       const st::Weights& ww) { return st::dsp_layer_tuned(cx, xx, cc, ww, t); });
    };
    const std::array<std::size_t, 4> g4{c.B, c.T, c.S, c.C};
    const std::size_t f32_to = dsp::transition_cost<dsp::Sharded<1>, dsp::Sharded<2>>(g4, 4, n, p).bytes;
    const std::size_t bf16_to =
        dsp::transition_cost<dsp::Sharded<1>, dsp::Sharded<2>>(g4, 4, n, p, dsp::Wire::bf16).bytes;
    const std::size_t bf16_back =
        dsp::transition_cost<dsp::Sharded<2>, dsp::Sharded<1>>(g4, 4, n, p, dsp::Wire::bf16).bytes;
    const Row rows[] = {
        {"DSP", st::dsp_layer, pred.dsp, 2 * M * (N - 1) / (N * N), "2M/N", false, &co.dsp},
        {"DeepSpeed-Ulysses", st::ulysses_layer, pred.ulysses, 4 * M * (N - 1) / (N * N), "4M/N", true, &co.ulysses},
        {"Megatron-SP", st::megatron_layer, pred.megatron, 8 * M * (N - 1) / N, "8M", true, &co.megatron},
        {"Ring-Attention", st::ring_layer, pred.ring, 2 * M * (N - 1) / N, "2M", false, &co.ring},
        {"DSP, compute on arrival", tuned({dsp::Wire::exact, true}), pred.dsp, 2 * M * (N - 1) / (N * N), "2M/N", false,
         nullptr},
        {"DSP, bf16 wire", tuned({dsp::Wire::bf16, false}), bf16_to + bf16_back, M * (N - 1) / (N * N), "M/N", false,
         nullptr},
        {"DSP, arrival + bf16 back", tuned({dsp::Wire::bf16, true}), f32_to + bf16_back, 1.5 * M * (N - 1) / (N * N),
         "1.5M/N", false, nullptr},
    };
    double dsp_time = 0, dsp_comm = 0;
    std::size_t dsp_bytes = 0;
    if (p == 0)
      std::printf(
          "| N | B,T,S,C,H,F | M (bytes) | strategy | ops | counted bytes/device (max) | cost model (max) | "
          "paper x(N-1)/N | paper | ms/layer min | ms/layer mean | comm ms | DSP speedup | comm-only ms | "
          "DSP comm speedup |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Row& r : rows) {
      if (r.heads_limited && n > c.H) {
        if (p == 0)
          std::printf(
              "| %zu | %zu,%zu,%zu,%zu,%zu,%zu | %.0f | %s | - | n/a: N > heads | - | - | %s | - | - | - | - | - | - "
              "|\n",
              n, c.B, c.T, c.S, c.C, c.H, c.F, M, r.name, r.paper);
        continue;
      }
      ctx.reset();
      r.f(ctx, x, c, w);  // warm-up, and the counted layer
      const st::Traffic t = ctx.traffic();
      const std::size_t counted = max_over(t.bytes), model = max_over(r.predicted);
      ctx.comm_seconds = 0;
      double best = 1e300, sum = 0;
      for (int i = 0; i < iters; ++i) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        r.f(ctx, x, c, w);
        const double ms = max_over((MPI_Wtime() - t0) * 1e3);
        best = std::min(best, ms);
        sum += ms;
      }
      const double comm_ms = max_over(ctx.comm_seconds * 1e3 / iters);
      const double comm_only = r.comm_only ? min_ms(*r.comm_only, iters) : 0.0;
      if (&r == &rows[0]) {
        dsp_time = best;
        dsp_comm = comm_only;
        dsp_bytes = counted;
      }
      char co_text[64] = "- | -";  // the tuned variants have no separate communication-only run
      if (r.comm_only)
        std::snprintf(co_text, sizeof co_text, "%.3f | %.2fx", comm_only, dsp_comm > 0 ? comm_only / dsp_comm : 0.0);
      if (p == 0)
        std::printf(
            "| %zu | %zu,%zu,%zu,%zu,%zu,%zu | %.0f | %s | %zu | %zu | %zu%s | %.0f | %s | %.2f | %.2f | %.2f | "
            "%.2fx | %s |\n",
            n, c.B, c.T, c.S, c.C, c.H, c.F, M, r.name, t.ops, counted, model, counted == model ? "" : " MISMATCH",
            r.paper_exact, r.paper, best, sum / iters, comm_ms, dsp_time > 0 ? best / dsp_time : 0.0, co_text);
    }
    if (mesh_shape[0] > 0) {
      // The DP x SP layer on the mesh: the same input, B over DP, T over SP.
      st::MeshContext mc{ctx.comm, mesh_shape};
      using Whole = st::MeshAct<dsp::Axes<dsp::Replicated, dsp::Replicated>>;
      Whole xw{mc.mesh, {c.B, c.T, c.S, c.C}};
      std::copy_n(xr.local().data(), xr.local().size(), xw.local().data());
      const auto xm = dsp::redistribute<st::DpSpT>(xw);  // local splits
      const st::PredictedMesh pm = st::predicted_mesh_bytes(c, mesh_shape, mc.mesh.coords());
      mc.reset();
      st::dpsp_layer(mc, xm, c, w);  // warm-up, and the counted layer
      std::array<std::size_t, 2> counted{}, model{}, ops{};
      for (std::size_t a = 0; a < 2; ++a) {
        counted[a] = max_over(mc.counts(a).bytes_sent);
        model[a] = max_over(pm.bytes[a]);
        ops[a] = max_over(mc.counts(a).collectives());
      }
      const std::size_t counted_total = max_over(mc.counts(0).bytes_sent + mc.counts(1).bytes_sent);
      mc.comm_seconds = 0;
      double best = 1e300, sum = 0;
      for (int i = 0; i < iters; ++i) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        st::dpsp_layer(mc, xm, c, w);
        const double ms = max_over((MPI_Wtime() - t0) * 1e3);
        best = std::min(best, ms);
        sum += ms;
      }
      const double comm_ms = max_over(mc.comm_seconds * 1e3 / iters);
      auto xs = std::make_shared<st::MeshAct<st::DpSpT>>(mc.mesh, xm.global_extents());
      auto zs = std::make_shared<st::MeshAct<st::DpSpS>>(mc.mesh, xm.global_extents());
      const double comm_only = min_ms(
          [xs, zs] {
        dsp::redistribute<st::DpSpS>(*xs, *zs);
        dsp::redistribute<st::DpSpT>(*zs, *xs);
          },
          iters);
      const bool match = counted[0] == model[0] && counted[1] == model[1] && counted_total == pm.max_bytes;
      if (p == 0)
        std::printf(
            "\n| N | DP x SP | B,T,S,C,H,F | M (bytes) | ops axis 0, 1 (max) | counted bytes/device axis 0 (DP), max | "
            "counted axis 1 (SP), max | cost model axis 0, 1 | 1-D DSP on N ranks, bytes/device | ms/layer min | "
            "ms/layer mean | comm ms | time / 1-D DSP | comm-only ms | comm-only / 1-D DSP |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
            "| %zu | %d x %d | %zu,%zu,%zu,%zu,%zu,%zu | %.0f | %zu, %zu | %zu | %zu | %zu, %zu%s | %zu | %.2f | %.2f "
            "| "
            "%.2f | %.2fx | %.3f | %.2fx |\n",
            n, mesh_shape[0], mesh_shape[1], c.B, c.T, c.S, c.C, c.H, c.F, M, ops[0], ops[1], counted[0], counted[1],
            model[0], model[1], match ? "" : " MISMATCH", dsp_bytes, best, sum / iters, comm_ms,
            dsp_time > 0 ? best / dsp_time : 0.0, comm_only, dsp_comm > 0 ? comm_only / dsp_comm : 0.0);
    }
  }
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}
