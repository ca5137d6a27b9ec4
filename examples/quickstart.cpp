// SPDX-License-Identifier: BSD-3-Clause
// The paper's Figure 11 pipeline on a video-like tensor X[B, T, S, C]:
//   split<1>      shard T: the spatial stage computes over S, whole on every rank
//   switch<2>     shard S: the temporal stage computes over T
//   switch<1>     shard T again: a second spatial stage
//   gather        every rank holds the result
// Each stage is a stand-in for a transformer block that mixes along one
// sequence dim. The result is checked against the same stages on one rank.
#include "help.hpp"

#include <dsp/mpi.hpp>

#include <cmath>
#include <cstdio>

using Comm = dsp::MpiCommunicator;
template <class L>
using Video = dsp::DistTensor<float, 4, L, Comm>;

// x[b, t, s, c] -= mean over dim `Dim` (which this rank must hold whole).
template <std::size_t Dim, class V>
void center_along(const V& x) {
  const std::size_t n[4] = {x.extent(0), x.extent(1), x.extent(2), x.extent(3)};
  std::size_t i[4];
  for (i[0] = 0; i[0] < n[0]; ++i[0])
    for (i[1] = 0; i[1] < (Dim == 1 ? 1 : n[1]); ++i[1])
      for (i[2] = 0; i[2] < (Dim == 2 ? 1 : n[2]); ++i[2])
        for (i[3] = 0; i[3] < n[3]; ++i[3]) {
          std::size_t j[4] = {i[0], i[1], i[2], i[3]};
          double sum = 0;
          for (j[Dim] = 0; j[Dim] < n[Dim]; ++j[Dim]) sum += x(j[0], j[1], j[2], j[3]);
          const float mean = float(sum / double(n[Dim] ? n[Dim] : 1));
          for (j[Dim] = 0; j[Dim] < n[Dim]; ++j[Dim]) x(j[0], j[1], j[2], j[3]) -= mean;
        }
}

constexpr const char* kUsage =
    "usage: mpiexec -n N quickstart\n"
    "  The paper's Figure 11 pipeline (split, switch, switch, gather) on X[B=2, T=13, S=30, C=8] float,\n"
    "  checked against the same stages on one rank. No arguments; exit status 1 when it differs.";

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (example::asked_for_help(argc, argv, kUsage)) {
    MPI_Finalize();
    return 0;
  }
  Kokkos::initialize(argc, argv);
  int failed = 0;
  {
    Comm comm{MPI_COMM_WORLD};
    const std::size_t B = 2, T = 13, S = 30, C = 8;  // T, S not divisible by every rank count
    Video<dsp::Replicated> input{comm, {B, T, S, C}};
    auto in = input.local();
    for (std::size_t k = 0; k < in.size(); ++k) in.data()[k] = float(std::sin(0.37 * double(k)) * 4 + k % 7);

    auto x = dsp::split<1>(input);       // Sharded<1>: T split, S whole
    center_along<2>(x.local());          // spatial stage
    auto y = dsp::dynamic_switch<2>(x);  // Sharded<2>: S split, T whole
    center_along<1>(y.local());          // temporal stage
    dsp::dynamic_switch<1>(y, x);        // back to Sharded<1>, into x's storage
    center_along<2>(x.local());          // spatial stage
    auto out = dsp::gather(x);           // Replicated

    // Reference: the same stages on one rank's full copy.
    Video<dsp::Replicated>::view_type ref("ref", B, T, S, C);
    Kokkos::deep_copy(ref, in);
    center_along<2>(ref);
    center_along<1>(ref);
    center_along<2>(ref);
    double err = 0;
    for (std::size_t k = 0; k < ref.size(); ++k)
      err = std::fmax(err, std::fabs(double(out.local().data()[k] - ref.data()[k])));
    failed = err > 1e-4;

    if (comm.rank() == 0) {
      const double mib = double(B * T * S * C * sizeof(float)) / double(1 << 20);
      std::printf("dsp quickstart: X[B=%zu, T=%zu, S=%zu, C=%zu] float, %.2f MiB, on %d ranks\n", B, T, S, C, mib,
                  comm.size());
      std::printf("  rank 0 block: Sharded<1> [%zu, %zu, %zu, %zu], Sharded<2> [%zu, %zu, %zu, %zu]\n",
                  x.local_extents()[0], x.local_extents()[1], x.local_extents()[2], x.local_extents()[3],
                  y.local_extents()[0], y.local_extents()[1], y.local_extents()[2], y.local_extents()[3]);
      std::printf("  split -> spatial -> switch -> temporal -> switch -> spatial -> gather\n");
      std::printf("  max |dsp - single-rank reference| = %.3g: %s\n", err, failed ? "WRONG" : "OK");
    }
  }
  Kokkos::finalize();
  MPI_Finalize();
  return failed;
}
