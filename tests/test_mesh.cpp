// SPDX-License-Identifier: BSD-3-Clause
// Process meshes and dsp::redistribute: every pair of a set of placements
// (nested, Replicated and Partial ones included) on meshes of 1, 2 and 3 axes
// at every shape the rank count allows, for random tensors of rank 2 to 5 with
// uneven and empty extents, against the serial reference (element g holds
// f(g)); counted bytes equal the cost model for every plan; disagreement
// raises on every rank.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <dsp/comm/counting.hpp>

#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace dsp_test;
using dsp::Axes;
using dsp::Partial;
using dsp::Replicated;
using dsp::Sharded;

namespace {

using T = std::int64_t;  // exact under sums, so Partial tensors check exactly

template <std::size_t K>
using MeshOf = dsp::Mesh<K, dsp::MpiCommunicator>;

/// Every shape of K axes whose product is n.
template <std::size_t K>
std::vector<std::array<int, K>> shapes(int n) {
  std::vector<std::array<int, K>> out;
  std::array<int, K> s{};
  auto rec = [&](auto&& self, std::size_t a, int rest) -> void {
    if (a + 1 == K) {
      s[a] = rest;
      out.push_back(s);
      return;
    }
    for (int d = 1; d <= rest; ++d)
      if (rest % d == 0) {
        s[a] = d;
        self(self, a + 1, rest / d);
      }
  };
  rec(rec, 0, n);
  return out;
}

/// The codes of the Partial axes of a layout, and this rank's coordinates on them.
template <class L, std::size_t K>
std::vector<std::size_t> partial_axes() {
  std::vector<std::size_t> a;
  constexpr auto codes = dsp::detail::placement_codes<L>::value;
  for (std::size_t k = 0; k < K; ++k)
    if (codes[k] <= dsp::detail::kPartialSum) a.push_back(k);
  return a;
}

/// A piece of the value at linear index g held by the rank whose coordinates
/// on the Partial axes are `c` (their extents `n`): the pieces reduce (sum,
/// max or min) to value_at(g) over those coordinates.
T piece(std::size_t g, const std::vector<int>& c, const std::vector<int>& n, long code) {
  const T v = value_at<T>(g);
  std::size_t lin = 0, total = 1;
  for (std::size_t k = 0; k < c.size(); ++k)
    lin = lin * std::size_t(n[k]) + std::size_t(c[k]), total *= std::size_t(n[k]);
  if (code == dsp::detail::kPartialMax) return lin == 0 ? v : v - T(lin);
  if (code == dsp::detail::kPartialMin) return lin == 0 ? v : v + T(lin);
  // Sum: rank lin > 0 holds a deterministic h, rank 0 the rest.
  auto h = [&](std::size_t l) { return T((g * 7 + l * 13) % 29) - 14; };
  if (lin != 0) return h(lin);
  T rest = v;
  for (std::size_t l = 1; l < total; ++l) rest -= h(l);
  return rest;
}

/// Fills a tensor of layout L with the reference (pieces on Partial axes).
template <class X>
void fill_layout(const X& x) {
  using L = typename X::layout_type;
  using G = typename X::communicator_type;
  constexpr std::size_t K = dsp::detail::group_traits<G>::axes;
  const auto pa = partial_axes<L, K>();
  const auto shape = dsp::detail::group_traits<G>::shape(x.communicator());
  const auto coords = dsp::detail::group_traits<G>::coords(x.communicator());
  std::vector<int> c, n;
  long code = 0;
  for (std::size_t a : pa)
    c.push_back(coords[a]), n.push_back(shape[a]), code = dsp::detail::placement_codes<L>::value[a];
  T* p = x.local().data();
  for_each_local(x, [&](auto&, auto& g, std::size_t k) {
    const std::size_t lin = linear(g, x.global_extents());
    p[k] = pa.empty() ? value_at<T>(lin) : piece(lin, c, n, code);
  });
}

/// Whether a layout has Partial axes.
template <class L>
constexpr bool has_partial() {
  for (long c : dsp::detail::placement_codes<L>::value)
    if (c <= dsp::detail::kPartialSum) return true;
  return false;
}

/// The number of wrong elements of y (layout To): compared directly, or, for
/// a Partial layout, after dsp reduces it to Replicated on every axis.
template <class Y>
std::size_t wrong(const Y& y) {
  using L = typename Y::layout_type;
  if constexpr (has_partial<L>()) {
    using G = typename Y::communicator_type;
    constexpr std::size_t K = dsp::detail::group_traits<G>::axes;
    auto r = [&]<std::size_t... I>(std::index_sequence<I...>) {
      return dsp::redistribute < Axes<std::conditional_t<I<K, Replicated, Replicated>...>>(y);
    }
    (std::make_index_sequence<K>{});
    return count_wrong(r);
  } else {
    return count_wrong(y);
  }
}

/// From -> To on mesh m for extents g: the data, the input unchanged, the
/// allocating and the into forms.
template <class From, class To, std::size_t R, class M>
void check_pair(const M& m, const std::array<std::size_t, R>& g) {
  dsp::DistTensor<T, R, From, M> x{m, g};
  fill_layout(x);
  INFO("extents ", dsp::detail::text(g), ", ", decltype(x)::layout_text(), " -> ",
       dsp::DistTensor<T, R, To, M>::layout_text(), ": plan ", (dsp::redistribute_plan<From, To, R>::text()));
  auto y = dsp::redistribute<To>(x);
  CHECK(wrong(y) == 0);
  dsp::DistTensor<T, R, To, M> z{m, g};
  dsp::redistribute<To>(x, z);
  CHECK(wrong(z) == 0);
  // the input is unchanged (compared as filled)
  dsp::DistTensor<T, R, From, M> again{m, g};
  fill_layout(again);
  std::size_t changed = 0;
  for (std::size_t k = 0; k < x.local_size(); ++k) changed += x.local().data()[k] != again.local().data()[k];
  CHECK(changed == 0);
}

template <class... L>
struct List {};

template <std::size_t R, class M, class... L>
void check_all_pairs(const M& m, std::mt19937& rng, int cases, List<L...>) {
  for (int c = 0; c < cases; ++c) {
    const auto g = random_extents<R>(rng);
    (
        [&]<class From>() {
      ([&]<class To>() { check_pair<From, To, R>(m, g); }.template operator()<L>(), ...);
        }.template operator()<L>(),
        ...);
  }
}

using Set1 = List<Axes<Sharded<0>>, Axes<Sharded<1>>, Axes<Replicated>, Axes<Partial<>>, Axes<Partial<dsp::Max>>>;
using Set2 = List<Axes<Sharded<0>, Sharded<1>>, Axes<Sharded<1>, Sharded<0>>, Axes<Sharded<0>, Sharded<0>>,
                  Axes<Sharded<2>, Replicated>, Axes<Replicated, Replicated>, Axes<Replicated, Sharded<1>>,
                  Axes<Partial<>, Sharded<2>>, Axes<Sharded<1>, Partial<dsp::Min>>>;
using Set3 = List<Axes<Sharded<0>, Sharded<1>, Sharded<2>>, Axes<Sharded<3>, Sharded<3>, Sharded<0>>,
                  Axes<Replicated, Replicated, Replicated>, Axes<Partial<>, Sharded<1>, Replicated>,
                  Axes<Sharded<2>, Replicated, Sharded<2>>>;

}  // namespace

TEST_CASE("a mesh: shape, row-major coordinates, axis communicators") {
  const int n = world().size(), r = world().rank();
  for (const auto& s : shapes<3>(n)) {
    MeshOf<3> m{world(), s};
    CHECK(m.shape() == s);
    const auto c = m.coords();
    CHECK((c[0] * s[1] + c[1]) * s[2] + c[2] == r);
    for (std::size_t a = 0; a < 3; ++a) {
      CHECK(m.axis(a).size() == s[a]);
      CHECK(m.axis(a).rank() == c[a]);
    }
    MeshOf<3> copy = m;
    CHECK(copy == m);
    CHECK(&copy.axis(1) == &m.axis(1));  // copies share the axis communicators
  }
  CHECK_THROWS_AS(MeshOf<2>(world(), {n, 2}), dsp::InvalidArgument);
  CHECK_THROWS_AS(MeshOf<2>(world(), {n, 0}), dsp::InvalidArgument);
  CHECK_THROWS_AS(MeshOf<1>(world(), {n}).axis(1), dsp::InvalidArgument);
  // A shape whose product wraps 2^64 to the rank count (issue 21): refused on every rank.
  if (n <= 2) {
    std::string e;
    try {
      MeshOf<4> m{world(), {7623851, 409891, n == 2 ? 5462 : 2731, 4323}};
    } catch (const dsp::InvalidArgument& x) {
      e = x.what();
    }
    CHECK(e.find("does not fit a communicator") != std::string::npos);
  }
  if (n > 1) {  // ranks that pass different shapes: every rank raises
    std::string e;
    try {
      MeshOf<2> m{world(), r == 0 ? std::array<int, 2>{1, n} : std::array<int, 2>{n, 1}};
    } catch (const dsp::MismatchError& x) {
      e = x.what();
    }
    CHECK(e.find("mesh shapes disagree") != std::string::npos);
  }
}

TEST_CASE("redistribute: every pair of placements on one-axis meshes, tensors of rank 2 and 5") {
  std::mt19937 rng(101);
  MeshOf<1> m{world(), {world().size()}};
  check_all_pairs<2>(m, rng, 2, Set1{});
  check_all_pairs<5>(m, rng, 1, Set1{});
}

TEST_CASE("redistribute: every pair of placements on every two-axis mesh, rank-3 tensors") {
  std::mt19937 rng(202);
  for (const auto& s : shapes<2>(world().size())) {
    MeshOf<2> m{world(), s};
    check_all_pairs<3>(m, rng, 2, Set2{});
  }
}

TEST_CASE("redistribute: every pair of placements on three-axis meshes, rank-4 tensors") {
  std::mt19937 rng(303);
  const auto all = shapes<3>(world().size());
  for (std::size_t k = 0; k < all.size(); k += 2) {  // every other shape: the suite's time is bounded
    MeshOf<3> m{world(), all[k]};
    check_all_pairs<4>(m, rng, 1, Set3{});
  }
}

TEST_CASE("redistribute on a plain communicator is the primitive, and handles Partial") {
  std::mt19937 rng(404);
  const auto g = random_extents<3>(rng);
  dsp::DistTensor<T, 3, Sharded<0>, dsp::MpiCommunicator> x{world(), g};
  fill(x);
  auto y = dsp::redistribute<Sharded<2>>(x);
  static_assert(std::is_same_v<decltype(y), decltype(dsp::dynamic_switch<2>(x))>);
  CHECK(count_wrong(y) == 0);
  CHECK(count_wrong(dsp::redistribute<Replicated>(y)) == 0);
  dsp::DistTensor<T, 3, Partial<>, dsp::MpiCommunicator> p{world(), g};
  fill_layout(p);
  CHECK(count_wrong(dsp::redistribute<Replicated>(p)) == 0);                   // one all-reduce
  CHECK(count_wrong(dsp::redistribute<Sharded<1>>(p)) == 0);                   // one reduce-scatter
  auto back = dsp::redistribute<Partial<>>(dsp::redistribute<Replicated>(p));  // local: rank 0 keeps, others 0
  const T* b = back.local().data();
  std::size_t bad = 0;
  for (std::size_t k = 0; k < back.local_size(); ++k) bad += world().rank() == 0 ? b[k] != value_at<T>(k) : b[k] != 0;
  CHECK(bad == 0);
}

TEST_CASE("one exact step on one axis: redistribute_axis") {
  const int n = world().size();
  for (const auto& s : shapes<2>(n)) {
    MeshOf<2> m{world(), s};
    const std::array<std::size_t, 3> g{5, 7, 3};
    dsp::DistTensor<T, 3, Axes<Sharded<1>, Sharded<2>>, MeshOf<2>> x{m, g};
    fill(x);
    auto y = dsp::redistribute_axis<0, Sharded<0>>(x);  // the pencil transpose: one all-to-all on axis 0
    static_assert(std::is_same_v<decltype(y)::layout_type, Axes<Sharded<0>, Sharded<2>>>);
    CHECK(count_wrong(y) == 0);
    CHECK(count_wrong(dsp::redistribute_axis<1, Replicated>(y)) == 0);  // a gather on axis 1
    CHECK(count_wrong(dsp::redistribute_axis<1, Sharded<0>>(y)) == 0);  // nested: dim 0 split over axes 0 then 1
  }
}

namespace {
using Counted = dsp::CountingCommunicator<dsp::MpiCommunicator>;

/// Counted bytes on every axis communicator of a counting mesh.
template <std::size_t K>
std::pair<std::size_t, std::size_t> counted(const dsp::Mesh<K, Counted>& m) {
  std::size_t bytes = 0, collectives = 0;
  for (std::size_t a = 0; a < K; ++a) {
    if (K > 1 || a == 0) bytes += m.axis(a).counts().bytes_sent, collectives += m.axis(a).counts().collectives();
  }
  return {bytes, collectives};
}
template <std::size_t K>
void reset(const dsp::Mesh<K, Counted>& m) {
  for (std::size_t a = 0; a < K; ++a) {
    Counted ax = m.axis(a);  // a copy shares the axis's counts (api.md, Mesh::axis)
    ax.reset();
  }
}

template <class From, class To, std::size_t R, std::size_t K>
void check_counts(const dsp::Mesh<K, Counted>& m, const std::array<std::size_t, R>& g) {
  using M = dsp::Mesh<K, Counted>;
  dsp::DistTensor<T, R, From, M> x{m, g};
  fill_layout(x);
  reset(m);
  auto y = dsp::redistribute<To>(x);
  const auto [bytes, collectives] = counted(m);
  using P = dsp::redistribute_plan<From, To, R>;
  const auto model = P::cost(g, sizeof(T), m.shape(), m.coords());
  INFO("extents ", dsp::detail::text(g), ": plan ", P::text());
  CHECK(bytes == model.bytes);
  CHECK(max_all(bytes) == model.max_bytes);
  CHECK(collectives == model.collectives);
  CHECK(wrong(y) == 0);
}

template <std::size_t R, std::size_t K, class... L>
void counts_all_pairs(const dsp::Mesh<K, Counted>& m, std::mt19937& rng, List<L...>) {
  const auto g = random_extents<R>(rng);
  (
      [&]<class From>() {
    ([&]<class To>() { check_counts<From, To, R>(m, g); }.template operator()<L>(), ...);
      }.template operator()<L>(),
      ...);
}
}  // namespace

TEST_CASE("counted bytes and collectives equal the cost model for every plan") {
  std::mt19937 rng(505);
  Counted cw{world()};
  for (const auto& s : shapes<2>(world().size())) {
    dsp::Mesh<2, Counted> m{cw, s};
    counts_all_pairs<3>(m, rng, Set2{});
  }
  dsp::Mesh<1, Counted> m1{cw, {world().size()}};
  counts_all_pairs<2>(m1, rng, Set1{});
}

TEST_CASE("redistribute into an existing output allocates nothing once warm") {
  MeshOf<2> m{world(), shapes<2>(world().size()).back()};
  const std::array<std::size_t, 3> g{6, 10, 4};
  using From = Axes<Sharded<0>, Sharded<0>>;
  using To = Axes<Sharded<1>, Sharded<1>>;  // three steps: two blocks in between
  dsp::DistTensor<T, 3, From, MeshOf<2>> x{m, g};
  dsp::DistTensor<T, 3, To, MeshOf<2>> y{m, g};
  fill(x);
  dsp::redistribute<To>(x, y);
  const std::size_t w0 = dsp::workspace_bytes(m.axis(0)), w1 = dsp::workspace_bytes(m.axis(1));
  for (int k = 0; k < 4; ++k) dsp::redistribute<To>(x, y);
  CHECK(dsp::workspace_bytes(m.axis(0)) == w0);
  CHECK(dsp::workspace_bytes(m.axis(1)) == w1);
  CHECK(count_wrong(y) == 0);
}

TEST_CASE("ranks that disagree on a redistribution raise on every rank; the input is unchanged") {
  if (world().size() < 2) return;
  MeshOf<2> m{world(), {world().size(), 1}};
  const std::array<std::size_t, 3> g{7, 5, 3};
  dsp::DistTensor<T, 3, Axes<Sharded<0>, Replicated>, MeshOf<2>> x{m, g};
  fill(x);
  std::string e;
  try {
    if (world().rank() == 0) dsp::redistribute<Axes<Sharded<1>, Replicated>>(x);
    else dsp::redistribute<Axes<Sharded<2>, Replicated>>(x);
  } catch (const dsp::MismatchError& err) {
    e = err.what();
  }
  CHECK(e.find("target layouts disagree: rank 0 Axes<Sharded<1>, Replicated>, rank 1 Axes<Sharded<2>, Replicated>") !=
        std::string::npos);
  CHECK(count_wrong(x) == 0);
  // an output on another mesh shape is refused on the rank that holds it, and every rank raises
  MeshOf<2> other{world(), {1, world().size()}};
  dsp::DistTensor<T, 3, Axes<Sharded<1>, Replicated>, MeshOf<2>> y{world().rank() == 0 ? other : m, g};
  bool raised = false;
  try {
    dsp::redistribute<Axes<Sharded<1>, Replicated>>(x, y);
  } catch (const dsp::Error&) {
    raised = true;
  }
  CHECK(raised);
  CHECK(count_wrong(dsp::redistribute<Axes<Sharded<1>, Replicated>>(x)) == 0);
  // Regression: a batch over meshes of different shapes was said to live on "another communicator".
  dsp::DistTensor<T, 3, Axes<Sharded<0>, Replicated>, MeshOf<2>> z{other, g};
  fill(z);
  e.clear();
  try {
    (void)dsp::redistribute<Axes<Sharded<1>, Replicated>>(dsp::batch(x, z));
  } catch (const dsp::Error& err) {
    e = err.what();
  }
  CHECK(e.find("tensor 1 of the batch lives on a mesh of shape [1, " + std::to_string(world().size()) +
               "], tensor 0 on [" + std::to_string(world().size()) + ", 1]; a batch lives on one mesh") !=
        std::string::npos);
  CHECK(count_wrong(x) + count_wrong(z) == 0);
}
