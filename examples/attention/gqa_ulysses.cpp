// SPDX-License-Identifier: BSD-3-Clause
// Grouped-query attention with Ulysses switches when there are more ranks than
// key/value heads (docs/attention.md, "GQA: replicate-to-fill"). Q [B, S, H, d]
// and K, V [B, S, H_kv, d] arrive with the sequence sharded over every rank.
// On the mesh dsp::gqa_mesh_shape(N, H_kv) = {N / g, g}, Q, K and V move
// their heads along axis 1 in one call (Ulysses within a row, a batch of
// different extents), K and V then gather their head group whole (each group
// on the N / g ranks of its column), every rank attends its queries to its
// heads' whole sequence, and the output goes back to the sequence layout.
// Checked against the same attention on one rank; the bytes Q, K and V moved
// are printed beside the fewest that can do it.
//
//   mpiexec -n 8 ./attention_gqa [S] [H_kv]      (defaults: 37 2; H = 4 H_kv)
#include "../help.hpp"
#include "attend.hpp"

#include <dsp/comm/counting.hpp>
#include <dsp/mpi.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>

using Comm = dsp::CountingCommunicator<dsp::MpiCommunicator>;  // counts what each axis sends
using Mesh = dsp::Mesh<2, Comm>;
using Seq = dsp::Axes<dsp::Sharded<1>, dsp::Sharded<1>>;      // the sequence over every rank
using QHeads = dsp::Axes<dsp::Sharded<1>, dsp::Sharded<2>>;   // a head group per column, the sequence down it
using KvHeads = dsp::Axes<dsp::Replicated, dsp::Sharded<2>>;  // a head group per column, whole on its ranks
template <class L>
using Act = dsp::DistTensor<float, 4, L, Mesh>;
using G4 = std::array<std::size_t, 4>;

namespace {

float q_at(const G4& g) { return float(std::sin(0.11 * double(g[0] * 7 + g[1] * 3 + g[2] * 5 + g[3]))); }
float k_at(const G4& g) { return float(std::cos(0.07 * double(g[0] * 5 + g[1] * 2 + g[2] * 11 + g[3]))); }
float v_at(const G4& g) { return float(0.1 * double((g[0] + 3 * g[1] + 7 * g[2] + g[3]) % 13)); }

/// Attention of this rank's queries q (query heads from q_h0) over the keys
/// and values k, v (the whole sequence; key/value heads from k_h0): query head
/// h reads key/value head h / group, which this rank holds (the mesh's promise).
template <class Q, class K, class O>
void attend(const Q& q, std::size_t q_h0, const K& k, const K& v, std::size_t k_h0, std::size_t group, const O& o) {
  auto kv = [&](std::size_t h) { return (q_h0 + h) / group - k_h0; };
  attention::attend(
      q.extent(0), q.extent(1), q.extent(2), q.extent(3), k.extent(1),
      [&](std::size_t b, std::size_t i, std::size_t h, std::size_t e) { return q(b, i, h, e); },
      [&](std::size_t b, std::size_t j, std::size_t h, std::size_t e) { return k(b, j, kv(h), e); },
      [&](std::size_t b, std::size_t j, std::size_t h, std::size_t e) { return v(b, j, kv(h), e); },
      [&](std::size_t b, std::size_t i, std::size_t h, std::size_t e) -> float& { return o(b, i, h, e); });
}

std::size_t sum_all(std::size_t x) {
  unsigned long long v = x, s = 0;
  MPI_Allreduce(&v, &s, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return std::size_t(s);
}

}  // namespace

constexpr const char* kUsage =
    "usage: mpiexec -n N attention_gqa [S] [H_kv]\n"
    "  Grouped-query attention with Ulysses switches and replicate-to-fill (docs/attention.md).\n"
    "  S: sequence length (default 37), H_kv >= 1: key/value heads (default 2); H = 4 H_kv.";

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (example::asked_for_help(argc, argv, kUsage)) {
    MPI_Finalize();
    return 0;
  }
  Kokkos::initialize(argc, argv);
  int failed = 0;
  {
    Comm comm{dsp::MpiCommunicator{MPI_COMM_WORLD}};
    const int n = comm.size();
    std::size_t S = 0, h_kv = 0;  // S: uneven over most rank counts by default
    const bool speak = comm.rank() == 0;
    if (!attention::count_arg(argc, argv, 1, 0, 37, S, "S", speak) ||
        !attention::count_arg(argc, argv, 2, 1, 2, h_kv, "H_kv", speak)) {
      Kokkos::finalize();
      MPI_Finalize();
      return 2;
    }
    const std::size_t B = 2, H = 4 * h_kv, d = 8, group = H / h_kv;
    const auto shape = dsp::gqa_mesh_shape(n, int(h_kv));
    Mesh mesh{comm, shape};

    Act<Seq> q{mesh, {B, S, H, d}}, k{mesh, {B, S, h_kv, d}}, v{mesh, {B, S, h_kv, d}};
    dsp::fill(q, q_at), dsp::fill(k, k_at), dsp::fill(v, v_at);
    const std::size_t own = k.local_extents()[1];

    for (std::size_t a = 0; a < 2; ++a) Comm(mesh.axis(a)).reset();
    // Q, K and V (a batch of different extents) in one exchange along axis 1; then K and V whole down
    // each column, one all-gather along axis 0.
    auto [qh, kq, vq] = dsp::redistribute<QHeads>(dsp::batch(q, k, v));
    auto [kh, vh] = dsp::redistribute<KvHeads>(dsp::batch(kq, vq));
    const std::size_t sent = mesh.axis(0).counts().bytes_sent + mesh.axis(1).counts().bytes_sent;

    Act<QHeads> oh{mesh, qh.global_extents()};
    attend(qh.local(), qh.local_offsets()[2], kh.local(), vh.local(), kh.local_offsets()[2], group, oh.local());
    auto o = dsp::redistribute<Seq>(oh);  // back to the sequence layout

    // The same attention on one rank, over the whole tensors.
    using Full = Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>;
    Full fq("q", B, S, H, d), fk("k", B, S, h_kv, d), fv("v", B, S, h_kv, d), fo("o", B, S, H, d);
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t s = 0; s < S; ++s)
        for (std::size_t e = 0; e < d; ++e) {
          for (std::size_t h = 0; h < H; ++h) fq(b, s, h, e) = q_at({b, s, h, e});
          for (std::size_t h = 0; h < h_kv; ++h)
            fk(b, s, h, e) = k_at({b, s, h, e}), fv(b, s, h, e) = v_at({b, s, h, e});
        }
    attend(fq, 0, fk, fv, 0, group, fo);
    double err = 0;
    dsp::for_each(
        o, [&](const G4& g, const float& x) { err = std::max(err, double(std::abs(x - fo(g[0], g[1], g[2], g[3])))); });
    MPI_Allreduce(MPI_IN_PLACE, &err, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    // The fewest bytes: for K and V, each rank lacks its heads' sequence but for its own block; for Q,
    // its heads of its row's sequence block but for its own positions.
    const std::size_t q_lacks = qh.local_extents()[2] * (qh.local_extents()[1] - q.local_extents()[1]);
    const std::size_t fewest =
        sum_all((2 * (h_kv / std::size_t(shape[1])) * (S - own) + q_lacks) * B * d * sizeof(float));
    const std::size_t moved = sum_all(sent);
    if (comm.rank() == 0)
      std::printf(
          "GQA on %d ranks, mesh {%d, %d}: S %zu, H %zu, H_kv %zu; Q, K and V moved %zu bytes (fewest %zu); "
          "max |error| vs one rank %.2e\n",
          n, shape[0], shape[1], S, H, h_kv, moved, fewest, err);
    failed = err > 1e-5 || moved != fewest;
    if (failed && comm.rank() == 0) std::printf("FAILED\n");
  }
  Kokkos::finalize();
  MPI_Finalize();
  return failed;
}
