// SPDX-License-Identifier: BSD-3-Clause
// Causal ring attention on the zigzag layout (docs/attention.md, "Zigzag").
// q, k, v [B, S, H, d] arrive with the sequence Sharded<1> (as a loader cuts
// it); one redistribute each moves them to dsp::Zigzag<1>: rank r holds
// chunks r and 2N-1-r of the sequence in 2N chunks. The k and v blocks then
// pass around the ring (N - 1 passes, point to point: dsp has no ring
// primitive), each rank merging every block into its queries with an online
// softmax under the causal mask (key position <= query position), and the
// output goes back to Sharded<1>. Under Sharded<1> the last rank would
// compute 2N - 1 times the first rank's query-key pairs; under Zigzag every
// rank computes the same number when 2N divides S (checked). Checked against
// the same causal attention on one rank; the bytes each rank sends (dsp's,
// counted, and the ring's) against their closed form.
//
//   mpiexec -n 4 ./attention_zigzag [S]      (default 24; B = 2, H = 3, d = 8)
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
template <class L>
using Act = dsp::DistTensor<float, 4, L, Comm>;
using G4 = std::array<std::size_t, 4>;
using Block = Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>;
using Piece = dsp::detail::Piece;

namespace {

float input(int which, const G4& g) {
  return float(std::cos(0.05 * double(g[0] * 7 + g[1] * 3 + g[2] * 5 + g[3]) * double(which + 2) - which));
}

/// The global sequence position of row j of rank r's zigzag block.
std::size_t position(const dsp::detail::Cut& cut, std::size_t r, std::size_t j) {
  Piece p[2];
  cut.pieces(r, p);
  return j < p[0].count ? p[0].offset + j : p[1].offset + (j - p[0].count);
}

/// The causal query-key pairs of the rows a block holds (one batch and head).
std::size_t causal_pairs(std::span<const Piece> rows) {
  std::size_t pairs = 0;
  for (const Piece& p : rows)
    for (std::size_t i = p.offset; i < p.offset + p.count; ++i) pairs += i + 1;
  return pairs;
}

}  // namespace

constexpr const char* kUsage =
    "usage: mpiexec -n N attention_zigzag [S]\n"
    "  Causal ring attention on a Zigzag sequence layout (docs/attention.md).\n"
    "  S: sequence length (default 24); B = 2, H = 3, d = 8.";

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
    const std::size_t me = std::size_t(comm.rank());
    std::size_t S = 0;
    if (!attention::count_arg(argc, argv, 1, 0, 24, S, "S", me == 0)) {
      Kokkos::finalize();
      MPI_Finalize();
      return 2;
    }
    const std::size_t B = 2, H = 3, d = 8;
    Act<dsp::Sharded<1>> q0{comm, {B, S, H, d}}, k0{comm, {B, S, H, d}}, v0{comm, {B, S, H, d}};
    dsp::fill(q0, [](const G4& g) { return input(0, g); });
    dsp::fill(k0, [](const G4& g) { return input(1, g); });
    dsp::fill(v0, [](const G4& g) { return input(2, g); });
    comm.reset();

    // To the zigzag layout: one exchange per tensor.
    auto q = dsp::redistribute<dsp::Zigzag<1>>(q0);
    auto k = dsp::redistribute<dsp::Zigzag<1>>(k0);
    auto v = dsp::redistribute<dsp::Zigzag<1>>(v0);
    const dsp::detail::Cut cut = q.cut();
    const std::size_t sq = q.local_extents()[1];

    // The ring: N - 1 passes of k and v, each merged on arrival under the causal mask.
    const MPI_Comm ring = comm.inner().native();
    std::size_t most = 0;  // the longest block (rank 0's)
    for (std::size_t r = 0; r < std::size_t(n); ++r) most = std::max(most, cut.count(r));
    std::vector<float> kb(k.local().data(), k.local().data() + k.local().size()),
        vb(v.local().data(), v.local().data() + v.local().size());
    kb.resize(B * most * H * d), vb.resize(B * most * H * d);
    std::vector<float> kn(kb.size()), vn(vb.size());
    std::size_t owner = me, ring_sent = 0, pairs = 0;  // whose block is in kb, vb
    attention::Online state(B, sq, H, d);
    for (int pass = 0; pass < n; ++pass) {
      const std::size_t nk = cut.count(owner);
      pairs += state.merge(q.local(), kb.data(), vb.data(), nk, [&](std::size_t i, std::size_t j) {
        return position(cut, owner, j) <= position(cut, me, i);
      });
      if (pass + 1 == n) break;
      const int to = int((me + 1) % std::size_t(n)), from = int((me + std::size_t(n) - 1) % std::size_t(n));
      const std::size_t next = (owner + std::size_t(n) - 1) % std::size_t(n);
      const int out_n = int(B * nk * H * d), in_n = int(B * cut.count(next) * H * d);
      MPI_Sendrecv(kb.data(), out_n, MPI_FLOAT, to, 0, kn.data(), in_n, MPI_FLOAT, from, 0, ring, MPI_STATUS_IGNORE);
      MPI_Sendrecv(vb.data(), out_n, MPI_FLOAT, to, 1, vn.data(), in_n, MPI_FLOAT, from, 1, ring, MPI_STATUS_IGNORE);
      ring_sent += 2 * std::size_t(out_n) * sizeof(float);
      std::swap(kb, kn), std::swap(vb, vn);
      owner = next;
    }
    Act<dsp::Zigzag<1>> oz{comm, q.global_extents()};
    state.finish(oz.local());
    auto o = dsp::redistribute<dsp::Sharded<1>>(oz);
    const std::size_t dsp_sent = comm.counts().bytes_sent;

    // The same causal attention on one rank: each query row over the keys up to it.
    Block fq("q", B, S, H, d), fk("k", B, S, H, d), fv("v", B, S, H, d), fo("o", B, S, H, d);
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t s = 0; s < S; ++s)
        for (std::size_t h = 0; h < H; ++h)
          for (std::size_t e = 0; e < d; ++e)
            fq(b, s, h, e) = input(0, {b, s, h, e}), fk(b, s, h, e) = input(1, {b, s, h, e}),
                        fv(b, s, h, e) = input(2, {b, s, h, e});
    for (std::size_t i = 0; i < S; ++i) {
      auto one = [&](std::size_t b, std::size_t, std::size_t h, std::size_t e) { return fq(b, i, h, e); };
      auto out = [&](std::size_t b, std::size_t, std::size_t h, std::size_t e) -> float& { return fo(b, i, h, e); };
      attention::attend(B, 1, H, d, i + 1, one, fk, fv, out);
    }
    double err = 0;
    dsp::for_each(
        o, [&](const G4& g, const float& x) { err = std::max(err, double(std::abs(x - fo(g[0], g[1], g[2], g[3])))); });
    MPI_Allreduce(MPI_IN_PLACE, &err, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    // Causal work per rank: zigzag against the sequence cut in N blocks.
    Piece mine[2];
    cut.pieces(me, mine);
    const dsp::Partition even{S, std::size_t(n)};
    const Piece block{even.offset(me), even.count(me)};
    std::size_t zig[2] = {pairs, pairs}, shard[2] = {causal_pairs({&block, 1}), causal_pairs({&block, 1})};
    MPI_Allreduce(MPI_IN_PLACE, &zig[0], 1, MPI_UNSIGNED_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &zig[1], 1, MPI_UNSIGNED_LONG, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &shard[0], 1, MPI_UNSIGNED_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &shard[1], 1, MPI_UNSIGNED_LONG, MPI_MAX, MPI_COMM_WORLD);

    // Closed forms. dsp: q, k, v to zigzag, then o back: each tensor's block but the part this rank
    // keeps (its Sharded block's overlap with its zigzag chunks). The ring: every k and v block but
    // the one that arrives last (the next rank's).
    std::size_t keep = 0;
    for (const Piece& p : mine) {
      const std::size_t lo = std::max(p.offset, block.offset),
                        hi = std::min(p.offset + p.count, block.offset + block.count);
      keep += hi > lo ? hi - lo : 0;
    }
    const std::size_t row = sizeof(float) * B * H * d;
    const std::size_t dsp_closed = row * (3 * (block.count - keep) + (cut.count(me) - keep));
    const std::size_t ring_closed = n > 1 ? 2 * row * (S - cut.count((me + 1) % std::size_t(n))) : 0;
    int wrong = dsp_sent != dsp_closed || ring_sent != ring_closed || pairs != causal_pairs({mine, 2});
    if (S % (2 * std::size_t(n)) == 0) wrong |= zig[0] != zig[1];  // equal causal work
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (me == 0)
      std::printf(
          "causal ring attention on Zigzag<1>, %d ranks: S %zu, H %zu; query-key pairs per rank (per batch and "
          "head) %zu to %zu "
          "(Sharded<1>: %zu to %zu); rank 0 sent %zu bytes through dsp (closed form %zu) and %zu around the "
          "ring (closed form %zu); max |error| vs one rank %.2e\n",
          n, S, H, zig[0], zig[1], shard[0], shard[1], dsp_sent, dsp_closed, ring_sent, ring_closed, err);
    failed = err > 1e-5 || wrong;
    if (failed && me == 0) std::printf("FAILED\n");
  }
  Kokkos::finalize();
  MPI_Finalize();
  return failed;
}
