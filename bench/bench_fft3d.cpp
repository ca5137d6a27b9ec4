// SPDX-License-Identifier: BSD-3-Clause
// dsp-bench-fft3d: the forward 3-D complex FFT (double) of examples/fft3d
// against FFTW-MPI, in one run (Google Benchmark, custom MPI main).
//
// For each size N^3 (--sizes=64,128,256 by default), with the same planner
// flag everywhere (--plan=measure, the default, or estimate):
//   dsp_slab           fft3d::Slab::forward: 2-D FFTs of the planes, one
//                      dynamic_switch<1>, FFTs along dim 0; spectrum Sharded<1>
//   dsp_slab_back      the same plus dynamic_switch<0> back to Sharded<0>: the
//                      output layout of FFTW-MPI's default
//   dsp_pencil_AxB     fft3d::Pencil::forward on the mesh A x B, every shape of
//                      the rank count
//   dsp_pencil_AxB_overlap  Pencil::forward_overlapped: the X -> Y transpose in
//                      4 chunks (split-phase switches), each chunk's dim-1 FFTs
//                      while the later chunks travel (B > 1)
//   fftw_mpi           fftw_mpi_plan_dft_3d, default layout (output distributed
//                      like the input), out of place with FFTW_DESTROY_INPUT
//   fftw_mpi_transposed_out   the same with FFTW_MPI_TRANSPOSED_OUT
// Every method destroys its input and writes a second buffer; each timed
// iteration first copies the same input into place (not timed), so every
// iteration transforms the same data.
//
// The conventions of bench/common.hpp: every iteration is timed between a
// barrier and an MPI_Allreduce(MAX), so its time is the slowest rank's and
// the same on every rank (Google Benchmark picks the same iteration count on
// every rank); rank 0 prints. Then the methods of a size run again
// interleaved, one iteration each per round, and rank 0 prints the median
// over rounds of (method / fftw_mpi in the same round), the same against
// fftw_mpi_transposed_out (the like-for-like reference of dsp_slab, whose
// spectrum is transposed too), and the median local FFT and transpose times
// of the dsp methods (each the slowest rank's).
#include "common.hpp"

#include "../examples/fft3d/verify.hpp"

#include <benchmark/benchmark.h>
#include <fftw3-mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using dsp_bench::median;
using dsp_bench::time_max;
using fft3d::Complex;

MPI_Comm world() { return MPI_COMM_WORLD; }
fft3d::Comm& comm() {
  static fft3d::Comm c{MPI_COMM_WORLD};
  return c;
}

unsigned g_flags = FFTW_MEASURE;
double g_round_seconds = 20;  // the interleaved pass's time budget per size

/// One method: prepare() puts the input in place (not timed), run() is timed;
/// stages() are this rank's local FFT and transpose seconds of the last run
/// (negative: not measured).
struct Method {
  std::function<void()> prepare, run;
  fft3d::StageTimes last{-1, -1};
};

/// The input block of a tensor: sample() at its global indices.
template <class X>
std::vector<Complex> input_of(const X& x) {
  std::vector<Complex> v(x.local_size());
  const auto n = x.global_extents();
  std::size_t k = 0;  // dsp::for_each visits the block in row-major order
  dsp::for_each(x, [&](const auto& g, const Complex&) { v[k++] = fft3d::sample(fft3d::linear(n, g[0], g[1], g[2])); });
  return v;
}

template <class D>
std::shared_ptr<Method> dsp_method(std::shared_ptr<D> fft, bool back = false, bool overlapped = false) {
  auto m = std::make_shared<Method>();
  auto in = std::make_shared<std::vector<Complex>>(input_of(fft->space()));
  Method* raw = m.get();
  m->prepare = [fft, in] { std::copy(in->begin(), in->end(), fft->space().local().data()); };
  m->run = [fft, raw, back, overlapped] {
    fft3d::StageTimes st;
    if constexpr (std::is_same_v<D, fft3d::Pencil>) {
      if (overlapped) fft->forward_overlapped(&st);
      else fft->forward(&st);
    } else {
      fft->forward(&st);
    }
    if constexpr (std::is_same_v<D, fft3d::Slab>) {
      if (back) {
        const double t0 = MPI_Wtime();
        if (!fft->shared()) dsp::dynamic_switch<0>(fft->spectrum(), fft->space());
        st.transpose += MPI_Wtime() - t0;
      }
    }
    raw->last = st;
  };
  return m;
}

struct FftwMpi {
  fftw_complex *in = nullptr, *out = nullptr;
  fftw_plan plan = nullptr;
  std::vector<Complex> input;
  FftwMpi(const fft3d::Extents& n, bool transposed) {
    ptrdiff_t n0l = 0, s0 = 0, n1l = 0, s1 = 0;
    const ptrdiff_t a = ptrdiff_t(n[0]), b = ptrdiff_t(n[1]), c = ptrdiff_t(n[2]);
    const ptrdiff_t alloc = transposed ? fftw_mpi_local_size_3d_transposed(a, b, c, world(), &n0l, &s0, &n1l, &s1)
                                       : fftw_mpi_local_size_3d(a, b, c, world(), &n0l, &s0);
    in = fftw_alloc_complex(std::size_t(std::max<ptrdiff_t>(alloc, 1)));
    out = fftw_alloc_complex(std::size_t(std::max<ptrdiff_t>(alloc, 1)));
    const unsigned flags = g_flags | FFTW_DESTROY_INPUT | (transposed ? unsigned(FFTW_MPI_TRANSPOSED_OUT) : 0u);
    plan = fftw_mpi_plan_dft_3d(a, b, c, in, out, world(), FFTW_FORWARD, flags);  // may overwrite in and out
    const std::size_t plane = n[1] * n[2];
    input.resize(std::size_t(n0l) * plane);
    for (std::size_t k = 0; k < input.size(); ++k) input[k] = fft3d::sample(std::size_t(s0) * plane + k);
  }
  ~FftwMpi() {
    fftw_destroy_plan(plan);
    fftw_free(in);
    fftw_free(out);
  }
};

std::shared_ptr<Method> fftw_method(const fft3d::Extents& n, bool transposed) {
  auto f = std::make_shared<FftwMpi>(n, transposed);
  auto m = std::make_shared<Method>();
  m->prepare = [f] { std::memcpy(f->in, f->input.data(), f->input.size() * sizeof(Complex)); };
  m->run = [f] { fftw_execute(f->plan); };
  return m;
}

// The methods of one size, made on first use; making a size drops the
// previous size's, so only one size's buffers and plans live at a time.
using Make = std::function<std::shared_ptr<Method>()>;
struct Registry {
  std::vector<std::string> groups;
  std::map<std::string, std::vector<std::pair<std::string, Make>>> makers;  // group -> (method, make)
  std::string live_group;
  std::map<std::string, std::shared_ptr<Method>> live;
  std::map<std::string, double> gb_median;  // name -> median seconds in the Google Benchmark pass
  std::shared_ptr<Method> get(const std::string& group, const std::string& method) {
    if (group != live_group) live.clear(), live_group = group;
    auto& m = live[method];
    if (!m)
      for (auto& [name, make] : makers[group])
        if (name == method) m = make();
    return m;
  }
};
Registry& reg() {
  static Registry r;
  return r;
}

std::string group_name(std::size_t n) {
  return "fft3d/[" + std::to_string(n) + "," + std::to_string(n) + "," + std::to_string(n) + "]/np" +
         std::to_string(comm().size());
}

void add(const std::string& group, const std::string& method, Make make) {
  auto& r = reg();
  if (std::find(r.groups.begin(), r.groups.end(), group) == r.groups.end()) r.groups.push_back(group);
  r.makers[group].push_back({method, make});
  const std::string name = group + "/" + method;
  benchmark::RegisterBenchmark(
      name.c_str(),
      [=](benchmark::State& st) {
    auto m = reg().get(group, method);
    for (int k = 0; k < 2; ++k) m->prepare(), m->run();  // warm: workspaces, first touch
    std::vector<double> t;
    for (auto _ : st) {
      m->prepare();
      const double s = time_max(world(), m->run);
      st.SetIterationTime(s);
      t.push_back(s);
    }
    reg().gb_median[name] = median(t);
    st.counters["med_ms"] = median(t) * 1e3;
      })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

void add_size(std::size_t n) {
  const fft3d::Extents e{n, n, n};
  const std::string group = group_name(n);
  add(group, "dsp_slab", [e] { return dsp_method(std::make_shared<fft3d::Slab>(comm(), e, g_flags)); });
  add(group, "dsp_slab_back", [e] { return dsp_method(std::make_shared<fft3d::Slab>(comm(), e, g_flags), true); });
  const int p = comm().size();
  for (int p0 = 1; p0 <= p; ++p0) {
    if (p % p0) continue;
    const std::array<int, 2> shape{p0, p / p0};
    add(group, "dsp_pencil_" + std::to_string(p0) + "x" + std::to_string(p / p0), [e, shape] {
      return dsp_method(std::make_shared<fft3d::Pencil>(fft3d::Mesh2{comm(), shape}, e, g_flags));
    });
    if (p / p0 > 1)  // the X -> Y transpose in 4 chunks, each chunk's dim-1 FFTs while the later ones travel
      add(group, "dsp_pencil_" + std::to_string(p0) + "x" + std::to_string(p / p0) + "_overlap", [e, shape] {
        return dsp_method(std::make_shared<fft3d::Pencil>(fft3d::Mesh2{comm(), shape}, e, g_flags, 4), false, true);
      });
  }
  add(group, "fftw_mpi", [e] { return fftw_method(e, false); });
  add(group, "fftw_mpi_transposed_out", [e] { return fftw_method(e, true); });
}

class Silent : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

/// The interleaved pass: every method of a size and fftw_mpi in turns, one
/// iteration each, the same rounds on every rank (the count comes from
/// max-reduced times).
void print_ratios(int rank) {
  auto& r = reg();
  if (rank == 0)
    std::printf(
        "\nratios: median over interleaved rounds of (method time / reference time in the same round);\n"
        "ratio: to fftw_mpi (output like the input); ratio_tr: to fftw_mpi_transposed_out (output\n"
        "transposed, as dsp_slab's Sharded<1> spectrum)\n"
        "%-24s %-26s %10s %8s %8s %8s %7s %12s %12s\n",
        "case", "method", "median_ms", "GFlop/s", "ratio", "ratio_tr", "rounds", "local_fft_ms", "transpose_ms");
  for (const std::string& group : r.groups) {
    std::vector<std::string> names;
    double per_round = 0;
    for (auto& [method, make] : r.makers[group])
      if (r.gb_median.count(group + "/" + method))
        names.push_back(method), per_round += r.gb_median[group + "/" + method];
    const auto ref = std::find(names.begin(), names.end(), "fftw_mpi");
    if (ref == names.end()) continue;  // not selected by --benchmark_filter
    const std::size_t ri = std::size_t(ref - names.begin());
    const auto tref = std::find(names.begin(), names.end(), "fftw_mpi_transposed_out");
    const std::size_t ti = std::size_t(tref - names.begin());  // names.size(): not selected
    std::vector<std::shared_ptr<Method>> ms;
    for (auto& nm : names) ms.push_back(r.get(group, nm));
    for (auto& m : ms) m->prepare(), m->run();
    const int rounds = int(std::clamp(g_round_seconds / std::max(per_round, 1e-9), 10.0, 2000.0));
    std::vector<std::vector<double>> t(names.size()), fft(names.size()), tr(names.size());
    for (int k = 0; k < rounds; ++k)
      for (std::size_t q = 0; q < names.size(); ++q) {
        const std::size_t i = (q + std::size_t(k)) % names.size();
        ms[i]->prepare();
        t[i].push_back(time_max(world(), ms[i]->run));
        double st[2] = {ms[i]->last.local_fft, ms[i]->last.transpose}, mx[2];
        MPI_Allreduce(st, mx, 2, MPI_DOUBLE, MPI_MAX, world());
        fft[i].push_back(mx[0]), tr[i].push_back(mx[1]);
      }
    // the size, from the group name "fft3d/[N,N,N]/npP"
    const std::size_t N = std::stoul(group.substr(group.find('[') + 1));
    const double points = double(N) * double(N) * double(N), flops = 5 * points * std::log2(points);
    if (rank == 0) {
      for (std::size_t i = 0; i < names.size(); ++i) {
        std::vector<double> ratio, ratio_tr;
        for (int k = 0; k < rounds; ++k) {
          ratio.push_back(t[i][std::size_t(k)] / t[ri][std::size_t(k)]);
          if (ti < names.size()) ratio_tr.push_back(t[i][std::size_t(k)] / t[ti][std::size_t(k)]);
        }
        const double med = median(t[i]);
        char a[16] = "-", b[16] = "-", c[16] = "-";
        if (!ratio_tr.empty()) std::snprintf(c, sizeof c, "%.3f", median(ratio_tr));
        if (fft[i][0] >= 0) {
          std::snprintf(a, sizeof a, "%.2f", median(fft[i]) * 1e3);
          std::snprintf(b, sizeof b, "%.2f", median(tr[i]) * 1e3);
        }
        std::printf("%-24s %-26s %10.2f %8.2f %8.3f %8s %7d %12s %12s\n", group.c_str(), names[i].c_str(), med * 1e3,
                    flops / med * 1e-9, median(ratio), c, rounds, a, b);
      }
      std::fflush(stdout);
    }
  }
}

std::vector<std::size_t> parse_sizes(const std::string& s) {
  std::vector<std::size_t> v;
  std::size_t p = 0;
  while (p < s.size()) {
    const std::size_t q = std::min(s.find(',', p), s.size());
    v.push_back(std::stoul(s.substr(p, q - p)));
    p = q + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  fftw_mpi_init();
  Kokkos::initialize(argc, argv);
  {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::vector<std::size_t> sizes{64, 128, 256};
    // Our own options first (--sizes=, --plan=, --round-seconds=); the rest go to Google Benchmark.
    int kept = 1;
    for (int k = 1; k < argc; ++k) {
      const std::string a = argv[k];
      if (a.rfind("--sizes=", 0) == 0) sizes = parse_sizes(a.substr(8));
      else if (a == "--plan=estimate") g_flags = FFTW_ESTIMATE;
      else if (a == "--plan=measure") g_flags = FFTW_MEASURE;
      else if (a.rfind("--round-seconds=", 0) == 0) g_round_seconds = std::stod(a.substr(16));
      else argv[kept++] = argv[k];
    }
    argc = kept;
    benchmark::Initialize(&argc, argv);
    if (rank == 0)
      std::printf("dsp-bench-fft3d: %d ranks, planner flag %s for every local plan and FFTW-MPI plan\n", comm().size(),
                  g_flags == FFTW_MEASURE ? "FFTW_MEASURE" : "FFTW_ESTIMATE");
    for (std::size_t n : sizes) add_size(n);
    if (rank == 0) {
      benchmark::RunSpecifiedBenchmarks();
    } else {
      Silent silent;
      benchmark::RunSpecifiedBenchmarks(&silent);
    }
    print_ratios(rank);
    reg().live.clear();
    std::fflush(stdout);
    benchmark::Shutdown();
  }
  Kokkos::finalize();
  fftw_mpi_cleanup();
  MPI_Finalize();
  return 0;
}
