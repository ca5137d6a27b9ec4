// SPDX-License-Identifier: BSD-3-Clause
// Unified sequence parallelism (USP: Ulysses on one mesh axis, ring attention
// on the other; docs/attention.md, "USP"). The ranks form a mesh {r, u}; q
// [B, S, H, d] and, with grouped-query attention, k, v [B, S, H_kv, d] (H = 2
// H_kv, H_kv = u) arrive with the sequence cut over axis 0, then each block
// over axis 1. A Ulysses switch along axis 1 trades the inner sequence cut for
// the heads, q, k and v in one call (a batch of different extents,
// redistribute<Axes<Sharded<1>, Sharded<2>>>, one step on axis 1): rank (i, j)
// then holds sequence block i of heads block j. Along axis 0 the k and v blocks then
// pass around the ring (r - 1 passes, point to point on axis 0's
// communicator: dsp has no ring primitive), each rank merging every block
// into its queries' attention with an online softmax. The output switches
// back along axis 1. Checked against the same attention on one rank; the bytes
// each rank sends (dsp's, counted, and the ring's) against their closed form.
//
//   mpiexec -n 4 ./attention_usp [S] [r]      (defaults: 23, the balanced mesh's first axis)
#include "../help.hpp"
#include "attend.hpp"

#include <dsp/comm/counting.hpp>
#include <dsp/mpi.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

using Comm = dsp::CountingCommunicator<dsp::MpiCommunicator>;
using Mesh = dsp::Mesh<2, Comm>;
using Seq = dsp::Axes<dsp::Sharded<1>, dsp::Sharded<1>>;   // the sequence over axis 0, then axis 1
using Ring = dsp::Axes<dsp::Sharded<1>, dsp::Sharded<2>>;  // sequence block i, heads block j
template <class L>
using Act = dsp::DistTensor<float, 4, L, Mesh>;
using G4 = std::array<std::size_t, 4>;
using Block = Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>;
using Buffer = std::vector<float>;

namespace {

float input(int which, const G4& g) {
  return float(std::sin(0.03 * double(g[0] * 11 + g[1] * 5 + g[2] * 3 + g[3]) * double(which + 1) + which));
}

}  // namespace

constexpr const char* kUsage =
    "usage: mpiexec -n N attention_usp [S] [r]\n"
    "  USP: ring passes over mesh axis 0 (r ranks), Ulysses switches over axis 1 (docs/attention.md).\n"
    "  S: sequence length (default 23), r >= 1 dividing N: ring ranks (default: dsp::mesh_shape<2>(N)[0]).";

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
    std::size_t S = 0, ring_ranks = 0;
    const bool speak = comm.rank() == 0;
    if (!attention::count_arg(argc, argv, 1, 0, 23, S, "S", speak) ||
        !attention::count_arg(argc, argv, 2, 1, std::size_t(dsp::mesh_shape<2>(n)[0]), ring_ranks, "r", speak)) {
      Kokkos::finalize();
      MPI_Finalize();
      return 2;
    }
    const int r = int(std::min<std::size_t>(ring_ranks, std::size_t(n) + 1));
    if (n % r != 0) {
      if (comm.rank() == 0) std::printf("the ring axis r = %zu must divide the %d ranks\n", ring_ranks, n);
      failed = 1;
    } else {
      // One key/value head per Ulysses rank, two query heads each (GQA: query head h reads head h / 2).
      const std::size_t B = 2, h_kv = std::size_t(n / r), group = 2, H = group * h_kv, d = 8;
      Mesh mesh{comm, {r, n / r}};
      Act<Seq> q0{mesh, {B, S, H, d}}, k0{mesh, {B, S, h_kv, d}}, v0{mesh, {B, S, h_kv, d}};
      dsp::fill(q0, [](const G4& g) { return input(0, g); });
      dsp::fill(k0, [](const G4& g) { return input(1, g); });
      dsp::fill(v0, [](const G4& g) { return input(2, g); });
      for (std::size_t a = 0; a < 2; ++a) Comm(mesh.axis(a)).reset();

      // Ulysses along axis 1: the inner sequence cut becomes a heads cut (q's H and k's, v's H_kv).
      auto [q, k, v] = dsp::redistribute<Ring>(dsp::batch(q0, k0, v0));
      const std::size_t h = q.local_extents()[2], hk = k.local_extents()[2], s_i = q.local_extents()[1];

      // The ring along axis 0: r - 1 passes of k and v, each merged on arrival.
      const MPI_Comm ring = mesh.axis(0).inner().native();
      const int i = mesh.coords()[0];
      const dsp::Partition part{S, std::size_t(r)};
      // The blocks in flight, row-major [B, nk, h, d] for the block's nk positions (block 0 is the longest).
      const std::size_t most = B * part.count(0) * hk * d;
      Buffer kb(k.local().data(), k.local().data() + k.local().size()),
          vb(v.local().data(), v.local().data() + v.local().size());
      Buffer kn(most), vn(most);
      kb.resize(most), vb.resize(most);
      std::size_t nk = s_i, ring_sent = 0;
      attention::Online state(B, s_i, h, d, group);
      for (int pass = 0; pass < r; ++pass) {
        state.merge(q.local(), kb.data(), vb.data(), nk);
        if (pass + 1 == r) break;
        const int to = (i + 1) % r, from = (i + r - 1) % r;
        const std::size_t next = part.count(std::size_t((i - pass - 1 + 2 * r) % r));  // the block arriving
        const int out_n = int(B * nk * hk * d), in_n = int(B * next * hk * d);
        MPI_Sendrecv(kb.data(), out_n, MPI_FLOAT, to, 0, kn.data(), in_n, MPI_FLOAT, from, 0, ring, MPI_STATUS_IGNORE);
        MPI_Sendrecv(vb.data(), out_n, MPI_FLOAT, to, 1, vn.data(), in_n, MPI_FLOAT, from, 1, ring, MPI_STATUS_IGNORE);
        ring_sent += 2 * std::size_t(out_n) * sizeof(float);
        std::swap(kb, kn), std::swap(vb, vn);
        nk = next;
      }
      Act<Ring> o1{mesh, q.global_extents()};
      state.finish(o1.local());
      auto o = dsp::redistribute<Seq>(o1);  // back along axis 1
      const std::size_t dsp_sent = mesh.axis(0).counts().bytes_sent + mesh.axis(1).counts().bytes_sent;

      // The same attention on one rank.
      Block fq("q", B, S, H, d), fk("k", B, S, h_kv, d), fv("v", B, S, h_kv, d), fo("o", B, S, H, d);
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t s = 0; s < S; ++s)
          for (std::size_t e = 0; e < d; ++e) {
            for (std::size_t hh = 0; hh < H; ++hh) fq(b, s, hh, e) = input(0, {b, s, hh, e});
            for (std::size_t hh = 0; hh < h_kv; ++hh)
              fk(b, s, hh, e) = input(1, {b, s, hh, e}), fv(b, s, hh, e) = input(2, {b, s, hh, e});
          }
      attention::attend(
          B, S, H, d, S, fq,
          [&](std::size_t b, std::size_t j, std::size_t hh, std::size_t e) { return fk(b, j, hh / group, e); },
          [&](std::size_t b, std::size_t j, std::size_t hh, std::size_t e) { return fv(b, j, hh / group, e); }, fo);
      double err = 0;
      dsp::for_each(o, [&](const G4& g, const float& x) {
        err = std::max(err, double(std::abs(x - fo(g[0], g[1], g[2], g[3]))));
      });
      MPI_Allreduce(MPI_IN_PLACE, &err, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

      // Closed forms. dsp: q, k, v but this rank's heads of its block, then the output's block but its
      // own sequence part. The ring: every k and v block of its column but the one after its own.
      const std::size_t s_ij = q0.local_extents()[1];
      const std::size_t dsp_closed =
          sizeof(float) * B * d * (s_ij * (H - h) + 2 * s_ij * (h_kv - hk) + (s_i - s_ij) * h);
      const std::size_t ring_closed =
          r > 1 ? 2 * sizeof(float) * B * d * hk * (S - part.count(std::size_t((i + 1) % r))) : 0;
      int wrong = dsp_sent != dsp_closed || ring_sent != ring_closed;
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      if (comm.rank() == 0)
        std::printf(
            "USP on %d ranks, mesh {%d, %d} (ring x Ulysses): S %zu, H %zu, H_kv %zu; rank 0 sent %zu bytes "
            "through dsp (closed form %zu) and %zu around the ring (closed form %zu); max |error| vs one rank "
            "%.2e\n",
            n, r, n / r, S, H, h_kv, dsp_sent, dsp_closed, ring_sent, ring_closed, err);
      failed = err > 1e-5 || wrong;
    }
    if (failed && comm.rank() == 0) std::printf("FAILED\n");
  }
  Kokkos::finalize();
  MPI_Finalize();
  return failed;
}
