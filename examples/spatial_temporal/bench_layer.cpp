// Times one spatial-temporal layer per strategy and prints, per strategy, the
// bytes each device sends per layer (counted; max over ranks), the cost model's
// prediction, the paper's Table 3 formula, the time per layer and DSP's speedup.
//
//   mpiexec -n N bench_layer [B T S C H F iterations]
//
// Output: Markdown table rows (rank 0). Time per layer is the slowest rank's
// mean over `iterations` runs after one warm-up run.
#include "layer.hpp"

#include <cstdio>
#include <cstdlib>
#include <functional>

namespace {

using Layer = std::function<st::Act<dsp::Sharded<1>>(st::Context&, const st::Act<dsp::Sharded<1>>&,
                                                     const st::Config&, const st::Weights&)>;

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

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
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
    };
    const Row rows[] = {
        {"DSP", st::dsp_layer, pred.dsp, 2 * M * (N - 1) / (N * N), "2M/N", false},
        {"DeepSpeed-Ulysses", st::ulysses_layer, pred.ulysses, 4 * M * (N - 1) / (N * N), "4M/N", true},
        {"Megatron-SP", st::megatron_layer, pred.megatron, 8 * M * (N - 1) / N, "8M", true},
        {"Ring-Attention", st::ring_layer, pred.ring, 2 * M * (N - 1) / N, "2M", false},
    };
    double dsp_time = 0;
    if (p == 0)
      std::printf("| N | B,T,S,C,H,F | M (bytes) | strategy | ops | counted bytes/device (max) | cost model (max) | "
                  "paper x(N-1)/N | paper | ms/layer | DSP speedup |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Row& r : rows) {
      if (r.heads_limited && n > c.H) {
        if (p == 0)
          std::printf("| %zu | %zu,%zu,%zu,%zu,%zu,%zu | %.0f | %s | - | n/a: N > heads | - | - | %s | - | - |\n", n,
                      c.B, c.T, c.S, c.C, c.H, c.F, M, r.name, r.paper);
        continue;
      }
      ctx.reset();
      r.f(ctx, x, c, w);  // warm-up, and the counted layer
      const st::Traffic t = ctx.traffic();
      const std::size_t counted = max_over(t.bytes), model = max_over(r.predicted);
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      for (int i = 0; i < iters; ++i) r.f(ctx, x, c, w);
      const double ms = max_over((MPI_Wtime() - t0) / iters * 1e3);
      if (&r == &rows[0]) dsp_time = ms;
      if (p == 0)
        std::printf("| %zu | %zu,%zu,%zu,%zu,%zu,%zu | %.0f | %s | %zu | %zu | %zu%s | %.0f | %s | %.2f | %.2fx |\n", n,
                    c.B, c.T, c.S, c.C, c.H, c.F, M, r.name, t.ops, counted, model, counted == model ? "" : " MISMATCH",
                    r.paper_exact, r.paper, ms, dsp_time > 0 ? ms / dsp_time : 0.0);
    }
  }
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}
