// SPDX-License-Identifier: BSD-3-Clause
// USP over packed documents (docs/attention.md, "Blocks: sizes chosen at run
// time"). Documents of different lengths are packed along the sequence of q,
// k, v [B, S, H, d], and attention is masked to each document. The ranks form
// a mesh {r, u}; dsp::Blocks<1> on the ring axis gives each ring rank whole
// documents (cut where the running token count best balances the ring), and
// the Ulysses axis cuts each ring block further:
// Axes<Blocks<1>, Sharded<1>>. The Ulysses switch to Axes<Blocks<1>,
// Sharded<2>> keeps the ring axis's blocks (one all-to-all on axis 1), and
// since no document crosses a ring block, every rank then attends its
// queries to keys it already holds: no ring passes at all. The output
// switches back. Checked against the same masked attention on one rank; the
// bytes each rank sends against their closed form (nothing on the ring axis).
//
//   mpiexec -n 4 ./attention_usp_documents [r]      (default: the balanced mesh's first axis)
#include "../help.hpp"
#include "attend.hpp"

#include <dsp/comm/counting.hpp>
#include <dsp/mpi.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <vector>

using Comm = dsp::CountingCommunicator<dsp::MpiCommunicator>;
using Mesh = dsp::Mesh<2, Comm>;
using Seq = dsp::Axes<dsp::Blocks<1>, dsp::Sharded<1>>;    // whole documents per ring rank, Ulysses inside
using Heads = dsp::Axes<dsp::Blocks<1>, dsp::Sharded<2>>;  // the ring rank's documents, a heads block
template <class L>
using Act = dsp::DistTensor<float, 4, L, Mesh>;
using G4 = std::array<std::size_t, 4>;
using Block = Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>;

namespace {

float input(int which, const G4& g) {
  return float(std::sin(0.05 * double(g[0] * 13 + g[1] * 7 + g[2] * 3 + g[3]) * double(which + 1) + which));
}

/// Attention of queries [q0, q0 + nq) over keys in the same document (doc[i]:
/// the document of global position i); q, k, v, o hold positions from `base`.
template <class V, class O>
void masked(std::size_t B, std::size_t base, std::size_t n, std::size_t h, std::size_t d,
            const std::vector<std::size_t>& doc, const V& q, const V& k, const V& v, O& o) {
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> w(n);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t hh = 0; hh < h; ++hh) {
        double top = -1e300, sum = 0;
        for (std::size_t j = 0; j < n; ++j) {
          if (doc[base + j] != doc[base + i]) continue;
          double s = 0;
          for (std::size_t e = 0; e < d; ++e) s += double(q(b, i, hh, e)) * double(k(b, j, hh, e));
          top = std::max(top, w[j] = s * scale);
        }
        for (std::size_t j = 0; j < n; ++j)
          if (doc[base + j] == doc[base + i]) sum += (w[j] = std::exp(w[j] - top));
        for (std::size_t e = 0; e < d; ++e) {
          double acc = 0;
          for (std::size_t j = 0; j < n; ++j)
            if (doc[base + j] == doc[base + i]) acc += w[j] * double(v(b, j, hh, e));
          o(b, i, hh, e) = float(acc / sum);
        }
      }
}

}  // namespace

constexpr const char* kUsage =
    "usage: mpiexec -n N attention_usp_documents [r]\n"
    "  USP over packed documents of different lengths, the ring axis cut by Blocks (docs/attention.md).\n"
    "  r >= 1 dividing N: ring ranks (default: dsp::mesh_shape<2>(N)[0]).";

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
    std::size_t ring_ranks = 0;
    if (!attention::count_arg(argc, argv, 1, 1, std::size_t(dsp::mesh_shape<2>(n)[0]), ring_ranks, "r",
                              comm.rank() == 0)) {
      Kokkos::finalize();
      MPI_Finalize();
      return 2;
    }
    const int r = int(std::min<std::size_t>(ring_ranks, std::size_t(n) + 1));
    if (n % r != 0) {
      if (comm.rank() == 0) std::printf("the ring axis r = %zu must divide the %d ranks\n", ring_ranks, n);
      failed = 1;
    } else {
      // The packed documents, and the ring's blocks: whole documents, cut where the running count comes
      // closest to an even share (every rank computes the same sizes).
      const std::vector<std::size_t> lengths{7, 3, 12, 1, 9, 5, 2, 8};
      std::vector<std::size_t> doc, sizes(std::size_t(r), 0);
      for (std::size_t k = 0; k < lengths.size(); ++k) doc.insert(doc.end(), lengths[k], k);
      const std::size_t S = doc.size(), B = 2, H = 4, d = 8;
      std::size_t at = 0;
      for (std::size_t k = 0, ring = 0; k < lengths.size(); ++k) {
        const double share = double(S) * double(ring + 1) / double(r);
        if (ring + 1 < std::size_t(r) && double(at) + 0.5 * double(lengths[k]) > share) ++ring;
        sizes[ring] += lengths[k], at += lengths[k];
      }
      Mesh mesh{comm, {r, n / r}};
      Act<Seq> q0{mesh, {B, S, H, d}, sizes}, k0{mesh, {B, S, H, d}, sizes}, v0{mesh, {B, S, H, d}, sizes};
      dsp::fill(q0, [](const G4& g) { return input(0, g); });
      dsp::fill(k0, [](const G4& g) { return input(1, g); });
      dsp::fill(v0, [](const G4& g) { return input(2, g); });
      for (std::size_t a = 0; a < 2; ++a) Comm(mesh.axis(a)).reset();

      // Ulysses along axis 1 (the outputs keep the inputs' sizes); the ring axis does not move.
      auto [q, k, v] = dsp::redistribute<Heads>(dsp::batch(q0, k0, v0));
      const std::size_t s_i = q.local_extents()[1], h = q.local_extents()[2];
      Act<Heads> o1{mesh, q.global_extents(), sizes};
      masked(B, q.local_offsets()[1], s_i, h, d, doc, q.local(), k.local(), v.local(), o1.local());
      auto o = dsp::redistribute<Seq>(o1);  // back along axis 1
      const std::size_t ring_sent = mesh.axis(0).counts().bytes_sent;
      const std::size_t dsp_sent = ring_sent + mesh.axis(1).counts().bytes_sent;

      // The same masked attention on one rank (heads offset: each rank checks its own block).
      Block fq("q", B, S, H, d), fk("k", B, S, H, d), fv("v", B, S, H, d), fo("o", B, S, H, d);
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t s = 0; s < S; ++s)
          for (std::size_t hh = 0; hh < H; ++hh)
            for (std::size_t e = 0; e < d; ++e)
              fq(b, s, hh, e) = input(0, {b, s, hh, e}), fk(b, s, hh, e) = input(1, {b, s, hh, e}),
                           fv(b, s, hh, e) = input(2, {b, s, hh, e});
      masked(B, 0, S, H, d, doc, fq, fk, fv, fo);
      double err = 0;
      dsp::for_each(o, [&](const G4& g, const float& x) {
        err = std::max(err, double(std::abs(x - fo(g[0], g[1], g[2], g[3]))));
      });
      MPI_Allreduce(MPI_IN_PLACE, &err, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

      // Closed form: q, k, v but this rank's heads of its part of the ring block, then the output's
      // block but its own part; nothing on the ring axis.
      const std::size_t s_ij = q0.local_extents()[1];
      const std::size_t closed = sizeof(float) * B * d * (3 * s_ij * (H - h) + (s_i - s_ij) * h);
      int wrong = dsp_sent != closed || ring_sent != 0;
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      if (comm.rank() == 0) {
        std::printf("USP over %zu packed documents on %d ranks, mesh {%d, %d}: S %zu, ring blocks", lengths.size(), n,
                    r, n / r, S);
        for (std::size_t x : sizes) std::printf(" %zu", x);
        std::printf("; rank 0 sent %zu bytes (closed form %zu), %zu on the ring axis; max |error| vs one rank %.2e\n",
                    dsp_sent, closed, ring_sent, err);
      }
      failed = err > 1e-5 || wrong;
    }
    if (failed && comm.rank() == 0) std::printf("FAILED\n");
  }
  Kokkos::finalize();
  MPI_Finalize();
  return failed;
}
