// SPDX-License-Identifier: BSD-3-Clause
// fft3d: runs the distributed 3-D FFT of fft3d.hpp forward and inverse, prints
// the times and the errors against serial FFTW, FFTW-MPI (where installed)
// and the input.
//
//   mpirun -np 4 fft3d [--size 64x64x64] [--mesh 2x2|measure] [--mode slab|pencil|both]
//                      [--plan measure|estimate] [--iters 5] [--check 1] [--wisdom PREFIX]
//
// --mesh defaults to the most square P0 x P1 with P0 <= P1. --mesh measure
// times a forward and inverse pencil FFT on every mesh P0 x P1 of the ranks
// (the slowest rank's time, so every rank picks the same) and runs the
// fastest, as cuDecomp's grid autotuning does. --plan measure also sets
// dsp::Planning::measure for the transposes. --check 0 skips
// the comparisons with serial FFTW and FFTW-MPI, which gather the whole
// spectrum on every rank (16 N0 N1 N2 bytes each); the round trip is always
// checked. --wisdom PREFIX: each rank imports FFTW wisdom from PREFIX.<rank>
// before planning, if the file exists, and exports its wisdom there after, so
// a second run with the same sizes plans at once (FFTW_MEASURE's timing runs
// are skipped). Exit status 1 when an error is above its tolerance.
#include "../help.hpp"
#include "verify.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Options {
  fft3d::Extents n{32, 32, 32};
  std::array<int, 2> mesh{0, 0};
  bool measure_mesh = false;
  std::string mode = "both", plan = "measure", wisdom;
  int iters = 5;
  bool check = true;
};

[[noreturn]] void usage(const char* why) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    std::fprintf(stderr,
                 "fft3d: %s\nusage: fft3d [--size N0xN1xN2] [--mesh P0xP1|measure] [--mode slab|pencil|both] "
                 "[--plan measure|estimate] [--iters K] [--check 0|1] [--wisdom PREFIX]\n",
                 why);
  MPI_Finalize();
  std::exit(2);
}

std::vector<long> numbers(const std::string& s) {  // "64x32x16" -> {64, 32, 16}
  std::vector<long> v;
  std::size_t p = 0;
  while (p <= s.size()) {
    const std::size_t q = std::min(s.find('x', p), s.size());
    char* end = nullptr;
    const std::string part = s.substr(p, q - p);
    const long x = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || x < 0) return {};
    v.push_back(x);
    p = q + 1;
  }
  return v;
}

Options parse(int argc, char** argv, int ranks) {
  Options o;
  for (int k = 1; k < argc; ++k) {
    const std::string a = argv[k];
    if (k + 1 >= argc) usage(("missing value after " + a).c_str());
    const std::string v = argv[++k];
    if (a == "--size") {
      const auto x = numbers(v);
      if (x.size() == 1) o.n = {std::size_t(x[0]), std::size_t(x[0]), std::size_t(x[0])};
      else if (x.size() == 3) o.n = {std::size_t(x[0]), std::size_t(x[1]), std::size_t(x[2])};
      else usage("--size takes N or N0xN1xN2");
    } else if (a == "--mesh" && v == "measure") {
      o.measure_mesh = true;
    } else if (a == "--mesh") {
      const auto x = numbers(v);
      if (x.size() != 2 || x[0] < 1 || x[1] < 1 || x[0] * x[1] != ranks) usage("--mesh P0xP1 with P0 P1 = ranks");
      o.mesh = {int(x[0]), int(x[1])};
    } else if (a == "--mode") {
      if (v != "slab" && v != "pencil" && v != "both") usage("--mode is slab, pencil or both");
      o.mode = v;
    } else if (a == "--plan") {
      if (v != "measure" && v != "estimate") usage("--plan is measure or estimate");
      o.plan = v;
    } else if (a == "--iters") {
      o.iters = std::atoi(v.c_str());
      if (o.iters < 1) usage("--iters must be at least 1");
    } else if (a == "--check") {
      o.check = v != "0";
    } else if (a == "--wisdom") {
      o.wisdom = v;
    } else {
      usage(("unknown option " + a).c_str());
    }
  }
  if (o.mesh[0] == 0) {  // the most square P0 x P1, P0 <= P1
    for (int p0 = 1; p0 * p0 <= ranks; ++p0)
      if (ranks % p0 == 0) o.mesh = {p0, ranks / p0};
  }
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

/// Times `iters` forward + inverse pairs (the slowest rank's time each), then
/// checks. Returns false when an error is above its tolerance.
template <class D>
bool run(const char* name, D& fft, const Options& o, int rank) {
  std::vector<double> fwd, inv, fwd_fft, fwd_tr;
  for (int it = 0; it < o.iters; ++it) {
    fft3d::fill(fft.space());
    fft3d::StageTimes st;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    fft.forward(&st);
    double t1 = MPI_Wtime();
    fft.inverse();
    double t2 = MPI_Wtime();
    double mine[4] = {t1 - t0, t2 - t1, st.local_fft, st.transpose}, mx[4];
    MPI_Allreduce(mine, mx, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    fwd.push_back(mx[0]), inv.push_back(mx[1]), fwd_fft.push_back(mx[2]), fwd_tr.push_back(mx[3]);
  }
  const double back = fft3d::round_trip_error(fft.space(), MPI_COMM_WORLD);
  double serial = -1, mpi = -1;
  if (o.check) {
    fft3d::fill(fft.space());
    fft.forward();
    const auto all = fft3d::gather_all(fft.spectrum());
    serial = fft3d::serial_error(all, MPI_COMM_WORLD);
#ifdef FFT3D_HAVE_FFTW_MPI
    mpi = fft3d::fftw_mpi_error(all, MPI_COMM_WORLD);
#endif
  }
  const bool ok = back < 1e-12 && serial < 1e-9 && mpi < 1e-9;
  if (rank == 0) {
    std::printf("%-14s forward %9.3f ms (local FFTs %8.3f, transposes %8.3f)   inverse %9.3f ms\n", name,
                median(fwd) * 1e3, median(fwd_fft) * 1e3, median(fwd_tr) * 1e3, median(inv) * 1e3);
    auto text = [](double e) {
      char b[32];
      std::snprintf(b, sizeof b, "%.2e", e);
      return e < 0 ? std::string("(not checked)") : std::string(b);
    };
    std::printf("%-14s relative error vs serial FFTW %s, vs FFTW-MPI %s, round trip %.2e: %s\n", "",
                text(serial).c_str(), text(mpi).c_str(), back, ok ? "OK" : "FAILED");
  }
  return ok;
}

/// The pencil mesh P0 x P1 whose forward + inverse FFT is fastest: each
/// candidate planned, run once to warm up and twice timed (the slowest rank's
/// time), so every rank returns the same mesh. Prints the table on rank 0.
std::array<int, 2> measure_mesh(fft3d::Comm& comm, const Options& o, unsigned flags, int rank, int size) {
  std::array<int, 2> best{1, size};
  double best_t = 1e300;
  for (int p0 = 1; p0 <= size; ++p0) {
    if (size % p0) continue;
    fft3d::Mesh2 mesh{comm, {p0, size / p0}};
    fft3d::Pencil pencil(mesh, o.n, flags);
    fft3d::fill(pencil.space());
    double t = 1e300;
    for (int it = 0; it < 3; ++it) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      pencil.forward();
      pencil.inverse();
      double mine = MPI_Wtime() - t0, mx = 0;
      MPI_Allreduce(&mine, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (it > 0) t = std::min(t, mx);
    }
    if (rank == 0) std::printf("mesh %dx%d: forward + inverse %9.3f ms\n", p0, size / p0, t * 1e3);
    if (t < best_t) best_t = t, best = {p0, size / p0};
  }
  return best;
}

}  // namespace

constexpr const char* kUsage =
    "usage: mpiexec -n N fft3d [--size N0xN1xN2] [--mesh P0xP1|measure] [--mode slab|pencil|both]\n"
    "                        [--plan measure|estimate] [--iters K] [--check 0|1] [--wisdom PREFIX]\n"
    "  A distributed 3-D FFT, slab and pencil, forward and inverse: times and errors against serial FFTW,\n"
    "  FFTW-MPI (where installed) and the input.";

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (example::asked_for_help(argc, argv, kUsage)) {
    MPI_Finalize();
    return 0;
  }
  Kokkos::initialize(argc, argv);
  int rc = 0;
  {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    Options o = parse(argc, argv, size);
    const unsigned flags = o.plan == "measure" ? FFTW_MEASURE : FFTW_ESTIMATE;
    if (o.plan == "measure") dsp::set_planning(dsp::Planning::measure);
    if (rank == 0)
      std::printf("fft3d: %zux%zux%zu complex double, %d ranks, FFTW_%s, %d iterations (median of the slowest rank)\n",
                  o.n[0], o.n[1], o.n[2], size, o.plan == "measure" ? "MEASURE" : "ESTIMATE", o.iters);
    fft3d::Comm comm{MPI_COMM_WORLD};
    const std::string wisdom = o.wisdom.empty() ? "" : o.wisdom + "." + std::to_string(rank);
    if (!wisdom.empty()) fftw_import_wisdom_from_filename(wisdom.c_str());  // absent on a first run
    bool ok = true;
    try {
      if (o.mode != "pencil") {
        const double t0 = MPI_Wtime();
        fft3d::Slab slab(comm, o.n, flags);
        if (rank == 0) std::printf("slab: planned in %.3f s\n", MPI_Wtime() - t0);
        ok = run("slab", slab, o, rank) && ok;
      }
      if (o.mode != "slab") {
        if (o.measure_mesh) o.mesh = measure_mesh(comm, o, flags, rank, size);
        fft3d::Mesh2 mesh{comm, o.mesh};
        const double t0 = MPI_Wtime();
        fft3d::Pencil pencil(mesh, o.n, flags);
        const std::string name = "pencil " + std::to_string(o.mesh[0]) + "x" + std::to_string(o.mesh[1]);
        if (rank == 0) std::printf("%s: planned in %.3f s\n", name.c_str(), MPI_Wtime() - t0);
        ok = run(name.c_str(), pencil, o, rank) && ok;
      }
      if (!wisdom.empty() && !fftw_export_wisdom_to_filename(wisdom.c_str()))
        std::fprintf(stderr, "fft3d (rank %d): could not write %s\n", rank, wisdom.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fft3d (rank %d): %s\n", rank, e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    rc = ok ? 0 : 1;
  }
  Kokkos::finalize();
  MPI_Finalize();
  return rc;
}
