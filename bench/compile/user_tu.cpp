// SPDX-License-Identifier: BSD-3-Clause
// Compile-cost probe (bench/compile.sh): a user's translation unit with a
// typical mix of dsp calls: switches, a gather, a batch, a wire, a
// split-phase switch and one mesh redistribute. baseline_tu.cpp is the same
// program's Kokkos + MPI part alone; the ratio of their compile times is the
// figure docs/benchmarks.md reports.
#include <dsp/mpi.hpp>

#include <cstdio>

using Comm = dsp::MpiCommunicator;
template <class L>
using Video = dsp::DistTensor<float, 4, L, Comm>;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Kokkos::initialize(argc, argv);
  {
    Comm comm{MPI_COMM_WORLD};
    const std::size_t B = 2, T = 16, S = 32, C = 8;
    Video<dsp::Sharded<1>> x{comm, {B, T, S, C}};
    Kokkos::parallel_for(
        "fill", Kokkos::RangePolicy<>(0, x.local().size()),
        KOKKOS_LAMBDA(std::size_t k) { x.local().data()[k] = float(k); });
    auto y = dsp::dynamic_switch<2>(x);  // T -> S
    dsp::dynamic_switch<1>(y, x);        // back, into x
    auto r = dsp::gather(x);             // all-gather
    Video<dsp::Sharded<1>> q{comm, {B, T, S, C}}, k{comm, {B, T, S, C}}, v{comm, {B, T, S, C}};
    auto [q2, k2, v2] = dsp::dynamic_switch<2>(dsp::batch(q, k, v));  // a batch
    auto w = dsp::dynamic_switch<2>(x, dsp::Wire::bf16);              // a wire
    Video<dsp::Sharded<2>> z{comm, {B, T, S, C}};
    auto h = dsp::start_switch<2>(x, z);  // split-phase
    h.wait();
    dsp::Mesh<2, Comm> mesh{comm, {1, comm.size()}};
    dsp::DistTensor<double, 3, dsp::Axes<dsp::Sharded<0>, dsp::Sharded<1>>, dsp::Mesh<2, Comm>> m{mesh, {8, 8, 8}};
    auto m2 = dsp::redistribute<dsp::Axes<dsp::Sharded<0>, dsp::Sharded<2>>>(m);  // a mesh redistribute
    if (comm.rank() == 0)
      std::printf("%zu %zu %zu %zu %zu %zu\n", r.local_size(), q2.local_size() + k2.local_size() + v2.local_size(),
                  w.local_size(), y.local_size(), z.local_size(), m2.local_size());
  }
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}
