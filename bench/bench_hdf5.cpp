// SPDX-License-Identifier: BSD-3-Clause
// dsp-bench-hdf5: dsp::hdf5::save and load of a double tensor against a
// plain MPI_File_write_all / MPI_File_read_all of the same bytes (each rank
// its block, at its offset in one file: what an MPI code writes by hand).
//
//   mpirun -np 2 dsp-bench-hdf5 [N0 N1 N2] [rounds] [dir]     (default 256 256 128, 9, /tmp)
//
// Sharded<0> blocks (contiguous in the file: the reference writes each at its
// offset) and Sharded<2> (a hyperslab of short runs per rank: the reference
// writes the same runs through an MPI subarray file view).
// The methods run in turns, one call each per round, each round starting
// with another; a call is timed from a barrier to the slowest rank's end.
// Prints per method the median time, GB/s of the whole tensor, and the
// median over rounds of the ratio raw time / method time (the bandwidth
// ratio to the raw MPI-IO call of the same direction; target >= 0.8).
#include "common.hpp"

#include <dsp/hdf5.hpp>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {
using Comm = dsp::MpiCommunicator;
using E3 = std::array<std::size_t, 3>;
}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  {
    int rank = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    E3 e{256, 256, 128};
    int rounds = 9;
    std::string dir = "/tmp";
    if (argc >= 4)
      e = {std::size_t(std::atol(argv[1])), std::size_t(std::atol(argv[2])), std::size_t(std::atol(argv[3]))};
    if (argc >= 5) rounds = std::atoi(argv[4]);
    if (argc >= 6) dir = argv[5];
    const std::string h5 = dir + "/dsp_bench_hdf5.h5", raw = dir + "/dsp_bench_hdf5.raw";
    Comm world{MPI_COMM_WORLD};
    dsp::DistTensor<double, 3, dsp::Sharded<0>, Comm> x0{world, e};
    dsp::DistTensor<double, 3, dsp::Sharded<2>, Comm> x2{world, e};
    dsp::fill(x0, [](const E3& g) { return double(g[0] + g[1] + g[2]); });
    dsp::fill(x2, [](const E3& g) { return double(g[0] + g[1] + g[2]); });
    const double total = double(e[0] * e[1] * e[2] * sizeof(double));
    // The raw reference: each rank's Sharded<0> block at its byte offset.
    const std::size_t plane = e[1] * e[2];
    const MPI_Offset at = MPI_Offset(dsp_bench::block_offset(e[0], n, rank) * plane * sizeof(double));
    const int count = int(dsp_bench::block_count(e[0], n, rank) * plane);
    auto raw_io = [&](bool write) {
      MPI_File f;
      MPI_File_open(MPI_COMM_WORLD, raw.c_str(), write ? MPI_MODE_CREATE | MPI_MODE_WRONLY : MPI_MODE_RDONLY,
                    MPI_INFO_NULL, &f);
      double* p = x0.local().data();
      if (write) MPI_File_write_at_all(f, at, p, count, MPI_DOUBLE, MPI_STATUS_IGNORE);
      else MPI_File_read_at_all(f, at, p, count, MPI_DOUBLE, MPI_STATUS_IGNORE);
      MPI_File_close(&f);
    };
    // The raw reference of Sharded<2>: the same strided blocks through a subarray file view.
    auto raw_strided = [&](bool write) {
      const int sizes[3] = {int(e[0]), int(e[1]), int(e[2])};
      const int sub[3] = {int(e[0]), int(e[1]), int(dsp_bench::block_count(e[2], n, rank))};
      const int start[3] = {0, 0, int(dsp_bench::block_offset(e[2], n, rank))};
      MPI_Datatype view;
      MPI_Type_create_subarray(3, sizes, sub, start, MPI_ORDER_C, MPI_DOUBLE, &view);
      MPI_Type_commit(&view);
      MPI_File f;
      MPI_File_open(MPI_COMM_WORLD, raw.c_str(), write ? MPI_MODE_CREATE | MPI_MODE_WRONLY : MPI_MODE_RDONLY,
                    MPI_INFO_NULL, &f);
      MPI_File_set_view(f, 0, MPI_DOUBLE, view, "native", MPI_INFO_NULL);
      double* p = x2.local().data();
      const int cnt = sub[0] * sub[1] * sub[2];
      if (write) MPI_File_write_all(f, p, cnt, MPI_DOUBLE, MPI_STATUS_IGNORE);
      else MPI_File_read_all(f, p, cnt, MPI_DOUBLE, MPI_STATUS_IGNORE);
      MPI_File_close(&f);
      MPI_Type_free(&view);
    };
    struct Method {
      const char* name;
      std::function<void()> run;
      int ref;  // index of its reference
    };
    std::vector<Method> m = {
        {"MPI_File_write_all", [&] { raw_io(true); }, 0},
        {"save Sharded<0>", [&] { dsp::hdf5::save(x0, h5, "u"); }, 0},
        {"MPI write, subarray", [&] { raw_strided(true); }, 2},
        {"save Sharded<2>", [&] { dsp::hdf5::save(x2, h5, "u"); }, 2},
        {"MPI_File_read_all", [&] { raw_io(false); }, 4},
        {"load Sharded<0>", [&] { dsp::hdf5::load(h5, "u", x0); }, 4},
        {"MPI read, subarray", [&] { raw_strided(false); }, 6},
        {"load Sharded<2>", [&] { dsp::hdf5::load(h5, "u", x2); }, 6},
    };
    for (auto& k : m) k.run();  // warm: files exist, pages touched
    std::vector<std::vector<double>> t(m.size());
    for (int r = 0; r < rounds; ++r)
      for (std::size_t q = 0; q < m.size(); ++q) {
        // writes before reads within a round (a read needs a written file); the start rotates within each half
        const std::size_t half = q / 4, k = half * 4 + (q % 4 + std::size_t(r)) % 4;
        t[k].push_back(dsp_bench::time_max(MPI_COMM_WORLD, m[k].run));
      }
    if (rank == 0) {
      std::printf("dsp-bench-hdf5: [%zu,%zu,%zu] double (%.0f MiB), %d ranks, %d rounds, files in %s\n", e[0], e[1],
                  e[2], total / (1 << 20), n, rounds, dir.c_str());
      std::printf("%-22s %12s %9s %22s\n", "method", "median ms", "GB/s", "bandwidth / raw MPI-IO");
      for (std::size_t k = 0; k < m.size(); ++k) {
        std::vector<double> ratio;
        for (int r = 0; r < rounds; ++r)
          ratio.push_back(t[std::size_t(m[k].ref)][std::size_t(r)] / t[k][std::size_t(r)]);
        const double med = dsp_bench::median(t[k]);
        std::printf("%-22s %12.2f %9.2f %22.3f\n", m[k].name, med * 1e3, total / med * 1e-9, dsp_bench::median(ratio));
      }
      std::remove(h5.c_str());
      std::remove(raw.c_str());
    }
  }
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}
