// SPDX-License-Identifier: BSD-3-Clause
// fft3d_cost_table: what one forward 3-D FFT of N^3 complex doubles
// communicates per rank, slab against pencil, from dsp's exact cost model
// (dsp::redistribute_plan<...>::cost), for N = 1024 and 4096 and P = 64 to
// 16384 ranks. Prints markdown. No MPI: the model is arithmetic.
//
//   slab    a plain communicator of P ranks: Sharded<0> -> Sharded<1>, one
//           all-to-all over all P ranks. Only min(N, P) ranks hold a plane:
//           once P > N0 the others sit idle through the whole transform, so
//           there is no slab decomposition over all P ranks.
//   pencil  the most square mesh P0 x P1 (P0 <= P1): Axes<S0, S1> ->
//           Axes<S0, S2> (an all-to-all over the P1 ranks of axis 1), then ->
//           Axes<S1, S2> (over the P0 ranks of axis 0).
//
// Bytes are what a rank sends to other ranks (its own chunk stays), the
// largest over all ranks (cost().max_bytes); messages are the peers a rank
// sends a non-empty chunk to, summed over the all-to-alls.
#include <dsp/dsp.hpp>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using S0 = dsp::Sharded<0>;
using S1 = dsp::Sharded<1>;
using S2 = dsp::Sharded<2>;
using SlabPlan = dsp::redistribute_plan<S0, S1, 3>;
using PencilXY = dsp::redistribute_plan<dsp::Axes<S0, S1>, dsp::Axes<S0, S2>, 3>;
using PencilYZ = dsp::redistribute_plan<dsp::Axes<S0, S2>, dsp::Axes<S1, S2>, 3>;
using E = std::array<std::size_t, 3>;
constexpr std::size_t kElem = 16;  // complex double

// The model is constexpr: 64^3 on 4 ranks, each rank keeps 1/4 of its 1 MiB slab and sends 3/4.
static_assert(SlabPlan::cost(E{64, 64, 64}, kElem, 4, 0).max_bytes == 64 * 64 * 64 * kElem / 4 * 3 / 4);
static_assert(SlabPlan::collectives() == 1 && PencilXY::collectives() == 1 && PencilYZ::collectives() == 1);

std::string bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char s[32];
  std::snprintf(s, sizeof s, b < 10 ? "%.2f %s" : b < 100 ? "%.1f %s" : "%.0f %s", b, unit[u]);
  return s;
}

/// Peers of rank `p` (of an axis of n ranks) that get a non-empty chunk in a
/// switch i -> j, where `gi` and `gj` are the extents the axis splits and
/// `rest` the product of the other extents of the block.
std::size_t peers(std::size_t gi, std::size_t gj, std::size_t rest, std::size_t n, std::size_t p) {
  const dsp::Partition pi{gi, n}, pj{gj, n};
  if (pi.count(p) == 0 || rest == 0) return 0;
  std::size_t c = 0;
  for (std::size_t q = 0; q < n; ++q) c += q != p && pj.count(q) > 0 ? 1 : 0;
  return c;
}

struct Row {
  std::size_t P;
  // slab
  std::size_t slab_busy, slab_bytes, slab_msgs;
  // pencil
  int p0, p1;
  std::size_t pen_bytes, pen_msgs, pen_collectives;
};

Row row(std::size_t N, std::size_t P) {
  const E e{N, N, N};
  Row r{};
  r.P = P;
  // Slab: the busiest rank is rank 0 (it holds a plane whenever anyone does).
  const auto s = SlabPlan::cost(e, kElem, P, 0);
  r.slab_busy = std::min(N, P);
  r.slab_bytes = s.max_bytes;
  r.slab_msgs = peers(N, N, N, P, 0);
  // Pencil: the most square factorization, P0 <= P1.
  int p0 = 1;
  for (std::size_t a = 1; a * a <= P; ++a)
    if (P % a == 0) p0 = int(a);
  const int p1 = int(P) / p0;
  r.p0 = p0, r.p1 = p1;
  const std::array<int, 2> shape{p0, p1}, origin{0, 0};
  const auto a = PencilXY::cost(e, kElem, shape, origin), b = PencilYZ::cost(e, kElem, shape, origin);
  // These N and P divide evenly (powers of two, P0, P1 <= N): every rank sends
  // the same, so the two steps' maxima add up to the busiest rank's total.
  if (a.bytes != a.max_bytes || b.bytes != b.max_bytes) std::fprintf(stderr, "warning: uneven pencil cost\n");
  r.pen_bytes = a.max_bytes + b.max_bytes;
  r.pen_collectives = a.collectives + b.collectives;
  const std::size_t n0 = dsp::Partition{N, std::size_t(p0)}.count(0);  // rank (0, 0)'s block: dim 0 over axis 0
  const std::size_t n2 = dsp::Partition{N, std::size_t(p1)}.count(0);  // dim 2 over axis 1 after step 1
  r.pen_msgs = peers(N, N, n0 * N, std::size_t(p1), 0) + peers(N, N, N * n2, std::size_t(p0), 0);
  return r;
}

void table(std::size_t N) {
  const double total = double(N) * double(N) * double(N) * kElem;
  std::printf("\n### %zu^3 complex double (%s in all), one forward transform\n\n", N, bytes(total).c_str());
  std::printf(
      "| P | slab: ranks with a plane | slab: sent per rank | slab: messages per rank | slab: bytes per message "
      "| pencil mesh | pencil: sent per rank | pencil: all-to-alls | pencil: messages per rank | pencil: mean bytes "
      "per "
      "message |\n");
  std::printf("|---:|---|---:|---:|---:|---|---:|---:|---:|---:|\n");
  for (std::size_t P = 64; P <= 16384; P *= 2) {
    const Row r = row(N, P);
    std::string busy = std::to_string(r.slab_busy);
    if (r.slab_busy < P)
      busy += " of " + std::to_string(P) + ": **no slab decomposition**, " + std::to_string(P - r.slab_busy) + " idle";
    else busy += " (all)";
    std::printf("| %zu | %s | %s | %zu | %s | %d x %d | %s | %zu | %zu | %s |\n", P, busy.c_str(),
                bytes(double(r.slab_bytes)).c_str(), r.slab_msgs,
                bytes(r.slab_msgs ? double(r.slab_bytes) / double(r.slab_msgs) : 0).c_str(), r.p0, r.p1,
                bytes(double(r.pen_bytes)).c_str(), r.pen_collectives, r.pen_msgs,
                bytes(r.pen_msgs ? double(r.pen_bytes) / double(r.pen_msgs) : 0).c_str());
  }
}

}  // namespace

int main() {
  std::printf("Slab plan: %s\nPencil plans: %s; then %s\n", SlabPlan::text().c_str(), PencilXY::text().c_str(),
              PencilYZ::text().c_str());
  table(1024);
  table(4096);
  return 0;
}
