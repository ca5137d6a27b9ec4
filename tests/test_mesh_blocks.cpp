// SPDX-License-Identifier: BSD-3-Clause
// Blocks<D> on a mesh axis (docs/attention.md): run-time sizes, one per rank
// of the axis, on the first axis that cuts D; later axes cut each block
// further. Each rank's block against a simulation of the nested rule;
// dsp::redistribute between Blocks layouts (same or other sizes, same or
// other axes) and Sharded, Zigzag and Replicated ones on every 2-axis mesh
// of the run's ranks: exact for uneven and empty blocks, the input
// untouched, the counted bytes and collectives equal to
// redistribute_plan::cost with the sizes; on a wire, in a batch, through
// reshard; and bad sizes raising on every rank.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <dsp/comm/counting.hpp>
#include <dsp/reshard.hpp>

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
template <std::size_t K>
using CMesh = dsp::Mesh<K, Counted>;
using E3 = std::array<std::size_t, 3>;
using Sizes = std::vector<std::size_t>;

/// Random sizes of `parts` blocks summing to `extent` (empty ones often).
Sizes random_sizes(std::mt19937& rng, std::size_t parts, std::size_t extent) {
  Sizes s(parts, 0);
  for (std::size_t i = 0; i < extent; ++i) ++s[rng() % parts];
  if (parts > 1 && rng() % 3 == 0) {  // one block takes a neighbour's share: an empty block
    const std::size_t k = rng() % (parts - 1);
    s[k + 1] += s[k], s[k] = 0;
  }
  return s;
}

/// The nested rule on explicit index lists, a Blocks code cutting by `sizes`.
std::vector<std::size_t> simulate(std::size_t extent, std::size_t d, const std::vector<long>& codes,
                                  const std::vector<int>& shape, const std::vector<int>& coords, const Sizes& sizes) {
  std::vector<std::size_t> idx(extent);
  for (std::size_t i = 0; i < extent; ++i) idx[i] = i;
  for (std::size_t a = 0; a < codes.size(); ++a) {
    if (dsp::detail::code_dim(codes[a]) != long(d)) continue;
    const std::size_t n = std::size_t(shape[a]), r = std::size_t(coords[a]);
    std::vector<std::size_t> next;
    auto take = [&](std::size_t off, std::size_t cnt) {
      for (std::size_t i = off; i < off + cnt; ++i) next.push_back(idx[i]);
    };
    if (dsp::detail::is_blocks_code(codes[a])) {
      std::size_t off = 0;
      for (std::size_t k = 0; k < r; ++k) off += sizes[k];
      take(off, sizes[r]);
    } else if (dsp::detail::is_zigzag_code(codes[a])) {
      const dsp::Partition p{idx.size(), 2 * n};
      take(p.offset(r), p.count(r));
      take(p.offset(2 * n - 1 - r), p.count(2 * n - 1 - r));
    } else {
      const dsp::Partition p{idx.size(), n};
      take(p.offset(r), p.count(r));
    }
    idx = next;
  }
  return idx;
}

std::vector<std::size_t> expand(std::size_t off, std::size_t cnt, std::size_t d, const dsp::Split& s) {
  std::vector<std::size_t> v;
  for (std::size_t i = 0; i < cnt; ++i) v.push_back(s.dim == d && i >= s.first ? s.second + (i - s.first) : off + i);
  return v;
}

double val(const E3& e, const E3& g) { return double((g[0] * e[1] + g[1]) * e[2] + g[2]) * 0.5 + 1.0; }
float small(const E3& e, const E3& g) { return float(((g[0] * e[1] + g[1]) * e[2] + g[2]) % 200); }

template <class X>
std::size_t wrong(const X& x, const E3& e) {
  return sum_all(dsp::count_mismatches(x, [&](const E3& g) { return val(e, g); }));
}

/// Sizes for layout L's Blocks on mesh m (empty when L has none).
template <class L>
Sizes sizes_for(std::mt19937& rng, const std::array<int, 2>& shape, const E3& e) {
  constexpr int a = dsp::detail::blocks_axis<L>();
  if constexpr (a < 0) return {};
  else
    return random_sizes(rng, std::size_t(shape[std::size_t(a)]),
                        e[std::size_t(dsp::detail::code_dim(dsp::detail::codes_v<L>[std::size_t(a)]))]);
}

/// A tensor of layout L on m, with `sizes` where L has a Blocks.
template <class T, class L, class M>
auto make(const M& m, const E3& e, const Sizes& sizes) {
  if constexpr (dsp::detail::has_blocks_code<L>()) return dsp::DistTensor<T, 3, L, M>{m, e, sizes};
  else return dsp::DistTensor<T, 3, L, M>{m, e};
}

template <class... L>
struct List {};
using Layouts = List<Axes<Blocks<1>, Sharded<1>>, Axes<Blocks<1>, Sharded<2>>, Axes<Sharded<2>, Blocks<1>>,
                     Axes<Replicated, Blocks<1>>, Axes<Blocks<1>, Zigzag<1>>, Axes<Blocks<2>, Sharded<1>>,
                     Axes<Sharded<1>, Sharded<1>>, Axes<Zigzag<1>, Sharded<2>>, Axes<Replicated, Replicated>>;

/// From -> To on a counting mesh: the data, the input untouched, and the
/// counted bytes and collectives against redistribute_plan::cost with sizes.
/// `same`: where both hold the same Blocks on one axis, y takes x's sizes.
template <class From, class To>
void check_pair(const CMesh<2>& m, const E3& e, std::mt19937& rng, bool same) {
  using P = dsp::redistribute_plan<From, To, 3>;
  CAPTURE(P::text());
  const Sizes xs = sizes_for<From>(rng, m.shape(), e);
  Sizes ys = sizes_for<To>(rng, m.shape(), e);
  if (dsp::detail::keeps_blocks<From, To>() && same) ys = xs;
  CAPTURE(xs);
  CAPTURE(ys);
  auto x = make<double, From>(m, e, xs);
  dsp::fill(x, [&](const E3& g) { return val(e, g); });
  auto y = make<double, To>(m, e, ys);
  for (std::size_t a = 0; a < 2; ++a) Counted(m.axis(a)).reset();
  dsp::redistribute<To>(x, y);
  std::size_t bytes = 0, collectives = 0;
  for (std::size_t a = 0; a < 2; ++a)
    bytes += m.axis(a).counts().bytes_sent, collectives += m.axis(a).counts().collectives();
  const auto model = P::cost(e, sizeof(double), m.shape(), m.coords(), xs, ys);
  CHECK(wrong(y, e) == 0);
  CHECK(wrong(x, e) == 0);
  CHECK(bytes == model.bytes);
  CHECK(max_all(bytes) == model.max_bytes);
  CHECK(collectives == model.collectives);
  if constexpr (dsp::detail::keeps_blocks<From, To>()) {  // the allocating form: y takes x's sizes
    auto z = dsp::redistribute<To>(x);
    CHECK(z.block_sizes() == xs);
    CHECK(wrong(z, e) == 0);
  }
}

template <class... L>
void all_pairs(const CMesh<2>& m, const E3& e, std::mt19937& rng, bool same, List<L...>) {
  (
      [&]<class From>() {
    ([&]<class To>() { check_pair<From, To>(m, e, rng, same); }.template operator()<L>(), ...);
      }.template operator()<L>(),
      ...);
}

}  // namespace

TEST_CASE("Blocks on a mesh axis: each rank's block is the nested rule's") {
  std::mt19937 rng(5);
  const long B1 = dsp::detail::kBlocks - 1;
  const std::vector<std::vector<long>> layouts{{B1, 1}, {B1, 2}, {2, B1}, {B1, dsp::detail::kZigzag - 1}, {B1, 1, 1}};
  for (const auto& codes : layouts)
    for (int n0 = 1; n0 <= 4; ++n0)
      for (int n1 = 1; n1 <= 3; ++n1)
        for (std::size_t extent : {0, 1, 3, 7, 16, 29}) {
          const std::vector<int> shape = codes.size() == 3 ? std::vector<int>{n0, n1, 2} : std::vector<int>{n0, n1};
          const int ranks = shape.size() == 3 ? n0 * n1 * 2 : n0 * n1;
          const std::size_t ba = codes[0] == B1 ? 0 : 1;
          const Sizes sizes = random_sizes(rng, std::size_t(shape[ba]), extent);
          Sizes starts{0};
          for (std::size_t v : sizes) starts.push_back(starts.back() + v);
          std::vector<int> seen(extent, 0);
          for (int r = 0; r < ranks; ++r) {
            std::vector<int> coords(shape.size());
            for (std::size_t a = shape.size(), rest = std::size_t(r); a-- > 0;)
              coords[a] = int(rest % std::size_t(shape[a])), rest /= std::size_t(shape[a]);
            const E3 g{2, extent, 3};
            const auto b = dsp::detail::nested_block(g, codes, shape, coords, dsp::detail::CutSizes{starts.data()});
            const auto want = simulate(extent, 1, codes, shape, coords, sizes);
            CAPTURE(extent);
            CAPTURE(sizes);
            CAPTURE(r);
            CHECK(b.box.count[1] == want.size());
            CHECK(expand(b.box.offset[1], b.box.count[1], 1, b.split) == want);
            for (std::size_t i : want) ++seen[i];
          }
          int copies = 1;
          for (std::size_t a = 0; a < codes.size(); ++a)
            if (dsp::detail::code_dim(codes[a]) != 1) copies *= shape[a];
          for (int c : seen) CHECK(c == copies);
        }
}

TEST_CASE("redistribute with Blocks on a mesh axis: exact, at the cost model's bytes, on every mesh shape") {
  Counted cw{world()};
  const std::size_t n = std::size_t(world().size());
  std::mt19937 rng(91);  // the same stream on every rank: the sizes agree
  for (const auto& s : shapes2(world().size())) {
    CMesh<2> m{cw, s};
    CAPTURE(s);
    bool same = false;
    for (const E3& e : {E3{2, 4 * n + 3, 2 * n + 1}, E3{1, 1, 3}, E3{3, 2 * n, 2}, random_extents<3>(rng)}) {
      all_pairs(m, e, rng, same, Layouts{});
      same = !same;
    }
  }
}

TEST_CASE("Blocks on a mesh: the packed-sequence USP switch, a batch of other heads, a wire, reshard") {
  const int n = world().size();
  Counted cw{world()};
  std::mt19937 rng(17);
  for (const auto& s : shapes2(n)) {
    CMesh<2> m{cw, s};
    CAPTURE(s);
    const E3 e{2, 4 * std::size_t(n) + 5, 2 * std::size_t(n) + 2};  // [B, S, H]: documents packed along S
    using BS = Axes<Blocks<1>, Sharded<1>>;                         // whole documents per ring rank, Ulysses inside
    using BH = Axes<Blocks<1>, Sharded<2>>;  // after the Ulysses switch: the ring rank's documents, heads split
    // With the input's sizes the Blocks stays: one switch on axis 1, as for Sharded.
    static_assert(dsp::redistribute_plan<BS, BH, 3>::kept_plan.size == 1);
    static_assert(dsp::redistribute_plan<BS, BH, 3>::kept_plan.steps[0].kind == dsp::StepKind::switch_dims);
    const Sizes docs = random_sizes(rng, std::size_t(s[0]), e[1]);
    dsp::DistTensor<double, 3, BS, CMesh<2>> x{m, e, docs};
    dsp::fill(x, [&](const E3& g) { return val(e, g); });
    for (std::size_t a = 0; a < 2; ++a) Counted(m.axis(a)).reset();
    auto h = dsp::redistribute<BH>(x);
    CHECK(m.axis(0).counts().collectives() == 0);
    CHECK(h.block_sizes() == docs);
    CHECK(wrong(h, e) == 0);
    // A batch of two element types, sharing the sizes (a batch on a mesh has equal extents and sizes).
    dsp::DistTensor<float, 3, BS, CMesh<2>> q{m, e, docs};
    dsp::fill(q, [&](const E3& g) { return small(e, g); });
    auto [hx, hq] = dsp::redistribute<BH>(dsp::batch(x, q));
    CHECK(wrong(hx, e) == 0);
    CHECK(sum_all(dsp::count_mismatches(hq, [&](const E3& g) { return small(e, g); })) == 0);
    // Tensors of a batch with other sizes: an error on every rank, nothing written.
    const Sizes other = random_sizes(rng, std::size_t(s[0]), e[1]);
    if (other != docs) {
      dsp::DistTensor<float, 3, BS, CMesh<2>> k{m, e, other};
      dsp::DistTensor<double, 3, BH, CMesh<2>> ox{m, e, docs};
      dsp::DistTensor<float, 3, BH, CMesh<2>> ok{m, e, other};
      const std::string err = error_of([&] { dsp::redistribute<BH>(dsp::batch(x, k), dsp::batch(ox, ok)); });
      CHECK(err.find("other Blocks sizes than tensor 0") != std::string::npos);
      CHECK(wrong(ox, e) == sum_all(ox.local_size()));  // untouched: still zeros
    }
    // On a bf16 wire, into rebalanced blocks: small integers exact, the cost model's wire bytes.
    const Sizes balanced = random_sizes(rng, std::size_t(s[0]), e[1]);
    dsp::DistTensor<float, 3, BH, CMesh<2>> r{m, e, balanced};
    for (std::size_t a = 0; a < 2; ++a) Counted(m.axis(a)).reset();
    dsp::redistribute<BH>(q, r, dsp::Wire::bf16);
    std::size_t bytes = 0;
    for (std::size_t a = 0; a < 2; ++a) bytes += m.axis(a).counts().bytes_sent;
    CHECK(bytes == dsp::redistribute_plan<BS, BH, 3>::cost(e, sizeof(float), m.shape(), m.coords(), docs, balanced,
                                                           dsp::Wire::bf16)
                       .bytes);
    CHECK(sum_all(dsp::count_mismatches(r, [&](const E3& g) { return small(e, g); })) == 0);
    // reshard to a plain communicator's Blocks (other sizes) and back.
    const Sizes flat = random_sizes(rng, std::size_t(n), e[1]);
    dsp::DistTensor<double, 3, Blocks<1>, dsp::MpiCommunicator> plain{world(), e, flat};
    dsp::reshard(world(), &h, &plain);
    CHECK(wrong(plain, e) == 0);
    dsp::DistTensor<double, 3, BS, CMesh<2>> back{m, e, docs};
    dsp::reshard(world(), &plain, &back);
    CHECK(wrong(back, e) == 0);
  }
}

TEST_CASE("Blocks on a mesh: sizes that do not fit, or differ between ranks, raise on every rank") {
  const int n = world().size();
  using M = dsp::Mesh<2, dsp::MpiCommunicator>;
  M m{world(), {n, 1}};
  const E3 e{2, 5, 3};
  using BR = Axes<Blocks<1>, Replicated>;
  // One size too many on rank 0 only: it raises InvalidArgument, the others MismatchError.
  Sizes bad(std::size_t(n), 0);
  bad[0] = 5;
  if (world().rank() == 0) bad.push_back(0);
  const std::string err = error_of([&] { dsp::DistTensor<double, 3, BR, M> x{m, e, bad}; });
  CHECK(!err.empty());
  if (world().rank() == 0) CHECK(err.find("one size per rank of its mesh axis") != std::string::npos);
  // Sizes that do not sum to the extent, on every rank.
  const std::string sum = error_of([&] { dsp::DistTensor<double, 3, BR, M> x{m, e, Sizes(std::size_t(n), 9)}; });
  CHECK(sum.find("sum to") != std::string::npos);
  // Sizes that differ between ranks (each sums to the extent).
  if (n > 1) {
    Sizes mine(std::size_t(n), 0);
    mine[std::size_t(world().rank())] = 5;
    const std::string dis = error_of([&] { dsp::DistTensor<double, 3, BR, M> x{m, e, mine}; });
    CHECK(dis.find("Blocks sizes disagree") != std::string::npos);
  }
  // The cost model asks for the sizes of a plan with Blocks.
  using P = dsp::redistribute_plan<BR, Axes<Sharded<1>, Replicated>, 3>;
  CHECK_THROWS_AS((void)P::cost(e, 8, m.shape(), m.coords()), dsp::InvalidArgument);
  CHECK_THROWS_AS((void)P::cost(e, 8, m.shape(), m.coords(), Sizes{1}, Sizes{}), dsp::InvalidArgument);
}

TEST_CASE("split-phase with Blocks: a mesh's Ulysses switch posted, recut steps at the start, plain communicators") {
  const int n = world().size();
  std::mt19937 rng(23);
  using M = dsp::Mesh<2, dsp::MpiCommunicator>;
  for (const auto& s : shapes2(n)) {
    CAPTURE(s);
    M m{world(), s};
    const E3 e{2, 4 * std::size_t(n) + 5, 2 * std::size_t(n) + 2};
    using BS = Axes<Blocks<1>, Sharded<1>>;
    using BH = Axes<Blocks<1>, Sharded<2>>;
    const Sizes docs = random_sizes(rng, std::size_t(s[0]), e[1]);
    dsp::DistTensor<double, 3, BS, M> x{m, e, docs};
    dsp::fill(x, [&](const E3& g) { return val(e, g); });
    // The same sizes: the Ulysses switch alone, posted; each block lands with its global offsets.
    dsp::DistTensor<double, 3, BH, M> h{m, e, docs};
    std::size_t rows = 0, bad = 0;
    dsp::redistribute_each<BH>(x, h, [&](const auto& block, const auto& offsets, int) {
      rows += block.extent(1);
      if (block.extent(0) && block.extent(1) && block.extent(2) && block(0, 0, 0) != val(e, offsets)) ++bad;
    });
    CHECK(bad == 0);
    CHECK(wrong(h, e) == 0);
    // Other sizes: the ring axis's recut at the start, then the switch.
    const Sizes other = random_sizes(rng, std::size_t(s[0]), e[1]);
    dsp::DistTensor<double, 3, BH, M> r{m, e, other};
    auto hr = dsp::start_redistribute<BH>(x, r);
    hr.wait();
    CHECK(wrong(r, e) == 0);
    // On a wire, from Sharded into Blocks.
    dsp::DistTensor<float, 3, Axes<Sharded<1>, Sharded<1>>, M> f{m, e};
    dsp::fill(f, [&](const E3& g) { return small(e, g); });
    dsp::DistTensor<float, 3, BH, M> fb{m, e, other};
    auto hw = dsp::start_redistribute<BH>(f, fb, dsp::Wire::bf16);
    hw.wait();
    CHECK(sum_all(dsp::count_mismatches(fb, [&](const E3& g) { return small(e, g); })) == 0);
  }
  // A plain communicator: Sharded -> Blocks -> Blocks (a rebalance) -> Sharded, split-phase.
  const E3 e{2, 3 * std::size_t(n) + 2, 3};
  dsp::DistTensor<double, 3, Sharded<2>, dsp::MpiCommunicator> x{world(), e};
  dsp::fill(x, [&](const E3& g) { return val(e, g); });
  dsp::DistTensor<double, 3, Blocks<1>, dsp::MpiCommunicator> b{world(), e, random_sizes(rng, std::size_t(n), e[1])};
  std::size_t bad = 0;
  dsp::redistribute_each<Blocks<1>>(x, b, [&](const auto& block, const auto& offsets, int) {
    if (block.size() && block(0, 0, 0) != val(e, offsets)) ++bad;
  });
  CHECK(bad == 0);
  CHECK(wrong(b, e) == 0);
  dsp::DistTensor<double, 3, Blocks<1>, dsp::MpiCommunicator> b2{world(), e, random_sizes(rng, std::size_t(n), e[1])};
  auto h2 = dsp::start_redistribute<Blocks<1>>(b, b2);
  h2.wait();
  CHECK(wrong(b2, e) == 0);
  dsp::DistTensor<double, 3, Sharded<0>, dsp::MpiCommunicator> back{world(), e};
  auto hb = dsp::start_redistribute<Sharded<0>>(b2, back);
  hb.wait();
  CHECK(wrong(back, e) == 0);
  // Ranks whose output sizes differ: every rank raises at the start, nothing posted.
  if (n > 1) {
    dsp::set_agreement_checks(false);  // the constructor's own check would catch it first
    Sizes mine(std::size_t(n), 0);
    mine[std::size_t(world().rank())] = e[1];
    dsp::DistTensor<double, 3, Blocks<1>, dsp::MpiCommunicator> odd{world(), e, mine};
    dsp::set_agreement_checks(true);
    CHECK(error_of([&] { dsp::start_redistribute<Blocks<1>>(x, odd).wait(); }).find("Blocks sizes") !=
          std::string::npos);
  }
}

TEST_CASE("Blocks on a mesh: redistribute_axis keeps the sizes; the cost model refuses missing or stray sizes") {
  const int n = world().size();
  using M = dsp::Mesh<2, dsp::MpiCommunicator>;
  std::mt19937 rng(31);
  for (const auto& s : shapes2(n)) {
    M m{world(), s};
    const E3 e{2, 3 * std::size_t(n) + 4, 2 * std::size_t(n) + 1};
    using BH = Axes<Blocks<1>, Sharded<2>>;
    const Sizes docs = random_sizes(rng, std::size_t(s[0]), e[1]);
    dsp::DistTensor<double, 3, BH, M> x{m, e, docs};
    dsp::fill(x, [&](const E3& g) { return val(e, g); });
    auto r = dsp::redistribute_axis<1, Replicated>(x);  // a gather on axis 1; axis 0's blocks stay
    static_assert(std::is_same_v<decltype(r)::layout_type, Axes<Blocks<1>, Replicated>>);
    CHECK(r.block_sizes() == docs);
    CHECK(wrong(r, e) == 0);
    auto t = dsp::redistribute_axis<0, Sharded<1>>(r);  // a recut on axis 0: Blocks -> Sharded
    CHECK(wrong(t, e) == 0);
    using P = dsp::redistribute_plan<Axes<Blocks<1>, Sharded<1>>, BH, 3>;
    CHECK_THROWS_AS((void)dsp::redistribute_cost(P::kept_plan, P::from, e, 8, m.shape(), m.coords()),
                    dsp::InvalidArgument);  // the Blocks stays in every state: its sizes are still needed
    using Q = dsp::redistribute_plan<Axes<Sharded<1>, Sharded<2>>, Axes<Sharded<2>, Sharded<1>>, 3>;
    CHECK_THROWS_AS((void)Q::cost(e, 8, m.shape(), m.coords(), docs, Sizes{}),
                    dsp::InvalidArgument);  // sizes for a side without Blocks
  }
}
