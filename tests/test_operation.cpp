// SPDX-License-Identifier: BSD-3-Clause
// One operation model: every modifier of dsp::redistribute on every pair of a
// set of placements, on every 2-axis mesh of the ranks and on a plain
// communicator, for random tensors with uneven and empty blocks. Batches of
// mixed element types (float, int64, double), allocating and into existing
// tensors; wires (bf16 exactly the rounding, over every step); split-phase
// (start_redistribute, test, wait) and redistribute_each (every output element
// reported exactly once, with its offsets, already landed), of one tensor and
// of batches; inputs unchanged. Counted bytes equal the cost model for
// batches and wires; errors of one rank raise on every rank.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <dsp/comm/counting.hpp>

#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace dsp_test;
using dsp::Axes;
using dsp::Replicated;
using dsp::Sharded;

namespace {

using Comm = dsp::MpiCommunicator;

/// Every shape of 2 axes whose product is n.
/// The local linear index of an element of a block of y, from its address.
template <class Y, class B>
std::size_t local_index(const Y& y, const B& block, const std::array<std::size_t, Y::rank>& idx) {
  const auto* p = block.data();
  for (std::size_t d = 0; d < Y::rank; ++d) p += idx[d] * block.stride(d);
  return std::size_t(p - y.unchecked_local().data());
}

/// Counts how often each output element is covered by a reported block, and
/// reported blocks whose values (or offsets) are not yet right.
template <class Y>
struct Coverage {
  const Y& y;
  std::vector<int> seen;
  std::size_t bad = 0;
  explicit Coverage(const Y& out) : y(out), seen(out.local_size(), 0) {}
  template <class B, class O>
  void add(const B& block, const O& offsets) {
    using T = typename Y::value_type;
    constexpr std::size_t R = Y::rank;
    const auto le = y.local_extents(), lo = y.local_offsets();
    std::array<std::size_t, R> idx{};
    std::size_t n = 1;
    for (std::size_t d = 0; d < R; ++d) n *= block.extent(d);
    for (std::size_t e = 0; e < n; ++e) {
      std::size_t rest = e;
      for (std::size_t d = R; d-- > 0;) idx[d] = rest % block.extent(d), rest /= block.extent(d);
      const std::size_t k = local_index(y, block, idx);
      if (k >= seen.size()) {
        ++bad;
        continue;
      }
      ++seen[k];
      std::array<std::size_t, R> g{};
      std::size_t r = k;
      for (std::size_t d = R; d-- > 0;) g[d] = r % le[d] + lo[d], r /= le[d];
      if (y.unchecked_local().data()[k] != value_at<T>(linear(g, y.global_extents()))) ++bad;
      if (e == 0)
        for (std::size_t d = 0; d < R; ++d) bad += g[d] != offsets[d];
    }
  }
  bool once() const {
    for (int c : seen)
      if (c != 1) return false;
    return true;
  }
};

/// The float value as it arrives through bf16 (idempotent: any number of steps).
float bf16(float v) { return dsp::wire::from_bf16(dsp::wire::to_bf16(v)); }

template <class X>
std::size_t wrong_bf16(const X& x) {
  std::size_t w = 0;
  const float* p = x.local().data();
  for_each_local(
      x, [&](auto&, auto& g, std::size_t k) { w += p[k] != bf16(value_at<float>(linear(g, x.global_extents()))); });
  return w;
}

/// Every modifier From -> To on group `g` for extents `e`.
template <class From, class To, std::size_t R, class G>
void check_modifiers(const G& g, const std::array<std::size_t, R>& e) {
  using XF = dsp::DistTensor<float, R, From, G>;
  using XI = dsp::DistTensor<std::int64_t, R, From, G>;
  using XD = dsp::DistTensor<double, R, From, G>;
  using YF = dsp::DistTensor<float, R, To, G>;
  using YI = dsp::DistTensor<std::int64_t, R, To, G>;
  using YD = dsp::DistTensor<double, R, To, G>;
  INFO("extents ", dsp::detail::text(e), ", ", XF::layout_text(), " -> ", YF::layout_text(), ": plan ",
       (dsp::redistribute_plan<From, To, R>::text()));
  XF xf{g, e};
  XI xi{g, e};
  XD xd{g, e};
  fill(xf);
  fill(xi);
  fill(xd);

  // A batch of three element types, allocating and into existing tensors.
  auto [af, ai, ad] = dsp::redistribute<To>(dsp::batch(xf, xi, xd));
  CHECK(count_wrong(af) + count_wrong(ai) + count_wrong(ad) == 0);
  YF yf{g, e};
  YI yi{g, e};
  YD yd{g, e};
  dsp::redistribute<To>(dsp::batch(xf, xi, xd), dsp::batch(yf, yi, yd));
  CHECK(count_wrong(yf) + count_wrong(yi) + count_wrong(yd) == 0);

  // Wires: one tensor, and a batch of two floats.
  auto w = dsp::redistribute<To>(xf, dsp::Wire::bf16);
  CHECK(wrong_bf16(w) == 0);
  XF xf2{g, e};
  fill(xf2);
  YF wf{g, e}, wf2{g, e};
  dsp::redistribute<To>(dsp::batch(xf, xf2), dsp::batch(wf, wf2), dsp::Wire::bf16);
  CHECK(wrong_bf16(wf) + wrong_bf16(wf2) == 0);

  // Split-phase: one tensor, a batch, a batch on a wire.
  YF sf{g, e};
  auto h = dsp::start_redistribute<To>(xf, sf);
  h.wait();
  CHECK(count_wrong(sf) == 0);
  YI si{g, e};
  YD sd{g, e};
  auto hb = dsp::start_redistribute<To>(dsp::batch(xi, xd), dsp::batch(si, sd));
  while (!hb.test()) {
  }
  hb.wait();
  CHECK(count_wrong(si) + count_wrong(sd) == 0);
  YF sw{g, e}, sw2{g, e};
  dsp::start_redistribute<To>(dsp::batch(xf, xf2), dsp::batch(sw, sw2), dsp::Wire::bf16).wait();
  CHECK(wrong_bf16(sw) + wrong_bf16(sw2) == 0);

  // Block by block: every output element reported once, landed, with its offsets.
  YF ef{g, e};
  Coverage<YF> cov(ef);
  dsp::redistribute_each<To>(xf, ef, [&](const auto& block, const auto& offsets, int peer) {
    cov.add(block, offsets);
    CHECK(peer >= 0);
  });
  CHECK(cov.once());
  CHECK(cov.bad == 0);
  YI ei{g, e};
  YD ed{g, e};
  Coverage<YI> ci(ei);
  Coverage<YD> cd(ed);
  dsp::redistribute_each<To>(dsp::batch(xi, xd), dsp::batch(ei, ed), [&](const auto& blocks, const auto& offsets, int) {
    ci.add(std::get<0>(blocks), offsets);
    cd.add(std::get<1>(blocks), offsets);
  });
  CHECK(ci.once());
  CHECK(cd.once());
  CHECK(ci.bad + cd.bad == 0);

  // The inputs are unchanged.
  CHECK(count_wrong(xf) + count_wrong(xi) + count_wrong(xd) + count_wrong(xf2) == 0);
}

template <class... L>
struct List {};

template <std::size_t R, class G, class... L>
void check_all_pairs(const G& g, const std::array<std::size_t, R>& e, List<L...>) {
  (
      [&]<class From>() {
    ([&]<class To>() { check_modifiers<From, To, R>(g, e); }.template operator()<L>(), ...);
      }.template operator()<L>(),
      ...);
}

using MeshSet = List<Axes<Sharded<0>, Sharded<1>>, Axes<Sharded<1>, Sharded<0>>, Axes<Sharded<0>, Sharded<0>>,
                     Axes<Replicated, Replicated>, Axes<Replicated, Sharded<2>>>;
using PlainSet = List<Sharded<0>, Sharded<2>, Replicated>;

}  // namespace

TEST_CASE("every modifier on every placement pair of every 2-axis mesh") {
  std::mt19937 rng(211);
  for (const auto& s : shapes2(world().size())) {
    dsp::Mesh<2, Comm> m{world(), s};
    for (int c = 0; c < 2; ++c) check_all_pairs(m, random_extents<3>(rng), MeshSet{});
  }
}

TEST_CASE("every modifier on every placement pair of a plain communicator") {
  std::mt19937 rng(212);
  for (int c = 0; c < 3; ++c) check_all_pairs(world(), random_extents<3>(rng), PlainSet{});
}

TEST_CASE("a batch through Partial placements reduces every tensor") {
  const int n = world().size();
  for (const auto& s : shapes2(n)) {
    dsp::Mesh<2, Comm> m{world(), s};
    using From = Axes<Replicated, Sharded<2>>;
    using Mid = Axes<dsp::Partial<>, Sharded<2>>;
    using To = Axes<Sharded<1>, Sharded<2>>;
    dsp::DistTensor<std::int64_t, 3, From, dsp::Mesh<2, Comm>> a{m, {5, 7, 3}};
    dsp::DistTensor<double, 3, From, dsp::Mesh<2, Comm>> b{m, {5, 7, 3}};
    fill(a);
    fill(b);
    auto [pa, pb] = dsp::redistribute<Mid>(dsp::batch(a, b));   // to Partial: the rank at coordinate 0 keeps it
    auto [ra, rb] = dsp::redistribute<To>(dsp::batch(pa, pb));  // a reduce-scatter each
    CHECK(count_wrong(ra) + count_wrong(rb) == 0);
  }
}

TEST_CASE("counted bytes equal the cost model for batches and wires on every mesh") {
  using Counted = dsp::CountingCommunicator<Comm>;
  Counted cc{world()};
  std::mt19937 rng(213);
  using From = Axes<Sharded<0>, Sharded<1>>;
  using To = Axes<Sharded<1>, Replicated>;
  using P = dsp::redistribute_plan<From, To, 3>;
  for (const auto& s : shapes2(world().size())) {
    dsp::Mesh<2, Counted> m{cc, s};
    for (int c = 0; c < 4; ++c) {
      const auto e = random_extents<3>(rng);
      dsp::DistTensor<float, 3, From, dsp::Mesh<2, Counted>> x{m, e}, x2{m, e};
      dsp::DistTensor<double, 3, From, dsp::Mesh<2, Counted>> xd{m, e};
      fill(x);
      fill(x2);
      fill(xd);
      auto bytes = [&] {
        std::size_t b = 0;
        for (std::size_t a = 0; a < 2; ++a) b += m.axis(a).counts().bytes_sent;
        return b;
      };
      auto reset = [&] {
        for (std::size_t a = 0; a < 2; ++a) {
          Counted ax = m.axis(a);
          ax.reset();
        }
      };
      auto cost = [&](std::size_t eb, dsp::Wire w) { return P::cost(e, eb, m.shape(), m.coords(), w).bytes; };
      reset();
      auto [y, yd] = dsp::redistribute<To>(dsp::batch(x, xd));
      CHECK(bytes() == cost(4, dsp::Wire::exact) + cost(8, dsp::Wire::exact));
      for (auto w : {dsp::Wire::bf16, dsp::Wire::fp16, dsp::Wire::fp8_e4m3}) {
        reset();
        auto [z, z2] = dsp::redistribute<To>(dsp::batch(x, x2), w);
        CHECK(bytes() == 2 * cost(4, w));
        reset();
        dsp::start_redistribute<To>(x, z, w).wait();
        CHECK(bytes() == cost(4, w));
      }
      CHECK(count_wrong(y) + count_wrong(yd) == 0);
    }
  }
}

TEST_CASE("errors of one rank in a batch on a mesh raise on every rank; the inputs are unchanged") {
  const int n = world().size(), r = world().rank();
  if (n == 1) return;
  dsp::Mesh<2, Comm> m{world(), {1, n}};
  using From = Axes<Replicated, Sharded<0>>;
  using To = Axes<Replicated, Sharded<1>>;
  using M = dsp::Mesh<2, Comm>;
  dsp::DistTensor<float, 3, From, M> a{m, {6, 5, 4}};
  dsp::DistTensor<double, 3, From, M> b{m, {6, 5, 4}};
  fill(a);
  fill(b);
  const bool bad = r == n - 1;
  dsp::DistTensor<float, 3, To, M> ya{m, {6, 5, 4}};
  dsp::DistTensor<double, 3, To, M> yb{m, {6, bad ? 6u : 5u, 4}};
  for (int form = 0; form < 2; ++form) {
    const std::string e = error_of([&] {
      if (form == 0) dsp::redistribute<To>(dsp::batch(a, b), dsp::batch(ya, yb));
      else dsp::start_redistribute<To>(dsp::batch(a, b), dsp::batch(ya, yb)).wait();
    });
    const std::string op = form == 0 ? "dsp::redistribute" : "dsp::start_redistribute";
    if (bad)
      CHECK(e.find(op + " (rank " + std::to_string(r) + "): output tensor 1 of the batch has global extents " +
                   "[6, 6, 4] but its input [6, 5, 4]") != std::string::npos);
    else CHECK(e.find(op + ": rank " + std::to_string(n - 1) + " could not take part") != std::string::npos);
  }
  // A wire on a batch with a double: refused on every rank, before anything moves.
  dsp::DistTensor<double, 3, To, M> ok{m, {6, 5, 4}};
  const std::string e = error_of([&] { dsp::redistribute<To>(dsp::batch(a, b), dsp::batch(ya, ok), dsp::Wire::bf16); });
  CHECK(e.find("the bf16 wire does not carry double tensors (tensor 1 of the batch); double travels on fp32") !=
        std::string::npos);
  CHECK(count_wrong(a) + count_wrong(b) == 0);
  dsp::redistribute<To>(dsp::batch(a, b), dsp::batch(ya, ok));  // the mesh still works
  CHECK(count_wrong(ya) + count_wrong(ok) == 0);
}
