// SPDX-License-Identifier: BSD-3-Clause
// Zigzag<D> and Blocks<D> (docs/attention.md): the cut arithmetic, and
// dsp::redistribute between them, Sharded and Replicated on a plain
// communicator: exact against the serial reference for uneven extents,
// extents below 2N and empty blocks, under the point-to-point, the typed
// (MPI_Alltoallw, several run patterns per peer) and the packed exchange; every element that must move sent once and
// nothing else (counted bytes equal to the elements whose holder changes); the input untouched; bad Blocks sizes an
// error on every rank.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <dsp/comm/counting.hpp>
#include <dsp/kernels/convert.hpp>  // detail::round_wire, the wires' rounding on the host
#include <dsp/plan/cut.hpp>         // the cut plans themselves (run lists)
#include <dsp/reshard.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

using namespace dsp_test;
using dsp::Blocks;
using dsp::Replicated;
using dsp::Sharded;
using dsp::Zigzag;

namespace {

using T = std::int32_t;
using Counted = dsp::CountingCommunicator<dsp::MpiCommunicator>;
using E4 = std::array<std::size_t, 4>;

T ref(const E4& g, const E4& e) { return value_at<T>(linear(g, e)); }

/// Run-time sizes for Blocks over n ranks: uneven, with an empty block where
/// n > 1, summing to `extent` (the same on every rank).
std::vector<std::size_t> sizes_for(std::size_t extent, std::size_t n) {
  std::vector<std::size_t> s(n, 0);
  std::size_t left = extent;
  for (std::size_t r = 0; r < n && left > 0; ++r) {
    if (n > 1 && r == 1) continue;  // rank 1 holds nothing
    const std::size_t take = r + 1 == n ? left : std::min(left, (extent * (r + 2)) / (2 * n) + 1);
    s[r] = take, left -= take;
  }
  if (left) s[0] += left;
  return s;
}

/// The rank whose block holds index g of the cut dim (-1: every rank).
long holder(const dsp::detail::Cut& c, std::size_t g) {
  if (c.kind == dsp::detail::Cut::Kind::whole) return -1;
  for (std::size_t r = 0; r < c.parts; ++r) {
    dsp::detail::Piece p[2];
    const std::size_t k = c.pieces(r, p);
    for (std::size_t i = 0; i < k; ++i)
      if (g >= p[i].offset && g < p[i].offset + p[i].count) return long(r);
  }
  return -2;
}

/// The elements that must cross ranks from cut `a` of dim i to cut `b` of
/// dim j: an element moves to every rank that wants it and does not hold it.
std::size_t must_move(const E4& e, std::size_t i, const dsp::detail::Cut& a, std::size_t j, const dsp::detail::Cut& b) {
  const std::size_t n = a.parts;
  std::size_t total = 1;
  for (std::size_t v : e) total *= v;
  if (total == 0 || a.kind == dsp::detail::Cut::Kind::whole) return 0;
  std::size_t moved = 0;
  for (std::size_t gi = 0; gi < e[i]; ++gi)
    for (std::size_t gj = 0; gj < e[j]; ++gj) {
      if (i == j && gi != gj) continue;
      const long s = holder(a, gi), r = holder(b, gj);
      const std::size_t rest = total / e[i] / (i == j ? 1 : e[j]);
      if (r == -1) moved += (n - 1) * rest;
      else if (r != s) moved += rest;
    }
  return moved;
}

template <class L, class X>
dsp::detail::CutSide side(const X& x) {
  return dsp::detail::cut_side<L>(x);
}

/// x (layout From) to layout To: exact, x untouched, the bytes the minimum.
template <class From, class To, class MakeX, class MakeY>
void check_move(const E4& e, MakeX make_x, MakeY make_y, const char* what) {
  CAPTURE(what);
  const std::string shape = dsp::detail::text(std::span<const std::size_t>(e));
  CAPTURE(shape);
  auto x = make_x();
  dsp::fill(x, [&](const E4& g) { return ref(g, e); });
  auto y = make_y();
  Counted c = x.communicator();
  c.reset();
  dsp::redistribute<To>(x, y);
  CHECK(sum_all(dsp::count_mismatches(y, [&](const E4& g) { return ref(g, e); })) == 0);
  CHECK(sum_all(dsp::count_mismatches(x, [&](const E4& g) { return ref(g, e); })) == 0);
  const auto a = side<From>(x), b = side<To>(y);
  CHECK(sum_all(c.counts().bytes_sent) == must_move(e, a.dim, a.cut, b.dim, b.cut) * sizeof(T));
  // The cost model's bytes for this rank are what it sent (Blocks: with the tensors' sizes).
  const std::size_t n = std::size_t(x.communicator().size()), me = std::size_t(x.communicator().rank());
  std::vector<std::size_t> fs, ts;
  if constexpr (dsp::is_blocks_v<From>) fs = x.block_sizes();
  if constexpr (dsp::is_blocks_v<To>) ts = y.block_sizes();
  const dsp::TransitionCost cost = dsp::transition_cost<From, To>(e, sizeof(T), n, me, fs, ts);
  CHECK(cost.bytes == c.counts().bytes_sent);
  if constexpr (!dsp::is_blocks_v<From> && !dsp::is_blocks_v<To>)
    CHECK(dsp::transition_cost<From, To>(e, sizeof(T), n, me) == cost);
}

}  // namespace

TEST_CASE("Zigzag's cut: chunks r and 2N-1-r of the 2N-chunk rule, the extent covered once") {
  for (std::size_t n = 1; n <= 6; ++n)
    for (std::size_t extent = 0; extent <= 3 * n + 2; ++extent) {
      const dsp::detail::Cut c{dsp::detail::Cut::Kind::zigzag, extent, n, nullptr};
      const dsp::Partition chunks{extent, 2 * n};
      std::vector<int> seen(extent, 0);
      for (std::size_t r = 0; r < n; ++r) {
        dsp::detail::Piece p[2];
        REQUIRE(c.pieces(r, p) == 2);
        CHECK(p[0].offset == chunks.offset(r));
        CHECK(p[0].count == chunks.count(r));
        CHECK(p[1].offset == chunks.offset(2 * n - 1 - r));
        CHECK(p[1].count == chunks.count(2 * n - 1 - r));
        CHECK(c.count(r) == p[0].count + p[1].count);
        for (std::size_t g = p[1].offset; g < p[1].offset + p[1].count; ++g)
          CHECK(c.local(r, g) == p[0].count + (g - p[1].offset));  // the second chunk follows the first
        for (std::size_t g = p[0].offset; g < p[0].offset + p[0].count; ++g) CHECK(c.local(r, g) == g - p[0].offset);
        for (const auto& q : p)
          for (std::size_t g = q.offset; g < q.offset + q.count; ++g) {
            ++seen[g];
            CHECK(holder(c, g) == long(r));
          }
      }
      for (int s : seen) CHECK(s == 1);
    }
}

TEST_CASE("a Zigzag block's two chunks end to end on a peer's side: one run pattern, not two") {
  // Sharded<2> -> Zigzag<1> of [1, 8 N, 2 N, 16] as point-to-point or typed run lists: a sender's part
  // for a peer is two contiguous runs (the peer's two chunks' rows, its own 2 heads), and the
  // receiver's is the two chunks' rows end to end in its block, at the heads' stride; each side one
  // entry per peer (two single runs make one strided pattern; a pattern continued at its stride
  // extends). The plan checks simulate the merged lists (tests/plan_checks.hpp).
  using namespace dsp::detail;
  for (std::size_t n = 2; n <= 6; ++n) {
    CAPTURE(n);
    const std::array<std::size_t, 4> g{1, 8 * n, 2 * n, 16};
    const CutSide in{2, Cut{Cut::Kind::even, g[2], n, nullptr}}, out{1, Cut{Cut::Kind::zigzag, g[1], n, nullptr}};
    for (const CutMode mode : {CutMode::peer, CutMode::typed})
      for (std::size_t p = 0; p < n; ++p) {
        const CutPlan plan = plan_cut(g, in, out, p, n, mode);
        CHECK(plan.sends.size() == n - 1);
        CHECK(plan.recvs.size() == n - 1);
        for (const dsp::PeerRuns& r : plan.recvs) {
          CHECK(r.runs.len == 32);  // 2 heads of 16
          CHECK(r.runs.stride == 2 * n * 16);
          CHECK(r.elems == 8 * 32);  // 8 rows: both chunks
        }
        for (const dsp::PeerRuns& r : plan.sends) {
          CHECK(r.runs.len == 4 * 32);  // one chunk's 4 rows of 2 heads
          CHECK(r.elems == 8 * 32);
        }
      }
  }
  // Runs that do not continue a pattern stay apart: another peer, another length, a step back, a
  // stride that does not match.
  std::vector<dsp::PeerRuns> list;
  append_runs(list, {1, dsp::Runs{0, 10, 4}, 4, 8});   // two runs at stride 10
  append_runs(list, {1, dsp::Runs{20, 10, 4}, 4, 4});  // the third: merged
  CHECK(list.size() == 1);
  CHECK(list[0].elems == 12);
  append_runs(list, {2, dsp::Runs{30, 10, 4}, 4, 4});  // another peer
  append_runs(list, {2, dsp::Runs{40, 10, 2}, 2, 2});  // another length
  append_runs(list, {2, dsp::Runs{0, 2, 2}, 2, 2});    // before the last
  append_runs(list, {2, dsp::Runs{50, 20, 2}, 2, 4});  // two runs at stride 20 after a single run at 0: not 20 on
  CHECK(list.size() == 5);
}

TEST_CASE("a small typed exchange: a rank whose part for a peer is two long runs packs its sends first") {
  // Sharded<2> -> Zigzag<1> of [1, 64 N, 2 N, 16] (a peer's chunk 8 KiB): the receiver's runs are 128
  // bytes (the typed collective), a sender's part for a peer two 4 KiB runs (the peer's two chunks), so
  // each rank with such a part packs its sends into one contiguous section per peer (typed_staged). At
  // 2 ranks rank 0's part for rank 1 (chunks 1 and 2) is one run: it sends straight. A Blocks output
  // with the Sharded rule's sizes (one run per peer) sends straight everywhere; the reverse exchange's
  // senders' runs are short: plain typed.
  using namespace dsp::detail;
  const Capabilities caps{true, true};
  for (std::size_t n = 2; n <= 6; ++n) {
    CAPTURE(n);
    const std::array<std::size_t, 4> g{1, 64 * n, 2 * n, 16};
    const CutSide heads{2, Cut{Cut::Kind::even, g[2], n, nullptr}}, zz{1, Cut{Cut::Kind::zigzag, g[1], n, nullptr}};
    std::vector<std::size_t> starts(n + 1, 0);
    for (std::size_t r = 0; r < n; ++r) starts[r + 1] = starts[r] + dsp::Partition{g[1], n}.count(r);
    const CutSide blocks{1, Cut{Cut::Kind::blocks, g[1], n, starts.data()}};
    CHECK(cut_mode(g, heads, zz, n, 4, caps, dsp::SwitchAlgorithm::automatic) == CutMode::typed_staged);
    CHECK(cut_mode(g, heads, blocks, n, 4, caps, dsp::SwitchAlgorithm::automatic) == CutMode::typed_staged);
    CHECK(cut_mode(g, zz, heads, n, 4, caps, dsp::SwitchAlgorithm::automatic) == CutMode::typed);
    CHECK(cut_mode(g, heads, zz, n, 4, caps, dsp::SwitchAlgorithm::datatypes) == CutMode::typed);  // forced: as is
    // A batch's member reads as typed (its decision to move tensor by tensor: [1, 64 N, 2 N, 32], whose
    // 256-byte receiver runs pass the batch's rule); into Replicated (each peer's part the whole block)
    // nothing is staged.
    const std::array<std::size_t, 4> g3{1, 64 * n, 2 * n, 32};
    const CutSide heads3{2, Cut{Cut::Kind::even, g3[2], n, nullptr}}, zz3{1, Cut{Cut::Kind::zigzag, g3[1], n, nullptr}};
    CHECK(cut_mode(g3, heads3, zz3, n, 4, caps, dsp::SwitchAlgorithm::automatic) == CutMode::typed_staged);
    CHECK(cut_mode(g3, heads3, zz3, n, 4, caps, dsp::SwitchAlgorithm::automatic, false) == CutMode::typed);
    const CutSide whole{1, Cut{Cut::Kind::whole, g[1], n, nullptr}};
    CHECK(cut_mode(g, zz, whole, n, 4, caps, dsp::SwitchAlgorithm::automatic) != CutMode::typed_staged);
    CHECK(cut_mode(g, heads, whole, n, 4, caps, dsp::SwitchAlgorithm::automatic) != CutMode::typed_staged);
    for (std::size_t p = 0; p < n; ++p) {
      CAPTURE(p);
      const CutPlan z = plan_cut(g, heads, zz, p, n, CutMode::typed_staged);
      const bool two_runs = !(n == 2 && p == 0);
      CHECK(z.pack.empty() == !two_runs);
      CHECK(z.sends.size() == n - 1);
      CHECK(z.send_elems == (two_runs ? (n - 1) * 64 * 32 : 0u));  // 64 rows of 2 heads per peer
      for (const dsp::PeerRuns& r : z.sends)
        if (two_runs) CHECK((r.runs.len == r.elems && r.runs.stride == r.elems && r.elems == 64 * 32));
      const CutPlan b = plan_cut(g, heads, blocks, p, n, CutMode::typed_staged);
      CHECK(b.pack.empty());
      CHECK(b.send_elems == 0u);
    }
  }
  // A peer's entries as one run: a single run, runs end to end (stride = length), consecutive entries
  // end to end; not: runs with gaps, entries out of order or apart.
  CHECK(one_run_per_peer(std::vector<dsp::PeerRuns>{{1, dsp::Runs{0, 4, 4}, 4, 8}}));
  CHECK(one_run_per_peer(std::vector<dsp::PeerRuns>{{1, dsp::Runs{3, 9, 9}, 9, 9}, {2, dsp::Runs{0, 5, 5}, 5, 5}}));
  CHECK(one_run_per_peer(std::vector<dsp::PeerRuns>{{1, dsp::Runs{0, 4, 4}, 4, 4}, {1, dsp::Runs{4, 2, 2}, 2, 2}}));
  CHECK_FALSE(one_run_per_peer(std::vector<dsp::PeerRuns>{{1, dsp::Runs{0, 10, 4}, 4, 8}}));
  CHECK_FALSE(
      one_run_per_peer(std::vector<dsp::PeerRuns>{{1, dsp::Runs{4, 2, 2}, 2, 2}, {1, dsp::Runs{0, 4, 4}, 4, 4}}));
  CHECK_FALSE(
      one_run_per_peer(std::vector<dsp::PeerRuns>{{1, dsp::Runs{0, 4, 4}, 4, 4}, {1, dsp::Runs{5, 2, 2}, 2, 2}}));
  // Through redistribute: exact both ways, one typed collective, nothing else.
  const std::size_t n = std::size_t(world().size());
  Counted c{world()};
  const E4 e{1, 64 * n, 2 * n, 16};
  using Z1 = dsp::DistTensor<T, 4, Zigzag<1>, Counted>;
  using S2 = dsp::DistTensor<T, 4, Sharded<2>, Counted>;
  auto z1 = [&] { return Z1{c, e}; };
  auto s2 = [&] { return S2{c, e}; };
  check_move<Sharded<2>, Zigzag<1>>(e, s2, z1, "Sharded<2> -> Zigzag<1>");
  check_move<Zigzag<1>, Sharded<2>>(e, z1, s2, "Zigzag<1> -> Sharded<2>");
  S2 s = s2();
  Z1 z = z1();
  dsp::fill(s, [&](const E4& g) { return ref(g, e); });
  for (int k = 0; k < 3; ++k) {  // warm calls reuse the packed section
    dsp::fill(z, [](const E4&) { return T(-1); });
    c.reset();
    dsp::redistribute<Zigzag<1>>(s, z);
    CHECK(c.counts().all_to_all == 0u);
    CHECK(c.counts().exchange == (n > 1 ? 1u : 0u));
    CHECK(sum_all(dsp::count_mismatches(z, [&](const E4& g) { return ref(g, e); })) == 0);
  }
  // A batch of three [1, 64 N, 2 N, 32] (256-byte receiver runs, 16 KiB chunks): each tensor alone
  // would move without a packed all-to-all-v (typed), so the batch moves tensor by tensor, each tensor
  // staging its own sends: three typed collectives, no all-to-all-v.
  const E4 e3{1, 64 * n, 2 * n, 32};
  S2 a{c, e3}, b{c, e3}, d{c, e3};
  Z1 za{c, e3}, zb{c, e3}, zd{c, e3};
  for (S2* t : {&a, &b, &d}) dsp::fill(*t, [&](const E4& g) { return ref(g, e3); });
  c.reset();
  dsp::redistribute<Zigzag<1>>(dsp::batch(a, b, d), dsp::batch(za, zb, zd));
  CHECK(c.counts().all_to_all == 0u);
  CHECK(c.counts().exchange == (n > 1 ? 3u : 0u));
  for (Z1* t : {&za, &zb, &zd}) CHECK(sum_all(dsp::count_mismatches(*t, [&](const E4& g) { return ref(g, e3); })) == 0);
}

TEST_CASE("Zigzag: a tensor's block, its extents and its global indices") {
  const std::size_t n = std::size_t(world().size()), r = std::size_t(world().rank());
  const E4 e{2, 2 * n + 3, 3, 2};
  dsp::DistTensor<T, 4, Zigzag<1>, dsp::MpiCommunicator> x{world(), e};
  const dsp::Partition chunks{e[1], 2 * n};
  CHECK(x.local_extents()[1] == chunks.count(r) + chunks.count(2 * n - 1 - r));
  CHECK(x.local_offsets()[1] == chunks.offset(r));
  std::size_t second = 0;  // elements visited in the second chunk
  dsp::for_each(x, [&](const E4& g, T) { second += g[1] >= chunks.offset(2 * n - 1 - r); });
  CHECK(second == 2 * chunks.count(2 * n - 1 - r) * 3 * 2);
}

TEST_CASE("redistribute between Zigzag, Sharded, Blocks and Replicated: exact, at the fewest bytes") {
  const std::size_t n = std::size_t(world().size());
  Counted c{world()};
  const std::vector<E4> shapes{{2, 2 * n, 3, 2},
                               {1, 4 * n + 3, 2 * n + 1, 3},
                               {2, 2 * n - 1, 5, 1},
                               {1, 1, 2, 3},
                               {3, 0, 2, 2},
                               {1, 6 * n + 5, 4, 8},
                               {2, 13, n + 1, 2},
                               // 4-8 KiB a peer on average (the packed exchange in eager pieces): E < 2N on
                               // dim 1 (empty chunks), then uneven extents
                               {2, n, 64 * n, 8},
                               {4, 2 * n + 1, 16 * n + 3, 8}};
  for (const auto setting : {dsp::SwitchAlgorithm::automatic, dsp::SwitchAlgorithm::pairwise,
                             dsp::SwitchAlgorithm::datatypes, dsp::SwitchAlgorithm::alltoallv}) {
    dsp::set_switch_algorithm(setting);
    CAPTURE(dsp::to_string(setting));
    for (const E4& e : shapes) {
      using Z1 = dsp::DistTensor<T, 4, Zigzag<1>, Counted>;
      using Z2 = dsp::DistTensor<T, 4, Zigzag<2>, Counted>;
      using S1 = dsp::DistTensor<T, 4, Sharded<1>, Counted>;
      using S2 = dsp::DistTensor<T, 4, Sharded<2>, Counted>;
      using Rp = dsp::DistTensor<T, 4, Replicated, Counted>;
      using B1 = dsp::DistTensor<T, 4, Blocks<1>, Counted>;
      using B2 = dsp::DistTensor<T, 4, Blocks<2>, Counted>;
      auto z1 = [&] { return Z1{c, e}; };
      auto z2 = [&] { return Z2{c, e}; };
      auto s1 = [&] { return S1{c, e}; };
      auto s2 = [&] { return S2{c, e}; };
      auto rp = [&] { return Rp{c, e}; };
      auto b1 = [&] { return B1{c, e, sizes_for(e[1], n)}; };
      auto b2 = [&] { return B2{c, e, sizes_for(e[2], n)}; };
      check_move<Zigzag<1>, Sharded<2>>(e, z1, s2, "Zigzag<1> -> Sharded<2>");
      check_move<Sharded<2>, Zigzag<1>>(e, s2, z1, "Sharded<2> -> Zigzag<1>");
      check_move<Sharded<1>, Zigzag<1>>(e, s1, z1, "Sharded<1> -> Zigzag<1>");
      check_move<Zigzag<1>, Sharded<1>>(e, z1, s1, "Zigzag<1> -> Sharded<1>");
      check_move<Zigzag<1>, Zigzag<2>>(e, z1, z2, "Zigzag<1> -> Zigzag<2>");
      check_move<Zigzag<1>, Replicated>(e, z1, rp, "Zigzag<1> -> Replicated");
      check_move<Replicated, Zigzag<1>>(e, rp, z1, "Replicated -> Zigzag<1>");
      check_move<Blocks<1>, Sharded<2>>(e, b1, s2, "Blocks<1> -> Sharded<2>");
      check_move<Sharded<2>, Blocks<1>>(e, s2, b1, "Sharded<2> -> Blocks<1>");
      check_move<Blocks<1>, Zigzag<1>>(e, b1, z1, "Blocks<1> -> Zigzag<1>");
      check_move<Zigzag<1>, Blocks<1>>(e, z1, b1, "Zigzag<1> -> Blocks<1>");
      check_move<Blocks<1>, Blocks<2>>(e, b1, b2, "Blocks<1> -> Blocks<2>");
      check_move<Blocks<1>, Replicated>(e, b1, rp, "Blocks<1> -> Replicated");
      check_move<Sharded<1>, Blocks<1>>(e, s1, b1, "Sharded<1> -> Blocks<1>");
    }
  }
  dsp::set_switch_algorithm(dsp::SwitchAlgorithm::automatic);
}

TEST_CASE("a cut exchange with long runs on one side only: point to point, the other side staged") {
  // [1, 16 N, 2 N, 4096]: a Zigzag chunk is 8 rows; a part (one chunk's rows, one rank's 2 heads) is one
  // 256 KiB run in the Sharded<2> block and 8 runs of 32 KiB in the Zigzag block (a peer's chunk, 512 KiB,
  // is past the datatypes' rule). The automatic rule sends each part as one message, straight from or
  // into the Sharded side, and stages the Zigzag side: two messages per peer, no collective.
  const std::size_t n = std::size_t(world().size());
  Counted c{world()};
  const E4 e{1, 16 * n, 2 * n, 4096};
  using Z1 = dsp::DistTensor<T, 4, Zigzag<1>, Counted>;
  using S2 = dsp::DistTensor<T, 4, Sharded<2>, Counted>;
  using B1 = dsp::DistTensor<T, 4, Blocks<1>, Counted>;
  auto z1 = [&] { return Z1{c, e}; };
  auto s2 = [&] { return S2{c, e}; };
  auto b1 = [&] { return B1{c, e, sizes_for(e[1], n)}; };
  check_move<Zigzag<1>, Sharded<2>>(e, z1, s2, "Zigzag<1> -> Sharded<2>");
  check_move<Sharded<2>, Zigzag<1>>(e, s2, z1, "Sharded<2> -> Zigzag<1>");
  check_move<Blocks<1>, Sharded<2>>(e, b1, s2, "Blocks<1> -> Sharded<2>");
  check_move<Sharded<2>, Blocks<1>>(e, s2, b1, "Sharded<2> -> Blocks<1>");
  Z1 z = z1();
  S2 s = s2();
  dsp::fill(z, [&](const E4& g) { return ref(g, e); });
  for (const bool back : {false, true}) {
    CAPTURE(back);
    c.reset();
    if (back) dsp::redistribute<Zigzag<1>>(s, z);
    else dsp::redistribute<Sharded<2>>(z, s);
    const auto counts = c.counts();
    CHECK(counts.control <= 1);
    CHECK(counts.all_to_all == 0u);
    CHECK(counts.exchange == (n > 1 ? 1u : 0u));
    CHECK(counts.messages == 2 * (n - 1));
  }
  CHECK(sum_all(dsp::count_mismatches(z, [&](const E4& g) { return ref(g, e); })) == 0);
  // MPI's count limit lowered (an odd one): each 64 Ki-element message goes as 7 on both sides alike.
  const std::size_t saved = dsp::detail::mpi_count_limit();
  dsp::detail::mpi_count_limit() = 9999;
  S2 s3 = s2();
  dsp::redistribute<Sharded<2>>(z, s3);
  dsp::fill(z, [](const E4&) { return T(-1); });
  dsp::redistribute<Zigzag<1>>(s3, z);
  dsp::detail::mpi_count_limit() = saved;
  CHECK(sum_all(dsp::count_mismatches(s3, [&](const E4& g) { return ref(g, e); })) == 0);
  CHECK(sum_all(dsp::count_mismatches(z, [&](const E4& g) { return ref(g, e); })) == 0);
}

TEST_CASE("redistribute<Zigzag<D>>(x) allocates its output; a round trip returns the tensor") {
  const std::size_t n = std::size_t(world().size());
  const E4 e{2, 3 * n + 1, 2 * n, 4};
  dsp::DistTensor<T, 4, Sharded<2>, dsp::MpiCommunicator> x{world(), e};
  dsp::fill(x, [&](const E4& g) { return ref(g, e); });
  auto z = dsp::redistribute<Zigzag<1>>(x);
  static_assert(std::is_same_v<decltype(z), dsp::DistTensor<T, 4, Zigzag<1>, dsp::MpiCommunicator>>);
  CHECK(sum_all(dsp::count_mismatches(z, [&](const E4& g) { return ref(g, e); })) == 0);
  auto back = dsp::redistribute<Sharded<2>>(z);
  CHECK(sum_all(dsp::count_mismatches(back, [&](const E4& g) { return ref(g, e); })) == 0);
  auto rep = dsp::redistribute<Replicated>(z);
  CHECK(sum_all(dsp::count_mismatches(rep, [&](const E4& g) { return ref(g, e); })) == 0);
}

TEST_CASE("Blocks: sizes as constructed; bad or disagreeing sizes raise on every rank") {
  const std::size_t n = std::size_t(world().size());
  const int r = world().rank();
  using B1 = dsp::DistTensor<T, 3, Blocks<1>, dsp::MpiCommunicator>;
  const std::vector<std::size_t> good = sizes_for(10, n);
  B1 x{world(), {2, 10, 3}, good};
  CHECK(x.block_sizes() == good);
  CHECK(x.local_extents()[1] == good[std::size_t(r)]);

  // Sizes that do not sum to the extent: every rank raises, naming the sum.
  std::vector<std::size_t> bad = good;
  bad[0] += 1;
  const std::string sum = error_of([&] { B1 y{world(), {2, 10, 3}, bad}; });
  CHECK_MESSAGE(sum.find("sum to 11, not to the extent 10") != std::string::npos, sum);
  // One size per rank.
  std::vector<std::size_t> more = good;
  more.push_back(0);
  const std::string count = error_of([&] { B1 y{world(), {2, 10, 3}, more}; });
  CHECK(count.find("one size per rank") != std::string::npos);
  // Ranks that disagree: every rank raises (a valid set on each rank).
  if (n > 1) {
    std::vector<std::size_t> mine = good;
    if (r == 0) mine = std::vector<std::size_t>(n, 0), mine[n - 1] = 10;
    const std::string dis = error_of([&] { B1 y{world(), {2, 10, 3}, mine}; });
    CHECK(dis.find("Blocks sizes disagree") != std::string::npos);
    CHECK(dis.find("passed " + dsp::detail::text(std::span<const std::size_t>(mine))) != std::string::npos);
  }
  // The communicator still works: the next call agrees.
  dsp::DistTensor<T, 3, Sharded<2>, dsp::MpiCommunicator> s{world(), {2, 10, 3}};
  dsp::fill(s, [](const std::array<std::size_t, 3>& g) { return T(g[0] * 100 + g[1] * 10 + g[2]); });
  dsp::redistribute<Blocks<1>>(s, x);
  CHECK(sum_all(dsp::count_mismatches(
            x, [](const std::array<std::size_t, 3>& g) { return T(g[0] * 100 + g[1] * 10 + g[2]); })) == 0);
}

TEST_CASE("redistribute with a cut: a wrong output raises on every rank, nothing moves") {
  const std::size_t n = std::size_t(world().size());
  dsp::DistTensor<T, 3, Zigzag<1>, dsp::MpiCommunicator> x{world(), {2, 4 * n, 3}};
  dsp::fill(x, [](const std::array<std::size_t, 3>& g) { return T(1 + g[1]); });
  dsp::DistTensor<T, 3, Sharded<2>, dsp::MpiCommunicator> y{world(), {2, 4 * n + 1, 3}};
  const std::string why = error_of([&] { dsp::redistribute<Sharded<2>>(x, y); });
  CHECK(why.find("global extents") != std::string::npos);
  CHECK(sum_all(dsp::count_mismatches(x, [](const std::array<std::size_t, 3>& g) { return T(1 + g[1]); })) == 0);
}

TEST_CASE("reshard from and to Blocks: one box per rank, between groups") {
  const std::size_t n = std::size_t(world().size());
  const int me = world().rank();
  const std::array<std::size_t, 3> e{3, 11, 2};
  auto val = [](const std::array<std::size_t, 3>& g) { return T(g[0] * 1000 + g[1] * 10 + g[2]); };
  // x: Blocks<1> on every rank; y: Sharded<0> on the first ceil(n/2) ranks, then back into Blocks.
  dsp::DistTensor<T, 3, Blocks<1>, dsp::MpiCommunicator> x{world(), e, sizes_for(e[1], n)};
  dsp::fill(x, val);
  const int k = int((n + 1) / 2);
  dsp::MpiCommunicator half = world().split(me < k ? 0 : 1, me);
  std::optional<dsp::DistTensor<T, 3, Sharded<0>, dsp::MpiCommunicator>> y;
  if (me < k) y.emplace(half, e);
  dsp::reshard(world(), &x, y ? &*y : nullptr);
  if (y) CHECK(dsp::count_mismatches(*y, val) == 0);
  std::vector<std::size_t> rev = sizes_for(e[1], n);
  std::reverse(rev.begin(), rev.end());
  dsp::DistTensor<T, 3, Blocks<1>, dsp::MpiCommunicator> z{world(), e, rev};
  dsp::reshard(world(), y ? &*y : nullptr, &z);
  CHECK(sum_all(dsp::count_mismatches(z, val)) == 0);
}

TEST_CASE("batches: Q with GQA's K and V (other extents) in one call, Zigzag or Sharded, any element types") {
  const std::size_t n = std::size_t(world().size());
  Counted c{world()};
  const std::size_t B = 2, S = 4 * n + 3, H = 2 * n, Hkv = n > 1 ? n / 2 + 1 : 1, d = 3;
  const E4 eq{B, S, H, d}, ekv{B, S, Hkv, d};
  auto ref_of = [](const E4& e, int which) { return [e, which](const E4& g) { return ref(g, e) + T(which * 7); }; };
  for (const auto setting :
       {dsp::SwitchAlgorithm::automatic, dsp::SwitchAlgorithm::pairwise, dsp::SwitchAlgorithm::alltoallv}) {
    dsp::set_switch_algorithm(setting);
    CAPTURE(dsp::to_string(setting));
    // Zigzag<1> -> Sharded<2>, allocating; then back into existing Zigzag tensors.
    dsp::DistTensor<T, 4, Zigzag<1>, Counted> q{c, eq}, k{c, ekv}, v{c, ekv};
    dsp::fill(q, ref_of(eq, 0)), dsp::fill(k, ref_of(ekv, 1)), dsp::fill(v, ref_of(ekv, 2));
    c.reset();
    auto [qh, kh, vh] = dsp::redistribute<Sharded<2>>(dsp::batch(q, k, v));
    CHECK(sum_all(dsp::count_mismatches(qh, ref_of(eq, 0))) == 0);
    CHECK(sum_all(dsp::count_mismatches(kh, ref_of(ekv, 1))) == 0);
    CHECK(sum_all(dsp::count_mismatches(vh, ref_of(ekv, 2))) == 0);
    CHECK(sum_all(dsp::count_mismatches(k, ref_of(ekv, 1))) == 0);  // the inputs untouched
    const auto zq = side<Zigzag<1>>(q), zk = side<Zigzag<1>>(k), sq = side<Sharded<2>>(qh), sk = side<Sharded<2>>(kh);
    const std::size_t fewest =
        must_move(eq, zq.dim, zq.cut, sq.dim, sq.cut) + 2 * must_move(ekv, zk.dim, zk.cut, sk.dim, sk.cut);
    CHECK(sum_all(c.counts().bytes_sent) == fewest * sizeof(T));
    dsp::DistTensor<T, 4, Zigzag<1>, Counted> q2{c, eq}, k2{c, ekv}, v2{c, ekv};
    dsp::redistribute<Zigzag<1>>(dsp::batch(qh, kh, vh), dsp::batch(q2, k2, v2));
    CHECK(sum_all(dsp::count_mismatches(q2, ref_of(eq, 0)) + dsp::count_mismatches(k2, ref_of(ekv, 1)) +
                  dsp::count_mismatches(v2, ref_of(ekv, 2))) == 0);
    // Sharded<1> -> Sharded<2> of other extents and element types: dynamic_switch and redistribute.
    dsp::DistTensor<T, 4, Sharded<1>, Counted> qs{c, eq};
    dsp::DistTensor<double, 4, Sharded<1>, Counted> ks{c, ekv};
    dsp::DistTensor<std::int16_t, 4, Sharded<1>, Counted> ms{c, {B, S, 1, 1}};  // 2-byte elements: sections aligned
    dsp::fill(qs, ref_of(eq, 0)), dsp::fill(ks, ref_of(ekv, 1));
    dsp::fill(ms, [](const E4& g) { return std::int16_t(g[0] * 100 + g[1]); });
    auto [qs2, ks2, ms2] = dsp::dynamic_switch<2>(dsp::batch(qs, ks, ms));
    CHECK(sum_all(dsp::count_mismatches(qs2, ref_of(eq, 0))) == 0);
    CHECK(sum_all(dsp::count_mismatches(ks2, ref_of(ekv, 1))) == 0);
    CHECK(sum_all(dsp::count_mismatches(ms2, [](const E4& g) { return std::int16_t(g[0] * 100 + g[1]); })) == 0);
    auto [qs3, ks3, ms3] = dsp::redistribute<Sharded<1>>(dsp::batch(qs2, ks2, ms2));
    CHECK(sum_all(dsp::count_mismatches(ks3, ref_of(ekv, 1))) == 0);
    CHECK(sum_all(dsp::count_mismatches(ms3, [](const E4& g) { return std::int16_t(g[0] * 100 + g[1]); })) == 0);
    // Blocks in a batch, into existing outputs.
    dsp::DistTensor<T, 4, Blocks<1>, Counted> qb{c, eq, sizes_for(S, n)}, kb{c, ekv, sizes_for(S, n)};
    dsp::redistribute<Blocks<1>>(dsp::batch(qh, kh), dsp::batch(qb, kb));
    CHECK(sum_all(dsp::count_mismatches(qb, ref_of(eq, 0)) + dsp::count_mismatches(kb, ref_of(ekv, 1))) == 0);
  }
  dsp::set_switch_algorithm(dsp::SwitchAlgorithm::automatic);
}

TEST_CASE("batches of other extents: ranks that disagree, or a wire that does not carry a tensor, raise everywhere") {
  const int me = world().rank(), n = world().size();
  using F = dsp::DistTensor<float, 3, Sharded<0>, dsp::MpiCommunicator>;
  F q{world(), {6, 5, 4}}, k{world(), {6, 5, 2}};
  dsp::fill(q, [](const std::array<std::size_t, 3>& g) { return float(g[0] + g[1] + g[2]); });
  // Only the last rank's batch mixes extents: every rank raises, naming the batch's extents.
  F w{world(), {6, 5, me == n - 1 ? std::size_t(2) : std::size_t(4)}};
  const std::string e = error_of([&] { (void)dsp::dynamic_switch<1>(dsp::batch(q, w)); });
  if (n > 1) CHECK(e.find("the extents (or Blocks sizes) of the batch's tensors disagree") != std::string::npos);
  if (n == 1) CHECK(e.empty());
  // bf16 does not carry double: every rank raises before anything moves.
  dsp::DistTensor<double, 3, Sharded<0>, dsp::MpiCommunicator> kd{world(), {6, 5, 2}};
  const std::string d = error_of([&] { (void)dsp::dynamic_switch<1>(dsp::batch(q, kd), dsp::Wire::bf16); });
  CHECK(d.find("the bf16 wire does not carry double tensors (tensor 1 of the batch)") != std::string::npos);
  CHECK(sum_all(dsp::count_mismatches(
            q, [](const std::array<std::size_t, 3>& g) { return float(g[0] + g[1] + g[2]); })) == 0);
}

namespace {
/// Float values with every mantissa bit in use, |v| < 5.
float wire_value(const E4& e, const E4& g) {
  return float((linear(g, e) * 2654435761u) % 100003u) * 1.00007e-4f - 5.0f;
}
/// The elements of y (of tensor extents e) that are not what `w` makes of
/// them: bf16 and fp16 exactly the rounding; fp8 within wire.hpp's bound (the
/// block's largest value below 5), `times` the bound after as many steps;
/// `exact`: no wire step (a split).
template <class Y>
std::size_t off_wire(const Y& y, const E4& e, dsp::Wire w, bool exact, double times = 1) {
  std::size_t wrong = 0;
  dsp::for_each(y, [&](const E4& g, float v) {
    const float x = wire_value(e, g);
    if (exact || w != dsp::Wire::fp8_e4m3) {
      wrong += v != (exact ? x : dsp::detail::round_wire(w, x));
    } else {
      const double bound = times * (std::ldexp(std::fabs(double(x)), -4) + std::ldexp(5.5, -10) / 448) * (1 + 1e-6);
      wrong += !(std::fabs(double(v) - double(x)) <= bound);
    }
  });
  return wrong;
}
}  // namespace

TEST_CASE("on a wire: Zigzag, Blocks and batches of other extents round as the wire does, at the wire's bytes") {
  const std::size_t n = std::size_t(world().size());
  Counted c{world()};
  const std::vector<E4> shapes{
      {2, 2 * n, 3, 2}, {1, 4 * n + 3, 2 * n + 1, 3}, {1, 1, 2, 3}, {3, 0, 2, 2}, {1, 6 * n + 5, 4, 40}};
  for (const dsp::Wire w : {dsp::Wire::bf16, dsp::Wire::fp16, dsp::Wire::fp8_e4m3}) {
    CAPTURE(std::string(dsp::wire_name(w)));
    for (const E4& e : shapes) {
      const std::string shape = dsp::detail::text(std::span<const std::size_t>(e));
      CAPTURE(shape);
      auto val = [&](const E4& g) { return wire_value(e, g); };
      dsp::DistTensor<float, 4, Zigzag<1>, Counted> z{c, e};
      dsp::fill(z, val);
      // Zigzag -> Sharded, into an existing tensor: the bytes of the wire's sections.
      dsp::DistTensor<float, 4, Sharded<2>, Counted> s{c, e};
      c.reset();
      dsp::redistribute<Sharded<2>>(z, s, w);
      CHECK(sum_all(off_wire(s, e, w, false)) == 0);
      CHECK(sum_all(off_wire(z, e, w, true)) == 0);  // the input untouched
      const auto a = side<Zigzag<1>>(z), b = side<Sharded<2>>(s);
      const std::size_t moved = must_move(e, a.dim, a.cut, b.dim, b.cut), sent = sum_all(c.counts().bytes_sent);
      if (w == dsp::Wire::bf16) {  // 2 bytes per element, each section padded to 4 bytes
        CHECK(sent >= 2 * moved);
        CHECK(sent <= 2 * moved + 2 * n * n);
      }
      // Sharded -> Zigzag, allocating; to Replicated; from Replicated (a split: exact).
      auto z2 = dsp::redistribute<Zigzag<1>>(s, w);
      CHECK(sum_all(off_wire(z2, e, w, false, 2.2)) == 0);  // bf16 and fp16 rounding is idempotent; fp8 twice
      auto r = dsp::redistribute<Replicated>(z, w);
      CHECK(sum_all(off_wire(r, e, w, false)) == 0);
      dsp::DistTensor<float, 4, Replicated, Counted> full{c, e};
      dsp::fill(full, val);
      auto z3 = dsp::redistribute<Zigzag<1>>(full, w);
      CHECK(sum_all(off_wire(z3, e, w, true)) == 0);
      // Blocks -> Zigzag, into an existing tensor.
      dsp::DistTensor<float, 4, Blocks<1>, Counted> bl{c, e, sizes_for(e[1], n)};
      dsp::fill(bl, val);
      dsp::DistTensor<float, 4, Zigzag<1>, Counted> z4{c, e};
      dsp::redistribute<Zigzag<1>>(bl, z4, w);
      CHECK(sum_all(off_wire(z4, e, w, false)) == 0);
    }
    // A GQA batch: Q and K of other extents, Zigzag to Sharded and Sharded to Sharded, in one exchange each.
    const std::size_t S = 4 * n + 3, H = 2 * n, Hkv = n > 1 ? n / 2 + 1 : 1;
    const E4 eq{2, S, H, 3}, ek{2, S, Hkv, 3};
    dsp::DistTensor<float, 4, Zigzag<1>, Counted> q{c, eq}, k{c, ek};
    dsp::fill(q, [&](const E4& g) { return wire_value(eq, g); });
    dsp::fill(k, [&](const E4& g) { return wire_value(ek, g); });
    auto [qh, kh] = dsp::redistribute<Sharded<2>>(dsp::batch(q, k), w);
    CHECK(sum_all(off_wire(qh, eq, w, false) + off_wire(kh, ek, w, false)) == 0);
    dsp::DistTensor<float, 4, Sharded<1>, Counted> qs{c, eq}, ks{c, ek};
    dsp::fill(qs, [&](const E4& g) { return wire_value(eq, g); });
    dsp::fill(ks, [&](const E4& g) { return wire_value(ek, g); });
    auto [qs2, ks2] = dsp::dynamic_switch<2>(dsp::batch(qs, ks), w);
    CHECK(sum_all(off_wire(qs2, eq, w, false) + off_wire(ks2, ek, w, false)) == 0);
  }
}

TEST_CASE("transition_cost of Zigzag is a constant expression") {
  constexpr auto c = dsp::transition_cost<Zigzag<1>, Sharded<2>>(std::array<std::size_t, 4>{1, 8, 4, 2}, 4, 2, 0);
  // Rank 0 holds chunks 0 and 3 (4 positions of 8), keeps heads 0-1 of them: sends 4 x 2 x 2 floats.
  static_assert(c.bytes == 4 * 2 * 2 * 4 && c.collectives == 1);
  constexpr auto r = dsp::transition_cost<Replicated, Zigzag<1>>(std::array<std::size_t, 4>{1, 8, 4, 2}, 4, 2, 0);
  static_assert(r.bytes == 0 && r.collectives == 0);
  CHECK(c.max_bytes == c.bytes);
}
