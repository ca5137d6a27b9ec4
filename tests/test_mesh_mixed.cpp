// SPDX-License-Identifier: BSD-3-Clause
// A batch of tensors of different extents on a mesh (GQA's Q with its K and
// V under USP: Ulysses on one axis, the ring on the other): every pair of a
// set of 2-axis layouts (Sharded, Zigzag, Replicated) on every 2-axis mesh of
// 1-6 ranks, exact, the inputs untouched, each step one exchange of the whole
// batch, the counted bytes the sum of each tensor's cost; element types
// mixed, Blocks, a wire, into existing tensors, the identity plan; and the
// refusals (Partial, split-phase, ranks that disagree) on every rank.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <dsp/comm/counting.hpp>
#include <dsp/engine/recut.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

using namespace dsp_test;
using dsp::Axes;
using dsp::Blocks;
using dsp::Replicated;
using dsp::Sharded;
using dsp::Zigzag;

namespace {

using Counted = dsp::CountingCommunicator<dsp::MpiCommunicator>;
using CMesh = dsp::Mesh<2, Counted>;
using E4 = std::array<std::size_t, 4>;

/// Tensor `which` of a batch at global index g of extents e.
double val(const E4& e, const E4& g, int which) { return double(linear(g, e)) * 0.5 + 1000.0 * which + 1.0; }

template <class X>
std::size_t wrong(const X& x, const E4& e, int which) {
  return sum_all(dsp::count_mismatches(x, [&](const E4& g) { return val(e, g, which); }));
}

template <class... L>
struct List {};
// [B, S, heads, d]: the sequence over both axes (USP), Ulysses' heads on axis 1, the ring's Zigzag,
// heads over every rank, gathered.
using Layouts = List<Axes<Sharded<1>, Sharded<1>>, Axes<Sharded<1>, Sharded<2>>, Axes<Replicated, Sharded<2>>,
                     Axes<Zigzag<1>, Sharded<1>>, Axes<Zigzag<1>, Sharded<2>>, Axes<Sharded<2>, Sharded<2>>,
                     Axes<Replicated, Replicated>>;

/// From -> To of the batch Q [B, S, H, d], K [B, S, H_kv, d] and V (its
/// extents `ev`), on a counting mesh.
template <class From, class To>
void check_pair(const CMesh& m, const E4& eq, const E4& ek, const E4& ev) {
  using P = dsp::redistribute_plan<From, To, 4>;
  CAPTURE(P::text());
  using X = dsp::DistTensor<double, 4, From, CMesh>;
  X q{m, eq}, k{m, ek}, v{m, ev};
  dsp::fill(q, [&](const E4& g) { return val(eq, g, 0); });
  dsp::fill(k, [&](const E4& g) { return val(ek, g, 1); });
  dsp::fill(v, [&](const E4& g) { return val(ev, g, 2); });
  for (std::size_t a = 0; a < 2; ++a) Counted(m.axis(a)).reset();
  auto [qo, ko, vo] = dsp::redistribute<To>(dsp::batch(q, k, v));
  std::size_t bytes = 0;
  for (std::size_t a = 0; a < 2; ++a) bytes += m.axis(a).counts().bytes_sent;
  CHECK(wrong(qo, eq, 0) == 0);
  CHECK(wrong(ko, ek, 1) == 0);
  CHECK(wrong(vo, ev, 2) == 0);
  CHECK(wrong(q, eq, 0) + wrong(k, ek, 1) + wrong(v, ev, 2) == 0);  // the inputs untouched
  const auto cost = [&](const E4& e) { return P::cost(e, sizeof(double), m.shape(), m.coords()); };
  CHECK(bytes == cost(eq).bytes + cost(ek).bytes + cost(ev).bytes);
  // One collective per communicating step for the whole batch, or each tensor's own where each moves
  // without copies: never more than one per tensor and step.
  std::size_t collectives = 0;
  for (std::size_t a = 0; a < 2; ++a) collectives += m.axis(a).counts().collectives();
  CHECK(collectives <= cost(eq).collectives * 3);
  // Into the existing tensors, once more (warm).
  dsp::DistTensor<double, 4, To, CMesh> q2{m, eq}, k2{m, ek}, v2{m, ev};
  dsp::redistribute<To>(dsp::batch(q, k, v), dsp::batch(q2, k2, v2));
  CHECK(wrong(q2, eq, 0) + wrong(k2, ek, 1) + wrong(v2, ev, 2) == 0);
}

template <class... L>
void all_pairs(const CMesh& m, const E4& eq, const E4& ek, const E4& ev, List<L...>) {
  (
      [&]<class From>() {
    ([&]<class To>() { check_pair<From, To>(m, eq, ek, ev); }.template operator()<L>(), ...);
      }.template operator()<L>(),
      ...);
}

}  // namespace

TEST_CASE("a batch of different extents on a mesh: every layout pair, every mesh shape, exact at each tensor's cost") {
  Counted cw{world()};
  const std::size_t n = std::size_t(world().size());
  // Each setting: the packed exchange (point to point or one all-to-all-v), each tensor's own typed or
  // point-to-point exchange.
  for (const auto setting : {dsp::SwitchAlgorithm::automatic, dsp::SwitchAlgorithm::alltoallv,
                             dsp::SwitchAlgorithm::pairwise, dsp::SwitchAlgorithm::datatypes}) {
    dsp::set_switch_algorithm(setting);
    CAPTURE(dsp::to_string(setting));
    for (const auto& s : shapes2(world().size())) {
      CMesh m{cw, s};
      CAPTURE(s);
      const std::size_t S = 4 * n + 3, H = 2 * n + 2, Hkv = std::size_t(s[1]) > 1 ? std::size_t(s[1]) / 2 + 1 : 1;
      // Q, K and V of GQA; a V of another sequence length (an empty block where it is shorter than the ranks).
      all_pairs(m, E4{2, S, H, 3}, E4{2, S, Hkv, 3}, E4{2, S, Hkv, 3}, Layouts{});
      if (setting == dsp::SwitchAlgorithm::automatic)
        all_pairs(m, E4{1, S, H, 2}, E4{1, S, Hkv, 2}, E4{1, n > 1 ? n - 1 : 1, Hkv + 1, 2}, Layouts{});
    }
  }
  dsp::set_switch_algorithm(dsp::SwitchAlgorithm::automatic);
}

TEST_CASE("a packed batch's chunks as messages under the eager limit, cut alike on both sides") {
  using dsp::detail::chunk_piece_bytes;
  CHECK(chunk_piece_bytes(5) == 5);
  CHECK(chunk_piece_bytes(3968) == 3968);
  CHECK(chunk_piece_bytes(12288) == 3072);  // 24 KiB layer at 2 ranks: 4 messages, not 3 of 4096
  CHECK(chunk_piece_bytes(3969) == 1323);   // not 2: 3969 is odd
  CHECK(chunk_piece_bytes(16 * 3968) == 3968);
  CHECK(chunk_piece_bytes(16 * 3968 + 4) == 16 * 3968 + 4);  // past 16 messages: whole
  // A batch whose chunks take several messages, on every mesh shape: exact, each tensor's cost.
  Counted cw{world()};
  for (const auto& s : shapes2(world().size())) {
    CMesh m{cw, s};
    CAPTURE(s);
    check_pair<Axes<Sharded<1>, Sharded<1>>, Axes<Sharded<1>, Sharded<2>>>(m, E4{1, 64, 8, 16}, E4{1, 64, 2, 16},
                                                                           E4{1, 64, 2, 16});
  }
}

TEST_CASE("a large mixed batch moves tensor by tensor, each its own exchange, exact at each tensor's cost") {
  // Q's block alone is 8 MiB on every rank: past kSeparateBatchBytes, so each tensor runs its own
  // exchange (packed from and into the tensors, or copy-free), under each setting.
  Counted cw{world()};
  const std::size_t n = std::size_t(world().size());
  const E4 eq{1, 2048 * n, 16, 32}, ek{1, 2048 * n, 4, 32};
  for (const auto setting : {dsp::SwitchAlgorithm::automatic, dsp::SwitchAlgorithm::alltoallv}) {
    dsp::set_switch_algorithm(setting);
    CAPTURE(dsp::to_string(setting));
    CMesh m{cw, {1, int(n)}};
    check_pair<Axes<Sharded<1>, Sharded<1>>, Axes<Sharded<1>, Sharded<2>>>(m, eq, ek, ek);
    check_pair<Axes<Sharded<1>, Sharded<2>>, Axes<Sharded<1>, Sharded<1>>>(m, eq, ek, ek);
  }
  dsp::set_switch_algorithm(dsp::SwitchAlgorithm::automatic);
}

TEST_CASE("a mixed batch on a mesh: element types, Blocks, a wire, the identity plan") {
  Counted cw{world()};
  const std::size_t n = std::size_t(world().size());
  using SS = Axes<Sharded<1>, Sharded<1>>;
  using SH = Axes<Sharded<1>, Sharded<2>>;
  for (const auto& s : shapes2(world().size())) {
    CMesh m{cw, s};
    CAPTURE(s);
    const E4 eq{2, 3 * n + 1, 2 * n, 3}, ek{2, 3 * n + 1, n, 3};
    // Element types differ: float Q, double K, int16 masks of yet other extents.
    dsp::DistTensor<float, 4, SS, CMesh> q{m, eq};
    dsp::DistTensor<double, 4, SS, CMesh> k{m, ek};
    const E4 em{2, 3 * n + 1, 1, 1};
    dsp::DistTensor<std::int16_t, 4, SS, CMesh> mk{m, em};
    dsp::fill(q, [&](const E4& g) { return float(linear(g, eq) % 200); });
    dsp::fill(k, [&](const E4& g) { return val(ek, g, 1); });
    dsp::fill(mk, [&](const E4& g) { return std::int16_t(g[0] * 100 + g[1]); });
    auto [qh, kh, mh] = dsp::redistribute<SH>(dsp::batch(q, k, mk));
    CHECK(sum_all(dsp::count_mismatches(qh, [&](const E4& g) { return float(linear(g, eq) % 200); })) == 0);
    CHECK(wrong(kh, ek, 1) == 0);
    CHECK(sum_all(dsp::count_mismatches(mh, [&](const E4& g) { return std::int16_t(g[0] * 100 + g[1]); })) == 0);
    // The identity plan copies each tensor's own block.
    auto [qs, ks, ms] = dsp::redistribute<SS>(dsp::batch(q, k, mk));
    CHECK(sum_all(dsp::count_mismatches(qs, [&](const E4& g) { return float(linear(g, eq) % 200); })) == 0);
    CHECK(wrong(ks, ek, 1) == 0);
    // On a bf16 wire: small integers travel exactly, at the wire's bytes (each tensor's cost on the wire).
    dsp::DistTensor<float, 4, SS, CMesh> kf{m, ek};
    dsp::fill(kf, [&](const E4& g) { return float(linear(g, ek) % 200); });
    for (std::size_t a = 0; a < 2; ++a) Counted(m.axis(a)).reset();
    auto [qw, kw] = dsp::redistribute<SH>(dsp::batch(q, kf), dsp::Wire::bf16);
    std::size_t bytes = 0;
    for (std::size_t a = 0; a < 2; ++a) bytes += m.axis(a).counts().bytes_sent;
    using PW = dsp::redistribute_plan<SS, SH, 4>;
    CHECK(bytes == PW::cost(eq, sizeof(float), m.shape(), m.coords(), dsp::Wire::bf16).bytes +
                       PW::cost(ek, sizeof(float), m.shape(), m.coords(), dsp::Wire::bf16).bytes);
    CHECK(sum_all(dsp::count_mismatches(qw, [&](const E4& g) { return float(linear(g, eq) % 200); })) == 0);
    CHECK(sum_all(dsp::count_mismatches(kw, [&](const E4& g) { return float(linear(g, ek) % 200); })) == 0);
    // Blocks on the ring axis (one size per rank of axis 0), shared by the batch: the sequence dim is
    // equal, the heads differ.
    std::vector<std::size_t> sizes(static_cast<std::size_t>(s[0]), 0);
    for (std::size_t i = 0; i < eq[1]; ++i) sizes[(i * 7) % sizes.size()] += 1;
    using BS = Axes<Blocks<1>, Sharded<1>>;
    using BH = Axes<Blocks<1>, Sharded<2>>;
    dsp::DistTensor<double, 4, BS, CMesh> qb{m, E4{2, eq[1], eq[2], 3}, sizes}, kb{m, ek, sizes};
    dsp::fill(qb, [&](const E4& g) { return val(eq, g, 0); });
    dsp::fill(kb, [&](const E4& g) { return val(ek, g, 1); });
    auto [qbh, kbh] = dsp::redistribute<BH>(dsp::batch(qb, kb));
    CHECK(qbh.block_sizes() == sizes);
    CHECK(wrong(qbh, eq, 0) + wrong(kbh, ek, 1) == 0);
    auto [qss, kss] = dsp::redistribute<SS>(dsp::batch(qbh, kbh));
    CHECK(wrong(qss, eq, 0) + wrong(kss, ek, 1) == 0);
  }
}

TEST_CASE("a mixed batch on a mesh: Partial, split-phase and disagreeing ranks raise on every rank") {
  const int me = world().rank();
  const std::size_t n = std::size_t(world().size());
  const std::array<int, 2> shape{1, int(n)};
  dsp::Mesh<2, dsp::MpiCommunicator> m{world(), shape};
  using SS = Axes<Sharded<1>, Sharded<1>>;
  using SH = Axes<Sharded<1>, Sharded<2>>;
  using M2 = dsp::Mesh<2, dsp::MpiCommunicator>;
  const E4 eq{2, n + 2, 2 * n, 2}, ek{2, n + 2, n, 2};
  dsp::DistTensor<double, 4, SS, M2> q{m, eq}, k{m, ek};
  dsp::fill(q, [&](const E4& g) { return val(eq, g, 0); });
  dsp::fill(k, [&](const E4& g) { return val(ek, g, 1); });
  SUBCASE("split-phase") {
    dsp::DistTensor<double, 4, SH, M2> qh{m, eq}, kh{m, ek};
    const std::string e = error_of([&] {
      auto h = dsp::start_redistribute<SH>(dsp::batch(q, k), dsp::batch(qh, kh));
      h.wait();
    });
    CHECK(e.find("a batch of different extents moves blocking") != std::string::npos);
    CHECK(e.find("not split-phase") != std::string::npos);
  }
  SUBCASE("a Partial placement") {
    using PS = Axes<dsp::Partial<>, Sharded<1>>;
    dsp::DistTensor<double, 4, PS, M2> qp{m, eq}, kp{m, ek};
    const std::string e = error_of([&] { (void)dsp::redistribute<SS>(dsp::batch(qp, kp)); });
    CHECK(e.find("not with a Partial placement") != std::string::npos);
  }
  SUBCASE("only the last rank's batch mixes extents") {
    dsp::DistTensor<double, 4, SS, M2> w{m, me == int(n) - 1 ? ek : eq};
    dsp::fill(w, [&](const E4& g) { return val(w.global_extents(), g, 2); });
    const std::string e = error_of([&] { (void)dsp::redistribute<SH>(dsp::batch(q, w)); });
    if (n > 1) CHECK(e.find("the extents (or Blocks sizes) of the batch's tensors disagree") != std::string::npos);
    if (n == 1) CHECK(e.empty());
    CHECK(wrong(w, w.global_extents(), 2) == 0);
  }
  CHECK(wrong(q, eq, 0) + wrong(k, ek, 1) == 0);
}
