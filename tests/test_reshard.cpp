// SPDX-License-Identifier: BSD-3-Clause
// dsp::reshard between groups of ranks of one parent: a mesh to a reversed
// group, grow, shrink, disjoint and overlapping groups, ranks in neither,
// Replicated on either side, Zigzag blocks (two boxes each), empty blocks;
// every element of y right, x unchanged, counted bytes equal to what the
// receivers lack (each element moves once); errors raise on every rank and
// write nothing.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <string>

using namespace dsp_test;

namespace {

using Comm = dsp::MpiCommunicator;
using Counting = dsp::CountingCommunicator<Comm>;
using dsp::Replicated;
using dsp::Sharded;

/// The group of parent ranks for which `in` holds, ordered by `key` (the
/// communicator of the others is made too, and not used).
std::optional<Comm> group(bool in, int key) {
  Comm c = world().split(in ? 0 : 1, key);
  if (!in) return std::nullopt;
  return c;
}

double value(const std::array<std::size_t, 3>& g) { return double(g[0] * 10000 + g[1] * 100 + g[2]) + 0.5; }

std::size_t sum_over_ranks(std::size_t v) {
  unsigned long long in = v, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return std::size_t(out);
}

/// Whether x's block holds global element g (a Zigzag block: either chunk).
template <class X>
bool holds(const X& x, const std::array<std::size_t, 3>& g) {
  using L = typename X::layout_type;
  const auto o = x.local_offsets(), c = x.local_extents();
  for (std::size_t d = 0; d < 3; ++d) {
    if constexpr (dsp::is_zigzag_v<L>) {
      if (d == L::dim) {
        dsp::Piece p[2];
        x.cut().pieces(std::size_t(x.communicator().rank()), p);
        if (!(g[d] - p[0].offset < p[0].count || g[d] - p[1].offset < p[1].count)) return false;
        continue;
      }
    }
    if (g[d] < o[d] || g[d] >= o[d] + c[d]) return false;
  }
  return true;
}

/// Elements of y's block not in x's block on this rank (what it must receive).
template <class X, class Y>
std::size_t lacking(const X* x, const Y* y) {
  if (!y) return 0;
  std::size_t n = 0;
  dsp::for_each(*y, [&](const auto& g, const auto&) { n += !x || !holds(*x, g); });
  return n;
}

/// Reshards x (on its group, if this rank is in it) into y and checks y, x
/// and the bytes (through a counting parent): every element a rank lacks
/// arrives once, and a Replicated source sends each element at most once.
template <class X, class Y>
void check(const X* x, Y* y, bool replicated_source) {
  static Counting parent{world()};
  if (x) dsp::fill(*x, value);
  if (y) dsp::fill(*y, [](const auto&) { return -1.0; });
  parent.reset();
  dsp::reshard(parent, x, y);
  if (y) CHECK(dsp::count_mismatches(*y, value) == 0);
  if (x) CHECK(dsp::count_mismatches(*x, value) == 0);
  const std::size_t want = sum_over_ranks(lacking(x, y)) * sizeof(double);
  const std::size_t sent = sum_over_ranks(parent.counts().bytes_sent);
  CHECK(sent == want);
  (void)replicated_source;
}

/// Reshards an X on the first half of the ranks into a Y on the second half
/// (with an odd count, the last rank is in neither).
template <class X, class Y>
void check_halves(const std::array<std::size_t, 3>& e) {
  const int n = world().size(), me = world().rank();
  if (n < 2) return;
  const int h = n / 2;
  auto lo = group(me < h, me);
  auto hi = group(me >= h && me < 2 * h, me);
  std::optional<X> x;
  std::optional<Y> y;
  if (lo) x.emplace(*lo, e);
  if (hi) y.emplace(*hi, e);
  check(x ? &*x : nullptr, y ? &*y : nullptr, false);
}

}  // namespace

TEST_CASE("reshard: a mesh to the same ranks in reverse order, and back") {
  const int n = world().size(), me = world().rank();
  auto rev = group(true, -me);
  const std::array<std::size_t, 3> e{7, 5, 2 * std::size_t(n) + 1};
  if (n % 2 == 0) {
    dsp::Mesh<2, Comm> mesh{world(), {2, n / 2}};
    dsp::DistTensor<double, 3, dsp::Axes<Sharded<0>, Sharded<2>>, dsp::Mesh<2, Comm>> x{mesh, e};
    dsp::DistTensor<double, 3, Sharded<1>, Comm> y{*rev, e};
    check(&x, &y, false);
    dsp::DistTensor<double, 3, dsp::Axes<Replicated, Sharded<1>>, dsp::Mesh<2, Comm>> z{mesh, e};
    check(&y, &z, false);
    check(&z, &y, true);  // a Replicated axis: its holders split the sending
  }
  dsp::DistTensor<double, 3, Sharded<2>, Comm> a{world(), e};
  dsp::DistTensor<double, 3, Sharded<2>, Comm> b{*rev, e};
  check(&a, &b, false);
}

TEST_CASE("reshard: grow, shrink, disjoint and overlapping groups, ranks in neither") {
  const int n = world().size(), me = world().rank();
  const std::array<std::size_t, 3> e{6, 9, 4};
  using S0 = dsp::DistTensor<double, 3, Sharded<0>, Comm>;
  using S1 = dsp::DistTensor<double, 3, Sharded<1>, Comm>;
  using Rep = dsp::DistTensor<double, 3, Replicated, Comm>;
  // Grow: the first ranks (at most 2) to all.
  {
    const int k = std::min(n, 2);
    auto small = group(me < k, me);
    std::optional<S0> x;
    if (small) x.emplace(*small, e);
    S1 y{world(), e};
    check(x ? &*x : nullptr, &y, false);
    // And shrink back: all to the first ranks (at most 3), Replicated there.
    auto three = group(me < std::min(n, 3), me);
    std::optional<Rep> z;
    if (three) z.emplace(*three, e);
    check(&y, z ? &*z : nullptr, false);
    // Replicated to Sharded on all: each receiver's part split among holders.
    check(z ? &*z : nullptr, &y, true);
  }
  // Disjoint: the first half to the second half; ranks in neither with 5 ranks or more.
  check_halves<S0, S1>(e);
  // Overlapping: ranks [0, n-1) to ranks [1, n).
  if (n >= 3) {
    auto a = group(me < n - 1, me);
    auto b = group(me >= 1, me);
    std::optional<S1> x;
    std::optional<S0> y;
    if (a) x.emplace(*a, e);
    if (b) y.emplace(*b, e);
    check(x ? &*x : nullptr, y ? &*y : nullptr, false);
  }
}

TEST_CASE("reshard: Zigzag blocks (two chunks each) to and from other layouts and groups") {
  const int n = world().size(), me = world().rank();
  const std::array<std::size_t, 3> e{6, 9, 4};  // dim 0: 6 rows, fewer than 2N past 3 ranks (empty chunks)
  using Z0 = dsp::DistTensor<double, 3, dsp::Zigzag<0>, Comm>;
  using Z1 = dsp::DistTensor<double, 3, dsp::Zigzag<1>, Comm>;
  using S0 = dsp::DistTensor<double, 3, Sharded<0>, Comm>;
  using S1 = dsp::DistTensor<double, 3, Sharded<1>, Comm>;
  using Rep = dsp::DistTensor<double, 3, Replicated, Comm>;
  auto first = [&](int k) { return group(me < std::min(n, k), me); };
  auto rev = group(true, -me);
  // Shrink from Zigzag: all ranks to the first two, Sharded there; grow back into Zigzag.
  {
    Z1 z{world(), e};
    auto two = first(2);
    std::optional<S0> s;
    if (two) s.emplace(*two, e);
    check(&z, s ? &*s : nullptr, false);
    check(s ? &*s : nullptr, &z, false);
  }
  // Zigzag to Zigzag: another dim on a reversed group (two chunks on both sides), and the same dim.
  {
    Z0 a{*rev, e};
    Z1 b{world(), e};
    check(&a, &b, false);
    Z1 c{*rev, e};
    check(&b, &c, false);
    check(&c, &b, false);
  }
  // Zigzag into Replicated on the first three, and from Replicated (split among holders) into Zigzag.
  {
    Z0 z{world(), e};
    auto three = first(3);
    std::optional<Rep> r;
    if (three) r.emplace(*three, e);
    check(&z, r ? &*r : nullptr, false);
    Z1 w{world(), e};
    check(r ? &*r : nullptr, &w, true);
  }
  // Disjoint halves: Zigzag on the first to Sharded on the second.
  check_halves<Z1, S1>(e);
}

TEST_CASE("reshard: empty blocks and an empty tensor") {
  const int n = world().size();
  auto rev = group(true, -world().rank());
  // Dim 0 of 1: every rank but one holds an empty block on both sides.
  const std::array<std::size_t, 3> e{1, 3, 2};
  dsp::DistTensor<double, 3, Sharded<0>, Comm> x{world(), e};
  dsp::DistTensor<double, 3, Sharded<0>, Comm> y{*rev, e};
  check(&x, &y, false);
  const std::array<std::size_t, 3> z{0, 3, 2};
  dsp::DistTensor<double, 3, Sharded<1>, Comm> a{world(), z};
  dsp::DistTensor<double, 3, Sharded<2>, Comm> b{*rev, z};
  dsp::reshard(world(), &a, &b);
  (void)n;
}

TEST_CASE("reshard: errors raise on every rank and write nothing") {
  const int n = world().size(), me = world().rank();
  auto rev = group(true, -me);
  auto expect = [&](auto&& call, const std::string& what) {
    std::string got;
    try {
      call();
    } catch (const dsp::Error& e) {
      got = e.what();
    }
    INFO(got);
    CHECK(got.find(what) != std::string::npos);
  };
  dsp::DistTensor<double, 3, Sharded<0>, Comm> x{world(), {4, 3, 2}};
  dsp::fill(x, value);
  // y of other extents on some rank (the last); others agree.
  dsp::DistTensor<double, 3, Sharded<1>, Comm> y{*rev, {4, 3, me == n - 1 && n > 1 ? 3 : 2}};
  dsp::fill(y, [](const auto&) { return -1.0; });
  if (n > 1) {
    // The last rank holds both and sees it itself; the others learn it from the check.
    expect([&] { dsp::reshard(world(), &x, &y); },
           me == n - 1 ? "x and y have different global extents: x [4, 3, 2], y [4, 3, 3]"
                       : "rank " + std::to_string(n - 1) + " could not take part because its output tensor is invalid");
    CHECK(dsp::count_mismatches(y, [](const auto&) { return -1.0; }) == 0);
    // Holders that disagree without holding both: the table shows it.
    auto first = group(me < n - 1, me);
    auto last = group(me == n - 1, me);
    std::optional<dsp::DistTensor<double, 3, Sharded<0>, Comm>> a;
    std::optional<dsp::DistTensor<double, 3, Sharded<1>, Comm>> b;
    if (first) a.emplace(*first, std::array<std::size_t, 3>{4, 3, 2});
    if (last) b.emplace(*last, std::array<std::size_t, 3>{4, 3, 5});
    if (a) dsp::fill(*a, value);
    if (b) dsp::fill(*b, [](const auto&) { return -1.0; });
    expect([&] { dsp::reshard(world(), a ? &*a : nullptr, b ? &*b : nullptr); },
           "global extents disagree: rank 0 [4,3,2], rank " + std::to_string(n - 1) + " [4,3,5]");
    if (b) CHECK(dsp::count_mismatches(*b, [](const auto&) { return -1.0; }) == 0);
  }
  // A source passed by only some ranks of its group.
  if (n > 1) {
    dsp::DistTensor<double, 3, Sharded<1>, Comm> w{world(), {4, 3, 2}};
    expect([&] { dsp::reshard(world(), me == 0 ? nullptr : &x, &w); },
           "x lives on a group of " + std::to_string(n) + " ranks, but " + std::to_string(n - 1) +
               (n - 1 == 1 ? " rank" : " ranks") + " of the parent passed it: every rank of x's group must pass it");
    // Regression: a rank of y's group passing nullptr silently kept stale data.
    dsp::fill(w, [](const auto&) { return -1.0; });
    expect([&] { dsp::reshard(world(), &x, me == n - 1 ? nullptr : &w); },
           "y lives on a group of " + std::to_string(n) + " ranks, but " + std::to_string(n - 1) +
               (n - 1 == 1 ? " rank" : " ranks") + " of the parent passed it: every rank of y's group must pass it " +
               "(a rank that passes nullptr would keep stale data)");
    CHECK(dsp::count_mismatches(w, [](const auto&) { return -1.0; }) == 0);
    // Regression: a parent smaller than x's group (every rank passing x) was
    // told "x must be passed by every rank of its group".
    Comm head = world().split(me < n - 1 ? 0 : 1, me);
    if (me < n - 1) {
      dsp::DistTensor<double, 3, Sharded<1>, Comm> v{head, {4, 3, 2}};
      expect([&] { dsp::reshard(head, &x, &v); }, "the parent (" + std::to_string(n - 1) +
                                                      " ranks) is smaller than x's group; pass a parent that contains "
                                                      "every rank of both groups");
    }
  }
  // Targets under different layouts on different ranks (rank 0 Sharded<1>, the others Sharded<2>):
  // their blocks overlap without being equal. Every rank raises; nothing is written.
  if (n > 2) {
    std::optional<dsp::DistTensor<double, 3, Sharded<1>, Comm>> t1;
    std::optional<dsp::DistTensor<double, 3, Sharded<2>, Comm>> t2;
    // Sharded<1> and Sharded<2> of [4, 3, 2] over n ranks: rank 0's dim-1 slab meets the others' dim-2 slabs.
    if (me == 0) t1.emplace(world(), std::array<std::size_t, 3>{4, 3, 2});
    else t2.emplace(world(), std::array<std::size_t, 3>{4, 3, 2});
    if (t1) dsp::fill(*t1, [](const auto&) { return -1.0; });
    if (t2) dsp::fill(*t2, [](const auto&) { return -1.0; });
    auto to = [&](auto& t) { dsp::reshard(world(), &x, &t); };  // one call site on every rank
    expect(
        [&] {
      if (t1) to(*t1);
      else to(*t2);
        },
        "y's holders do not form one layout");
    if (t1) CHECK(dsp::count_mismatches(*t1, [](const auto&) { return -1.0; }) == 0);
    if (t2) CHECK(dsp::count_mismatches(*t2, [](const auto&) { return -1.0; }) == 0);
  }
  // Nobody passes a target.
  expect([&] { dsp::reshard(world(), &x, static_cast<decltype(y)*>(nullptr)); }, "no rank passed a target tensor");
  // y overlapping x on one rank: its own error there, MismatchError elsewhere.
  dsp::DistTensor<double, 3, Sharded<0>, Comm> same{world(), {4, 3, 2}};
  expect([&] { dsp::reshard(world(), &x, me == 0 ? &x : &same); }, "dsp::reshard");
  CHECK(dsp::count_mismatches(x, value) == 0);
}
