// SPDX-License-Identifier: BSD-3-Clause
// Zigzag<D> on a mesh axis (docs/attention.md): each rank's block under the
// nested rule (a Zigzag cut, then Sharded axes cutting its block further),
// checked against a direct simulation of the rule; dsp::redistribute between
// such layouts and Sharded/Replicated ones on 2-axis meshes of every shape:
// exact for uneven extents and extents below 2N, the input untouched, the
// counted bytes and collectives equal to redistribute_plan::cost; on a wire
// and in batches; reshard and the planner's plans for USP.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <dsp/comm/counting.hpp>
#include <dsp/reshard.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

using namespace dsp_test;
using dsp::Axes;
using dsp::Replicated;
using dsp::Sharded;
using dsp::Zigzag;

namespace {

using Counted = dsp::CountingCommunicator<dsp::MpiCommunicator>;
template <std::size_t K>
using CMesh = dsp::Mesh<K, Counted>;
using E3 = std::array<std::size_t, 3>;

/// The nested rule simulated on explicit index lists: the global indices of
/// dim d a rank at `coords` holds, in its block's order.
std::vector<std::size_t> simulate(std::size_t extent, std::size_t d, const std::vector<long>& codes,
                                  const std::vector<int>& shape, const std::vector<int>& coords) {
  std::vector<std::size_t> idx(extent);
  for (std::size_t i = 0; i < extent; ++i) idx[i] = i;
  for (std::size_t a = 0; a < codes.size(); ++a) {
    if (dsp::detail::code_dim(codes[a]) != long(d)) continue;
    const std::size_t n = std::size_t(shape[a]), r = std::size_t(coords[a]);
    std::vector<std::size_t> next;
    auto take = [&](const dsp::Partition& p, std::size_t k) {
      for (std::size_t i = p.offset(k); i < p.offset(k) + p.count(k); ++i) next.push_back(idx[i]);
    };
    if (dsp::detail::is_zigzag_code(codes[a])) {
      const dsp::Partition p{idx.size(), 2 * n};
      take(p, r);
      take(p, 2 * n - 1 - r);
    } else {
      take(dsp::Partition{idx.size(), n}, r);
    }
    idx = next;
  }
  return idx;
}

/// The global indices of dim d that a block (offset, count, split) holds, in order.
std::vector<std::size_t> expand(std::size_t off, std::size_t cnt, std::size_t d, const dsp::Split& s) {
  std::vector<std::size_t> v;
  for (std::size_t i = 0; i < cnt; ++i) {
    if (s.dim == d && i >= s.first) v.push_back(s.second + (i - s.first));
    else v.push_back(off + i);
  }
  return v;
}

double val(const E3& e, const E3& g) { return double((g[0] * e[1] + g[1]) * e[2] + g[2]) * 0.5 + 1.0; }
/// Small integers: exact on a bf16 wire.
float small(const E3& e, const E3& g) { return float(((g[0] * e[1] + g[1]) * e[2] + g[2]) % 200); }

template <class X>
std::size_t wrong(const X& x, const E3& e) {
  return sum_all(dsp::count_mismatches(x, [&](const E3& g) { return val(e, g); }));
}

template <class... L>
struct List {};
using Layouts = List<Axes<Sharded<1>, Sharded<1>>, Axes<Zigzag<1>, Sharded<1>>, Axes<Zigzag<1>, Sharded<2>>,
                     Axes<Sharded<2>, Zigzag<1>>, Axes<Replicated, Zigzag<1>>, Axes<Zigzag<1>, Replicated>,
                     Axes<Sharded<0>, Sharded<2>>, Axes<Replicated, Replicated>>;

/// From -> To on a counting mesh: the data, the input untouched, and the
/// counted bytes and collectives against redistribute_plan::cost.
template <class From, class To>
void check_pair(const CMesh<2>& m, const E3& e) {
  using P = dsp::redistribute_plan<From, To, 3>;
  CAPTURE(P::text());
  dsp::DistTensor<double, 3, From, CMesh<2>> x{m, e};
  dsp::fill(x, [&](const E3& g) { return val(e, g); });
  for (std::size_t a = 0; a < 2; ++a) Counted(m.axis(a)).reset();
  auto y = dsp::redistribute<To>(x);
  std::size_t bytes = 0, collectives = 0;
  for (std::size_t a = 0; a < 2; ++a)
    bytes += m.axis(a).counts().bytes_sent, collectives += m.axis(a).counts().collectives();
  const auto model = P::cost(e, sizeof(double), m.shape(), m.coords());
  CHECK(wrong(y, e) == 0);
  CHECK(wrong(x, e) == 0);
  CHECK(bytes == model.bytes);
  CHECK(max_all(bytes) == model.max_bytes);
  CHECK(collectives == model.collectives);
}

template <class... L>
void all_pairs(const CMesh<2>& m, const E3& e, List<L...>) {
  (
      [&]<class From>() {
    ([&]<class To>() { check_pair<From, To>(m, e); }.template operator()<L>(), ...);
      }.template operator()<L>(),
      ...);
}

}  // namespace

TEST_CASE("Zigzag on a mesh axis: each rank's block is the nested rule's, at most two ranges") {
  const std::vector<std::vector<long>> layouts{{dsp::detail::kZigzag - 1, 1},
                                               {1, dsp::detail::kZigzag - 1},
                                               {dsp::detail::kZigzag - 1, 2},
                                               {dsp::detail::kReplicated, dsp::detail::kZigzag - 1},
                                               {1, dsp::detail::kZigzag - 1, 1}};
  for (const auto& codes : layouts)
    for (int n0 = 1; n0 <= 4; ++n0)
      for (int n1 = 1; n1 <= 3; ++n1)
        for (std::size_t extent : {0, 1, 3, 7, 16, 29}) {
          const std::vector<int> shape = codes.size() == 3 ? std::vector<int>{n0, n1, 2} : std::vector<int>{n0, n1};
          const int ranks = shape.size() == 3 ? n0 * n1 * 2 : n0 * n1;
          std::vector<int> seen(extent, 0);
          for (int r = 0; r < ranks; ++r) {
            std::vector<int> coords(shape.size());
            for (std::size_t a = shape.size(), rest = std::size_t(r); a-- > 0;)
              coords[a] = int(rest % std::size_t(shape[a])), rest /= std::size_t(shape[a]);
            const std::array<std::size_t, 3> g{2, extent, 3};
            const auto b = dsp::detail::nested_block(g, codes, shape, coords);
            const auto want = simulate(extent, 1, codes, shape, coords);
            CAPTURE(extent);
            CAPTURE(n0);
            CAPTURE(n1);
            CAPTURE(r);
            CHECK(b.box.count[1] == want.size());
            CHECK(expand(b.box.offset[1], b.box.count[1], 1, b.split) == want);
            CHECK(b.box.count[0] == 2);
            for (std::size_t i : want) ++seen[i];
          }
          int copies = 1;  // the ranks of the axes that do not cut dim 1 hold the same indices
          for (std::size_t a = 0; a < codes.size(); ++a)
            if (dsp::detail::code_dim(codes[a]) != 1) copies *= shape[a];
          for (int c : seen) CHECK(c == copies);
        }
}

TEST_CASE("redistribute with Zigzag on a mesh axis: exact, at the cost model's bytes, on every mesh shape") {
  Counted cw{world()};
  const std::size_t n = std::size_t(world().size());
  std::mt19937 rng(77);
  for (const auto& s : shapes2(world().size())) {
    CMesh<2> m{cw, s};
    CAPTURE(s);
    for (const E3& e : {E3{2, 4 * n + 3, 2 * n + 1}, E3{1, 1, 3}, E3{3, 2 * n, 2}, random_extents<3>(rng)})
      all_pairs(m, e, Layouts{});
  }
}

TEST_CASE("a Zigzag mesh layout: into an existing tensor, on a wire, in a batch; the plans of USP") {
  const int n = world().size();
  Counted cw{world()};
  for (const auto& s : shapes2(n)) {
    CMesh<2> m{cw, s};
    const E3 e{2, 4 * std::size_t(n) + 5, 2 * std::size_t(n) + 1};
    using ZS = Axes<Zigzag<1>, Sharded<1>>;  // USP's causal layout: the ring axis zigzagged, Ulysses inside
    using ZH = Axes<Zigzag<1>, Sharded<2>>;  // after the Ulysses switch: the whole zigzag block, heads split
    using SS = Axes<Sharded<1>, Sharded<1>>;
    static_assert(dsp::redistribute_plan<ZS, ZH, 3>::size() == 1);
    static_assert(dsp::redistribute_plan<ZS, ZH, 3>::step(0).kind == dsp::StepKind::switch_dims);
    static_assert(dsp::redistribute_plan<SS, ZS, 3>::step(0).kind == dsp::StepKind::gather ||
                  dsp::redistribute_plan<SS, ZS, 3>::size() <= 3);
    dsp::DistTensor<double, 3, SS, CMesh<2>> x{m, e};
    dsp::fill(x, [&](const E3& g) { return val(e, g); });
    dsp::DistTensor<double, 3, ZS, CMesh<2>> z{m, e};
    dsp::redistribute<ZS>(x, z);  // into an existing tensor
    CHECK(wrong(z, e) == 0);
    dsp::DistTensor<double, 3, ZH, CMesh<2>> h{m, e};
    for (int k = 0; k < 3; ++k) dsp::redistribute<ZH>(z, h);  // warm: no workspace growth after the first
    CHECK(wrong(h, e) == 0);
    // On a bf16 wire: small integers travel exactly, at the cost model's wire bytes.
    dsp::DistTensor<float, 3, SS, CMesh<2>> f{m, e};
    dsp::fill(f, [&](const E3& g) { return small(e, g); });
    for (std::size_t a = 0; a < 2; ++a) Counted(m.axis(a)).reset();
    auto fz = dsp::redistribute<Axes<Zigzag<1>, Sharded<2>>>(f, dsp::Wire::bf16);
    std::size_t bytes = 0;
    for (std::size_t a = 0; a < 2; ++a) bytes += m.axis(a).counts().bytes_sent;
    using PW = dsp::redistribute_plan<SS, Axes<Zigzag<1>, Sharded<2>>, 3>;
    CHECK(bytes == PW::cost(e, sizeof(float), m.shape(), m.coords(), dsp::Wire::bf16).bytes);
    CHECK(sum_all(dsp::count_mismatches(fz, [&](const E3& g) { return small(e, g); })) == 0);
    // A batch of two element types, Sharded -> Zigzag on a mesh: one plan, both exact.
    dsp::DistTensor<float, 3, SS, CMesh<2>> q{m, e};
    dsp::fill(q, [&](const E3& g) { return small(e, g); });
    auto [xq, qq] = dsp::redistribute<ZH>(dsp::batch(x, q));
    CHECK(wrong(xq, e) == 0);
    CHECK(sum_all(dsp::count_mismatches(qq, [&](const E3& g) { return small(e, g); })) == 0);
    // reshard from the mesh's Zigzag layout to a plain communicator's Zigzag (other dims, another cut).
    dsp::DistTensor<double, 3, Zigzag<2>, dsp::MpiCommunicator> plain{world(), e};
    dsp::reshard(world(), &z, &plain);
    CHECK(wrong(plain, e) == 0);
    dsp::DistTensor<double, 3, ZS, CMesh<2>> back{m, e};
    dsp::reshard(world(), &plain, &back);
    CHECK(wrong(back, e) == 0);
  }
}

TEST_CASE("split-phase with Zigzag: a mesh's Ulysses switch posted, recut steps at the start, plain communicators") {
  const int n = world().size();
  for (const auto& s : shapes2(n)) {
    CAPTURE(s);
    dsp::Mesh<2, dsp::MpiCommunicator> m{world(), s};
    using M = dsp::Mesh<2, dsp::MpiCommunicator>;
    const E3 e{2, 4 * std::size_t(n) + 5, 2 * std::size_t(n) + 1};
    using ZS = Axes<Zigzag<1>, Sharded<1>>;
    using ZH = Axes<Zigzag<1>, Sharded<2>>;
    using SS = Axes<Sharded<1>, Sharded<1>>;
    dsp::DistTensor<double, 3, ZS, M> z{m, e};
    dsp::fill(z, [&](const E3& g) { return val(e, g); });
    dsp::DistTensor<double, 3, ZH, M> h{m, e};
    // The Ulysses switch (one step on axis 1) is posted; each block lands with the global offsets of its
    // first element (through the output's jump) and the rows it holds.
    std::size_t rows = 0, bad = 0;
    const dsp::Split split = h.block_split();
    dsp::redistribute_each<ZH>(z, h, [&](const auto& block, const auto& offsets, int) {
      rows += block.extent(1);
      if (block.extent(0) && block.extent(1) && block.extent(2) && block(0, 0, 0) != val(e, offsets)) ++bad;
      if (split.dim == 1 && offsets[1] != h.local_offsets()[1] && offsets[1] < split.second &&
          offsets[1] >= h.local_offsets()[1] + split.first)
        ++bad;  // an offset past the first range must lie in the second
    });
    CHECK(bad == 0);
    CHECK(rows == (h.local_size() ? h.local_extents()[1] : rows));
    CHECK(wrong(h, e) == 0);
    // Into the zigzag layout: recut steps run at the start, the last step posted when it is a switch.
    dsp::DistTensor<double, 3, SS, M> x{m, e};
    dsp::fill(x, [&](const E3& g) { return val(e, g); });
    dsp::DistTensor<double, 3, ZS, M> z2{m, e};
    auto handle = dsp::start_redistribute<ZS>(x, z2);
    handle.wait();
    CHECK(wrong(z2, e) == 0);
    // On a wire, split-phase.
    dsp::DistTensor<float, 3, SS, M> f{m, e};
    dsp::fill(f, [&](const E3& g) { return small(e, g); });
    dsp::DistTensor<float, 3, ZH, M> fz{m, e};
    auto hw = dsp::start_redistribute<ZH>(f, fz, dsp::Wire::bf16);
    hw.wait();
    CHECK(sum_all(dsp::count_mismatches(fz, [&](const E3& g) { return small(e, g); })) == 0);
  }
  // A plain communicator: Sharded -> Zigzag split-phase (the recut runs at the start; wait reports the block).
  const E3 e{2, 3 * std::size_t(n) + 2, 3};
  dsp::DistTensor<double, 3, Sharded<2>, dsp::MpiCommunicator> x{world(), e};
  dsp::fill(x, [&](const E3& g) { return val(e, g); });
  dsp::DistTensor<double, 3, Zigzag<1>, dsp::MpiCommunicator> z{world(), e};
  std::size_t calls = 0, bad = 0;
  dsp::redistribute_each<Zigzag<1>>(x, z, [&](const auto& block, const auto& offsets, int) {
    ++calls;
    if (block.size() && block(0, 0, 0) != val(e, offsets)) ++bad;
  });
  CHECK(bad == 0);
  CHECK(calls <= 1);
  CHECK(wrong(z, e) == 0);
  dsp::DistTensor<double, 3, Sharded<0>, dsp::MpiCommunicator> back{world(), e};
  auto hb = dsp::start_redistribute<Sharded<0>>(z, back);
  hb.wait();
  CHECK(wrong(back, e) == 0);
}

TEST_CASE("a batch on a wire agrees on its path whatever each rank's thread exchanged before") {
  // Regression: the cut engine's per-thread state kept a single tensor's `separate` into a later batch
  // on a wire, whose agreed path then differed between ranks that had run other exchanges.
  const int n = world().size();
  const E3 e{2, 4 * std::size_t(n) + 3, 2 * std::size_t(n)};
  dsp::MpiCommunicator half = world().split(world().rank() % 2, world().rank());
  if (world().rank() % 2 == 0) {  // only the even ranks run an exact single-tensor cut exchange first
    const E3 he{1, 3 * std::size_t(half.size()), 2};
    dsp::DistTensor<double, 3, Sharded<2>, dsp::MpiCommunicator> x{half, he};
    dsp::DistTensor<double, 3, Zigzag<1>, dsp::MpiCommunicator> z{half, he};
    dsp::redistribute<Zigzag<1>>(x, z);
  }
  dsp::DistTensor<float, 3, Sharded<2>, dsp::MpiCommunicator> q{world(), e}, k{world(), e};
  dsp::fill(q, [&](const E3& g) { return small(e, g); });
  dsp::fill(k, [&](const E3& g) { return small(e, g); });
  auto [qz, kz] = dsp::redistribute<Zigzag<1>>(dsp::batch(q, k), dsp::Wire::bf16);
  CHECK(sum_all(dsp::count_mismatches(qz, [&](const E3& g) { return small(e, g); }) +
                dsp::count_mismatches(kz, [&](const E3& g) { return small(e, g); })) == 0);
}

TEST_CASE("redistribute_axis from a Zigzag axis: a recut step where the axis is innermost") {
  const int n = world().size();
  dsp::Mesh<2, dsp::MpiCommunicator> m{world(), {n, 1}};
  using M = dsp::Mesh<2, dsp::MpiCommunicator>;
  const E3 e{2, 3 * std::size_t(n) + 1, 3};
  dsp::DistTensor<double, 3, Axes<Zigzag<1>, Sharded<2>>, M> z{m, e};
  dsp::fill(z, [&](const E3& g) { return val(e, g); });
  auto s = dsp::redistribute_axis<0, Sharded<0>>(z);
  static_assert(std::is_same_v<decltype(s)::layout_type, Axes<Sharded<0>, Sharded<2>>>);
  CHECK(wrong(s, e) == 0);
}
