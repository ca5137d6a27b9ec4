// SPDX-License-Identifier: BSD-3-Clause
// Half-precision tensors (dsp::bfloat16, dsp::float16) through every
// operation, exactly; the wire pairs added with them (bf16 and fp16 tensors
// on fp8_e4m3, fp16 on bf16, double on fp32) within their documented bounds,
// in a switch, a gather and a batch mixing element types; pairs no wire
// takes refused on every rank with the input untouched.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <dsp/dsp.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>

using namespace dsp_test;

namespace {

using dsp::bfloat16;
using dsp::float16;
using dsp::Sharded;
using E3 = std::array<std::size_t, 3>;

static_assert(std::is_trivially_copyable_v<bfloat16> && sizeof(bfloat16) == 2);
static_assert(std::is_trivially_copyable_v<float16> && sizeof(float16) == 2);
static_assert(dsp::elem_kind_v<bfloat16> == dsp::ElemKind::bf16 && dsp::elem_kind_v<float16> == dsp::ElemKind::f16);

/// A value exact in bf16 and fp16 (8 significant bits, |v| < 2^11), by global index.
float exact_value(const E3& g) {
  const std::size_t i = g[0] * 7919 + g[1] * 131 + g[2];
  return float(int(i % 255) - 127) * std::ldexp(1.0f, int(i / 255 % 8) - 4);
}

/// A random value by global index (a splitmix64 hash: cheap, the same on
/// every rank); magnitudes spread over 2^-12 .. 2^12 times `top`.
float random_value(const E3& g, float top = 1.0f) {
  std::uint64_t z = (g[0] * 7919 + g[1] * 131 + g[2]) * 0x9e3779b97f4a7c15ull + 3;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const float u = float(z >> 40) / float(1u << 24) * 2.0f - 1.0f;  // in [-1, 1)
  return u * top * std::ldexp(1.0f, int(z % 25) - 12);
}

template <class T>
std::uint16_t bits_of(T h) {
  return h.bits;
}

}  // namespace

TEST_CASE("bfloat16 and float16: conversions round to nearest even, as the wire's") {
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::uint32_t> any;
  for (int k = 0; k < 100000; ++k) {
    std::uint32_t u = any(rng);
    float f;
    std::memcpy(&f, &u, 4);
    CHECK(bits_of(bfloat16(f)) == dsp::wire::to_bf16(f));
    CHECK(bits_of(float16(f)) == dsp::wire::to_fp16(f));
  }
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const float b = bfloat16::from_bits(std::uint16_t(c)), h = float16::from_bits(std::uint16_t(c));
    if (!std::isnan(b)) CHECK(bits_of(bfloat16(b)) == c);  // every code round-trips through float
    if (!std::isnan(h)) CHECK(bits_of(float16(h)) == c);
  }
  CHECK(float(bfloat16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);  // a tie: to even
  CHECK(float(float16(65520.0f)) == std::numeric_limits<float>::infinity());
  CHECK(float(float16(1.5f)) + 1.0f == 2.5f);  // arithmetic in float
}

TEST_CASE("half tensors: switch, gather, split, mesh redistribute, split-phase, batch, reshard, all exact") {
  const int n = world().size(), me = world().rank();
  std::mt19937 rng(91);
  for (int c = 0; c < 6; ++c) {
    const E3 g = random_extents<3>(rng);
    auto check_all = [&](auto tag) {
      using H = decltype(tag);
      dsp::DistTensor<H, 3, Sharded<0>, dsp::MpiCommunicator> x{world(), g};
      dsp::fill(x, exact_value);
      auto y = dsp::dynamic_switch<2>(x);
      CHECK(dsp::count_mismatches(y, exact_value) == 0);
      auto r = dsp::gather(y);
      CHECK(dsp::count_mismatches(r, exact_value) == 0);
      auto s = dsp::split<1>(r);
      CHECK(dsp::count_mismatches(s, exact_value) == 0);
      dsp::DistTensor<H, 3, Sharded<1>, dsp::MpiCommunicator> z{world(), g};
      auto h = dsp::start_switch<1>(x, z);
      h.wait();
      CHECK(dsp::count_mismatches(z, exact_value) == 0);
      dsp::DistTensor<float, 3, Sharded<0>, dsp::MpiCommunicator> f{world(), g};
      dsp::fill(f, exact_value);
      auto [a, b] = dsp::dynamic_switch<1>(dsp::batch(x, f));  // mixed element types in one batch
      CHECK(dsp::count_mismatches(a, exact_value) == 0);
      CHECK(dsp::count_mismatches(b, exact_value) == 0);
      using M = dsp::Mesh<2, dsp::MpiCommunicator>;
      M mesh{world(), dsp::mesh_shape<2>(n)};
      dsp::DistTensor<H, 3, dsp::Axes<Sharded<0>, Sharded<1>>, M> m{mesh, g};
      dsp::fill(m, exact_value);
      auto m2 = dsp::redistribute<dsp::Axes<Sharded<2>, dsp::Replicated>>(m);
      CHECK(dsp::count_mismatches(m2, exact_value) == 0);
      dsp::DistTensor<H, 3, Sharded<2>, dsp::MpiCommunicator> w{world(), g};
      dsp::reshard(world(), &m, &w);
      CHECK(dsp::count_mismatches(w, exact_value) == 0);
      CHECK(dsp::count_mismatches(x, exact_value) == 0);  // the input is unchanged
    };
    check_all(bfloat16{});
    check_all(float16{});
  }
  (void)me;
}

namespace {
/// The documented bound of wire.hpp for a value v of its kind on wire w, `a`
/// the largest |value| of the tensor (which bounds each fp8 block's).
template <class T>
double bound(dsp::Wire w, double v, double a) {
  const double av = std::fabs(v);
  if (w == dsp::Wire::fp32) return av >= std::ldexp(1.0, -126) ? std::ldexp(av, -24) : std::ldexp(1.0, -150);
  if (w == dsp::Wire::bf16) return std::ldexp(av, -8);  // fp16 on bf16
  const double fp8 = a * std::ldexp(1.0, -10) / 448;
  if (std::is_same_v<T, bfloat16>)
    return (std::ldexp(av, -4) + std::ldexp(av, -8) + std::ldexp(av, -12)) * (1 + 1e-6) + 1.01 * fp8 +
           std::ldexp(1.0, -133);
  return (std::ldexp(av, -4) + std::ldexp(av, -11) + std::ldexp(av, -15)) * (1 + 1e-6) + 1.01 * fp8 +
         std::ldexp(1.0, -24);
}

template <class T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, double>) return v;
  else return double(float(v));
}
}  // namespace

TEST_CASE("the new wire pairs: bf16 and fp16 on fp8, fp16 on bf16, double on fp32, within the bounds") {
  std::mt19937 rng(92);
  auto run = [&](auto tag, dsp::Wire w, float top) {
    using T = decltype(tag);
    INFO(dsp::wire_name(w), " ", dsp::elem_kind_name(dsp::elem_kind_v<T>), " top ", top);
    for (int c = 0; c < 8; ++c) {
      const E3 g = c < 6 ? random_extents<3>(rng) : E3{3, 41, c == 6 ? 300u : 1000u};
      auto value = [&](const E3& i) {  // exact in T
        const float v = std::clamp(random_value(i, top), -65504.0f, 65504.0f);
        if constexpr (std::is_same_v<T, double>) return double(v) * (1 + std::ldexp(1.0, -40));  // not a float
        else return float(T(v));
      };
      double a = 0;
      for (std::size_t i = 0; i < g[0]; ++i)
        for (std::size_t j = 0; j < g[1]; ++j)
          for (std::size_t k = 0; k < g[2]; ++k) a = std::max(a, std::fabs(double(value(E3{i, j, k}))));
      dsp::DistTensor<T, 3, Sharded<0>, dsp::MpiCommunicator> x{world(), g};
      dsp::fill(x, value);
      std::size_t outside = 0;
      auto check = [&](const auto& y) {
        dsp::for_each(y, [&](const E3& i, const T& v) {
          const double want = double(value(i)), got = as_double(v);
          if (!(std::fabs(got - want) <= bound<T>(w, want, a))) ++outside;
        });
      };
      check(dsp::dynamic_switch<2>(x, w));
      check(dsp::gather(x, w));
      dsp::DistTensor<T, 3, dsp::Replicated, dsp::MpiCommunicator> r{world(), g};
      dsp::redistribute<dsp::Replicated>(x, r, w);
      check(r);
      CHECK(outside == 0);
      CHECK(dsp::count_mismatches(x, value) == 0);
    }
  };
  run(bfloat16{}, dsp::Wire::fp8_e4m3, 1.0f);
  run(float16{}, dsp::Wire::fp8_e4m3, 1.0f);
  run(float16{}, dsp::Wire::bf16, 1.0f);
  run(float16{}, dsp::Wire::bf16, 15.99f);  // up to 65495: near fp16's top, where bf16 rounds to 65536
  run(double{}, dsp::Wire::fp32, 1.0f);
}

TEST_CASE("fp16 on a bf16 wire: values near 65504 arrive as 65504, not infinity; NaN and inf kept") {
  const E3 g{2, 3, 8};
  dsp::DistTensor<float16, 3, Sharded<0>, dsp::MpiCommunicator> x{world(), g};
  auto value = [](const E3& i) -> float {
    switch (i[2]) {
      case 0: return 65504.0f;
      case 1: return -65472.0f;  // rounds to -65536 in bf16
      case 2: return 65408.0f;   // a tie in bf16: to even, 65536
      case 3: return std::numeric_limits<float>::infinity();
      case 4: return std::numeric_limits<float>::quiet_NaN();
      case 5: return 5.9604645e-08f;  // the smallest fp16 subnormal
      default: return float(i[0] * 3 + i[1]);
    }
  };
  dsp::fill(x, value);
  auto y = dsp::dynamic_switch<2>(x, dsp::Wire::bf16);
  std::size_t wrong = 0;
  dsp::for_each(y, [&](const E3& i, const float16& h) {
    const float v = h, want = value(i);
    const float expect = i[2] == 1 ? -65504.0f : i[2] == 2 ? 65504.0f : want;
    if (!(v == expect || (std::isnan(v) && std::isnan(expect)))) ++wrong;
  });
  CHECK(wrong == 0);
}

TEST_CASE("a batch of float, bf16 and fp16 tensors on one fp8 wire: one exchange, each within its bound") {
  using C = dsp::CountingCommunicator<dsp::MpiCommunicator>;
  C comm{world()};
  const E3 g{5, 12, 130};
  dsp::DistTensor<float, 3, Sharded<1>, C> q{comm, g};
  dsp::DistTensor<bfloat16, 3, Sharded<1>, C> k{comm, g};
  dsp::DistTensor<float16, 3, Sharded<1>, C> v{comm, g};
  auto value = [](const E3& i) { return float(bfloat16(random_value(i))); };  // exact in all three
  dsp::fill(q, value), dsp::fill(k, value), dsp::fill(v, value);
  comm.reset();
  auto [q2, k2, v2] = dsp::redistribute<Sharded<2>>(dsp::batch(q, k, v), dsp::Wire::fp8_e4m3);
  if (comm.size() > 1) CHECK(comm.counts().collectives() == 1);
  CHECK(comm.counts().bytes_sent == 3 * dsp::transition_cost<Sharded<1>, Sharded<2>>(g, 4, std::size_t(comm.size()),
                                                                                     std::size_t(comm.rank()),
                                                                                     dsp::Wire::fp8_e4m3)
                                            .bytes);
  double a = 0;
  for (std::size_t i = 0; i < g[0]; ++i)
    for (std::size_t j = 0; j < g[1]; ++j)
      for (std::size_t l = 0; l < g[2]; ++l) a = std::max(a, std::fabs(double(value(E3{i, j, l}))));
  std::size_t outside = 0;
  auto check = [&](const auto& y, auto tag) {
    using T = decltype(tag);
    dsp::for_each(y, [&](const E3& i, const T& got) {
      const double want = value(i);
      const double b = std::is_same_v<T, float>
                           ? (std::ldexp(std::fabs(want), -4) + a * std::ldexp(1.0, -10) / 448) * (1 + 1e-6)
                           : bound<T>(dsp::Wire::fp8_e4m3, want, a);
      if (!(std::fabs(double(float(got)) - want) <= b)) ++outside;
    });
  };
  check(q2, float{});
  check(k2, bfloat16{});
  check(v2, float16{});
  CHECK(outside == 0);
}

TEST_CASE("a pair no wire takes raises InvalidArgument on every rank, naming the wire and the type; nothing moves") {
  const E3 g{4, 6, 5};
  dsp::DistTensor<float, 3, Sharded<0>, dsp::MpiCommunicator> f{world(), g};
  dsp::DistTensor<bfloat16, 3, Sharded<0>, dsp::MpiCommunicator> b{world(), g};
  dsp::DistTensor<double, 3, Sharded<0>, dsp::MpiCommunicator> d{world(), g};
  dsp::fill(f, exact_value), dsp::fill(b, exact_value), dsp::fill(d, exact_value);
  std::string e = error_of([&] { (void)dsp::dynamic_switch<1>(f, dsp::Wire::fp32); });
  CHECK(e.find("the fp32 wire does not carry float tensors (the tensor); float travels on bf16, fp16 or fp8_e4m3") !=
        std::string::npos);
  e = error_of([&] { (void)dsp::gather(b, dsp::Wire::fp16); });
  CHECK(e.find("the fp16 wire does not carry dsp::bfloat16 tensors") != std::string::npos);
  e = error_of([&] { (void)dsp::dynamic_switch<1>(dsp::batch(f, d), dsp::Wire::bf16); });
  CHECK(e.find("the bf16 wire does not carry double tensors (tensor 1 of the batch); double travels on fp32") !=
        std::string::npos);
  // One rank asking for another wire: the agreement names it.
  if (world().size() > 1) {
    e = error_of([&] { (void)dsp::dynamic_switch<1>(f, world().rank() == 0 ? dsp::Wire::bf16 : dsp::Wire::fp32); });
    CHECK(!e.empty());
  }
  CHECK(dsp::count_mismatches(f, exact_value) == 0);
  CHECK(dsp::count_mismatches(b, exact_value) == 0);
  CHECK(dsp::count_mismatches(d, exact_value) == 0);
}
