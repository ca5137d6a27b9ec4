// SPDX-License-Identifier: BSD-3-Clause
// Low-precision wire types: the conversions against reference conversions
// written independently here (nearest representable value by search, ties to
// the even code), the documented error bounds of a whole switch for random
// uneven and empty shapes, NaN and infinities, counted bytes equal to the
// cost model's wire bytes (about a half and a quarter of float's), batches
// on a wire, and Wire::exact equal to the plain switch.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <dsp/batch.hpp>
#include <dsp/comm/counting.hpp>
#include <dsp/cost.hpp>
#include <dsp/half.hpp>
#include <dsp/wire.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace dsp_test;

namespace {
template <class L, class C = dsp::MpiCommunicator>
using F3 = dsp::DistTensor<float, 3, L, C>;

float from_u32(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Nearest value of `table` (ascending, non-negative, index = code) to |x|,
/// ties to the even code; `top` is the first value past the table that a
/// value rounds to (infinity for fp16), or none (saturation).
std::size_t nearest_code(const std::vector<double>& table, double a) {
  const auto it = std::lower_bound(table.begin(), table.end(), a);
  if (it == table.begin()) return 0;
  if (it == table.end()) return table.size() - 1;
  const std::size_t hi = std::size_t(it - table.begin()), lo = hi - 1;
  const double dl = a - table[lo], dh = table[hi] - a;
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return lo % 2 == 0 ? lo : hi;
}

/// fp16 values of codes 0 .. 0x7c00 (0x7c00 stands for 65536, where values round to infinity).
const std::vector<double>& fp16_table() {
  static const std::vector<double> t = [] {
    std::vector<double> v;
    for (int c = 0; c <= 0x7c00; ++c) {
      const int e = c >> 10, m = c & 0x3ff;
      v.push_back(e == 0 ? std::ldexp(m, -24) : std::ldexp(1.0 + m / 1024.0, e - 15));
    }
    return v;
  }();
  return t;
}

/// e4m3 values of codes 0 .. 0x7e (448 the largest; 0x7f is NaN).
const std::vector<double>& e4m3_table() {
  static const std::vector<double> t = [] {
    std::vector<double> v;
    for (int c = 0; c <= 0x7e; ++c) {
      const int e = c >> 3, m = c & 7;
      v.push_back(e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7));
    }
    return v;
  }();
  return t;
}

double ref_fp16(float x) {
  if (std::isnan(x)) return x;
  const std::size_t c = nearest_code(fp16_table(), std::fabs(double(x)));
  const double v = c == 0x7c00 ? std::numeric_limits<double>::infinity() : fp16_table()[c];
  return std::signbit(x) ? -v : v;
}

double ref_bf16(float x) {
  if (std::isnan(x) || std::isinf(x)) return x;
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  const std::uint32_t mag = u & 0x7fffffffu;
  const double a = std::fabs(double(x));
  const double lo = from_u32(mag & 0xffff0000u);
  const std::uint32_t hi_bits = (mag & 0xffff0000u) + 0x10000u;
  const double hi = hi_bits >= 0x7f800000u ? std::ldexp(1.0, 128) : double(from_u32(hi_bits));
  const bool lo_even = ((mag >> 16) & 1u) == 0;
  double v = (a - lo < hi - a) || (a - lo == hi - a && lo_even) ? lo : hi;
  if (v == std::ldexp(1.0, 128)) v = std::numeric_limits<double>::infinity();
  return std::signbit(x) ? -v : v;
}

double ref_e4m3(float v) {  // v already scaled; saturating
  if (!std::isfinite(v)) return std::numeric_limits<double>::quiet_NaN();
  const double r = e4m3_table()[nearest_code(e4m3_table(), std::fabs(double(v)))];
  return std::signbit(v) ? -r : r;
}

bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

std::vector<float> test_values(std::mt19937& rng) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          1e-8f,
                          6.1035156e-05f,
                          5.9604645e-08f,
                          2.9802322e-08f,
                          2.9802326e-08f,
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int k = 0; k < 200000; ++k) v.push_back(from_u32(bits(rng)));
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (int k = 0; k < 20000; ++k) v.push_back(u(rng) * std::ldexp(1.0f, int(rng() % 40) - 20));
  return v;
}
}  // namespace

TEST_CASE("bf16 and fp16 conversions equal the reference, ties to even, NaN kept") {
  std::mt19937 rng(81);
  std::size_t wrong_bf16 = 0, wrong_fp16 = 0;
  for (float x : test_values(rng)) {
    if (!same(dsp::wire::from_bf16(dsp::wire::to_bf16(x)), ref_bf16(x))) ++wrong_bf16;
    if (!same(dsp::wire::from_fp16(dsp::wire::to_fp16(x)), ref_fp16(x))) ++wrong_fp16;
  }
  CHECK(wrong_bf16 == 0);
  CHECK(wrong_fp16 == 0);
  // Every fp16 and bf16 code decodes and encodes back to itself (NaNs to a NaN).
  for (std::uint32_t c = 0; c < 0x10000; ++c) {
    const float h = dsp::wire::from_fp16(std::uint16_t(c)), b = dsp::wire::from_bf16(std::uint16_t(c));
    if (!std::isnan(h)) CHECK(dsp::wire::to_fp16(h) == c);
    if (!std::isnan(b)) CHECK(dsp::wire::to_bf16(b) == c);
  }
}

TEST_CASE("e4m3 conversion equals the reference over its range, saturates, and NaN / infinity become NaN") {
  std::mt19937 rng(82);
  std::uniform_real_distribution<float> u(-460.0f, 460.0f);
  std::size_t wrong = 0;
  for (int k = 0; k < 200000; ++k) {
    const float v = k % 2 ? u(rng) : u(rng) * std::ldexp(1.0f, -int(rng() % 20));
    if (!same(dsp::wire::from_e4m3(dsp::wire::to_e4m3(v)), ref_e4m3(v))) ++wrong;
  }
  for (const double v : e4m3_table()) {  // every value, and every midpoint between neighbours
    if (!same(dsp::wire::from_e4m3(dsp::wire::to_e4m3(float(v))), ref_e4m3(float(v)))) ++wrong;
  }
  for (std::size_t c = 0; c + 1 < e4m3_table().size(); ++c) {
    const float mid = float((e4m3_table()[c] + e4m3_table()[c + 1]) / 2);
    if (!same(dsp::wire::from_e4m3(dsp::wire::to_e4m3(mid)), ref_e4m3(mid))) ++wrong;
  }
  CHECK(wrong == 0);
  CHECK(dsp::wire::from_e4m3(dsp::wire::to_e4m3(1e6f)) == 448.0f);
  CHECK(std::isnan(dsp::wire::from_e4m3(dsp::wire::to_fp8(std::numeric_limits<float>::infinity(), 1.0))));
  CHECK(std::isnan(dsp::wire::from_e4m3(dsp::wire::to_fp8(std::numeric_limits<float>::quiet_NaN(), 1.0))));
}

TEST_CASE("wire_section_bytes: a half, a quarter plus scales, padded to 4 bytes") {
  CHECK(dsp::wire_section_bytes(dsp::Wire::exact, 10, 4) == 40);
  CHECK(dsp::wire_section_bytes(dsp::Wire::bf16, 10, 4) == 20);
  CHECK(dsp::wire_section_bytes(dsp::Wire::fp16, 3, 4) == 8);
  CHECK(dsp::wire_section_bytes(dsp::Wire::fp8_e4m3, 128, 4) == 4 + 128);
  CHECK(dsp::wire_section_bytes(dsp::Wire::fp8_e4m3, 129, 4) == 8 + 132);
  CHECK(dsp::wire_section_bytes(dsp::Wire::bf16, 0, 4) == 0);
}

namespace {
/// A float tensor of random values (the same on every rank for each global
/// index), some blocks of small and large magnitudes.
template <class X>
void fill_random(const X& x) {
  auto* p = x.local().data();
  for_each_local(x, [&](auto&, auto& g, std::size_t k) {
    const std::size_t i = linear(g, x.global_extents());
    std::mt19937 r(std::uint32_t(i * 2654435761u + 17));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    p[k] = u(r) * std::ldexp(1.0f, int(i / 97 % 24) - 12);
  });
}
template <class X>
float value_of(const X& x, const std::array<std::size_t, 3>& g) {
  const std::size_t i = linear(g, x.global_extents());
  std::mt19937 r(std::uint32_t(i * 2654435761u + 17));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  return u(r) * std::ldexp(1.0f, int(i / 97 % 24) - 12);
}
}  // namespace

TEST_CASE("a switch on each wire: every element within the documented bound; bf16 and fp16 exactly the rounding") {
  std::mt19937 rng(83);
  for (auto w : {dsp::Wire::bf16, dsp::Wire::fp16, dsp::Wire::fp8_e4m3}) {
    for (int c = 0; c < 12; ++c) {
      // Small random shapes walk runs shorter than a block; the last two have long runs (the contiguous path).
      const auto g = c < 10 ? random_extents<3>(rng) : std::array<std::size_t, 3>{3, 41, c == 10 ? 300u : 1000u};
      F3<dsp::Sharded<0>> x{world(), g};
      fill_random(x);
      auto y = dsp::dynamic_switch<2>(x, w);
      std::size_t outside = 0, not_rounding = 0;
      const auto* out = y.local().data();
      for_each_local(y, [&](auto&, auto& gi, std::size_t k) {
        const float v = value_of(y, gi);
        const double err = std::fabs(double(out[k]) - double(v));
        if (w == dsp::Wire::bf16) {
          if (err > std::ldexp(std::fabs(double(v)), -8)) ++outside;
          if (!same(out[k], ref_bf16(v))) ++not_rounding;
        } else if (w == dsp::Wire::fp16) {
          if (err > std::max(std::ldexp(std::fabs(double(v)), -11), std::ldexp(1.0, -25))) ++outside;
          if (!same(out[k], ref_fp16(v))) ++not_rounding;
        } else {
          // |v| <= 2^11 everywhere, so 2^11 bounds each block's amax.
          const double bound = (std::ldexp(std::fabs(double(v)), -4) + std::ldexp(2048.0, -10) / 448) * (1 + 1e-6);
          if (err > bound) ++outside;
        }
      });
      CHECK(outside == 0);
      CHECK(not_rounding == 0);
      CHECK(y.global_extents() == g);
    }
  }
}

TEST_CASE("fp8: a block's largest element keeps 2^-4, tiny blocks keep their scale") {
  // One row per rank's block, values spanning 2^-20 .. 1 in separate rows.
  const std::array<std::size_t, 3> g{4, 8, 128};
  F3<dsp::Sharded<0>> x{world(), g};
  auto* p = x.local().data();
  for_each_local(x, [&](auto&, auto& gi, std::size_t k) {
    p[k] = std::ldexp(1.0f + float(gi[2]) / 256.0f, -int(gi[1] * 3)) * (gi[2] % 2 ? -1.0f : 1.0f);
  });
  auto y = dsp::dynamic_switch<1>(x, dsp::Wire::fp8_e4m3);
  std::size_t outside = 0;
  for_each_local(y, [&](auto&, auto& gi, std::size_t k) {
    const double v = std::ldexp(1.0 + double(gi[2]) / 256.0, -int(gi[1] * 3)) * (gi[2] % 2 ? -1.0 : 1.0);
    // Every block here lies within one row of equal magnitude (2^-3k .. 2^-3k * 2): relative 2^-4 holds.
    if (std::fabs(y.local().data()[k] - v) > std::ldexp(std::fabs(v), -4) * (1 + 1e-6)) ++outside;
  });
  CHECK(outside == 0);
}

TEST_CASE("NaN and infinities through the wires") {
  const std::array<std::size_t, 3> g{4, 4, 4};
  F3<dsp::Sharded<0>> x{world(), g};
  fill(x);
  auto* p = x.local().data();
  for_each_local(x, [&](auto&, auto& gi, std::size_t k) {
    if (gi[2] == 1) p[k] = std::numeric_limits<float>::quiet_NaN();
    if (gi[2] == 2) p[k] = -std::numeric_limits<float>::infinity();
  });
  for (auto w : {dsp::Wire::bf16, dsp::Wire::fp16, dsp::Wire::fp8_e4m3}) {
    auto y = dsp::dynamic_switch<2>(x, w);
    std::size_t wrong = 0;
    for_each_local(y, [&](auto&, auto& gi, std::size_t k) {
      const float v = y.local().data()[k];
      if (gi[2] == 1 && !std::isnan(v)) ++wrong;
      if (gi[2] == 2 && !(w == dsp::Wire::fp8_e4m3 ? std::isnan(v) : v == -std::numeric_limits<float>::infinity()))
        ++wrong;
      if (gi[2] == 0 || gi[2] == 3) {  // finite values: a NaN or infinity elsewhere in the block does not spoil them
        const double ref = value_at<float>(linear(gi, g));
        if (std::fabs(v - ref) > std::ldexp(ref, -4) * (1 + 1e-6)) ++wrong;
      }
    });
    CHECK(wrong == 0);
  }
}

TEST_CASE("counted bytes equal the cost model's wire bytes; Wire::exact is the plain switch") {
  using C = dsp::CountingCommunicator<dsp::MpiCommunicator>;
  C comm{world()};
  const std::size_t n = std::size_t(comm.size()), me = std::size_t(comm.rank());
  std::mt19937 rng(84);
  for (int c = 0; c < 8; ++c) {
    const auto g = random_extents<3>(rng);
    F3<dsp::Sharded<1>, C> x{comm, g};
    fill(x);
    for (auto w : {dsp::Wire::exact, dsp::Wire::bf16, dsp::Wire::fp16, dsp::Wire::fp8_e4m3}) {
      F3<dsp::Sharded<0>, C> y{comm, g};
      comm.reset();
      dsp::dynamic_switch<0>(x, y, w);
      const auto model = dsp::transition_cost<dsp::Sharded<1>, dsp::Sharded<0>>(g, 4, n, me, w);
      CHECK(comm.counts().bytes_sent == model.bytes);
      CHECK(comm.counts().collectives() == model.collectives);
      if (w == dsp::Wire::exact) CHECK(count_wrong(y) == 0);
    }
  }
  // At scale the wire is a half and about a quarter of float's bytes.
  const std::array<std::size_t, 3> big{64, 64, 256};
  const auto f32 = dsp::transition_cost<dsp::Sharded<0>, dsp::Sharded<2>>(big, 4, 4, 0);
  const auto b16 = dsp::transition_cost<dsp::Sharded<0>, dsp::Sharded<2>>(big, 4, 4, 0, dsp::Wire::bf16);
  const auto f8 = dsp::transition_cost<dsp::Sharded<0>, dsp::Sharded<2>>(big, 4, 4, 0, dsp::Wire::fp8_e4m3);
  CHECK(b16.bytes * 2 == f32.bytes);
  CHECK(double(f8.bytes) / double(f32.bytes) == doctest::Approx(0.25 * (1 + 4.0 / 128)).epsilon(0.001));
  static_assert(
      dsp::transition_cost<dsp::Sharded<0>, dsp::Sharded<1>>(std::array<std::size_t, 2>{8, 8}, 4, 2, 0, dsp::Wire::bf16)
          .bytes == 32);
}

TEST_CASE("a batch on a wire: Q, K and V in one collective at half the bytes") {
  std::mt19937 rng(85);
  for (int c = 0; c < 6; ++c) {
    const auto g = random_extents<3>(rng);
    F3<dsp::Sharded<1>> q{world(), g}, k{world(), g}, v{world(), g};
    fill(q), fill(k), fill(v);  // integers up to 2^20: bf16 rounds them, fp16 too
    auto [q2, k2, v2] = dsp::dynamic_switch<2>(dsp::batch(q, k, v), dsp::Wire::bf16);
    std::size_t wrong = 0;
    for (const auto* y : {&q2, &k2, &v2})
      for_each_local(*y, [&](auto&, auto& gi, std::size_t i) {
        if (!same(y->local().data()[i], ref_bf16(value_at<float>(linear(gi, g))))) ++wrong;
      });
    CHECK(wrong == 0);
  }
}

TEST_CASE("a gather on each wire: every rank holds the same rounded values; counted bytes as the cost model") {
  using C = dsp::CountingCommunicator<dsp::MpiCommunicator>;
  C comm{world()};
  const std::size_t n = std::size_t(comm.size()), me = std::size_t(comm.rank());
  std::mt19937 rng(86);
  for (auto w : {dsp::Wire::bf16, dsp::Wire::fp16, dsp::Wire::fp8_e4m3}) {
    for (int c = 0; c < 8; ++c) {
      const auto g = c < 7 ? random_extents<3>(rng) : std::array<std::size_t, 3>{5, 7, 400};
      F3<dsp::Sharded<1>, C> x{comm, g};
      fill_random(x);
      dsp::DistTensor<float, 3, dsp::Replicated, C> y{comm, g};
      comm.reset();
      dsp::gather(x, y, w);
      CHECK(comm.counts().bytes_sent == dsp::transition_cost<dsp::Sharded<1>, dsp::Replicated>(g, 4, n, me, w).bytes);
      std::size_t outside = 0, not_rounding = 0;
      for_each_local(y, [&](auto&, auto& gi, std::size_t k) {
        const float v = value_of(y, gi), out = y.local().data()[k];
        const double err = std::fabs(double(out) - double(v));
        if (w == dsp::Wire::bf16 && !same(out, ref_bf16(v))) ++not_rounding;
        if (w == dsp::Wire::fp16 && !same(out, ref_fp16(v))) ++not_rounding;
        if (w == dsp::Wire::fp8_e4m3 &&
            err > (std::ldexp(std::fabs(double(v)), -4) + std::ldexp(2048.0, -10) / 448) * (1 + 1e-6))
          ++outside;
      });
      CHECK(outside == 0);
      CHECK(not_rounding == 0);
      // Every rank holds the same values (the own block rounded as the others see it).
      std::uint64_t h = 1469598103934665603ull;
      for (std::size_t k = 0; k < y.local_size(); ++k) {
        std::uint32_t u;
        std::memcpy(&u, y.local().data() + k, 4);
        h = (h ^ u) * 1099511628211ull;
      }
      std::uint64_t lo = 0, hi = 0;
      MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
      MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
      CHECK(lo == hi);
    }
  }
  F3<dsp::Sharded<0>> x{world(), {4, 4, 4}};
  fill(x);
  auto r = dsp::gather(x, dsp::Wire::exact);
  CHECK(count_wrong(r) == 0);
}

TEST_CASE("fp8: blocks of float subnormals keep the documented bound, in a switch and a gather") {
  // Issue 21: every value 1e-43 arrived as 0 (the inverse scale a/448 underflowed in float).
  // Cases: one constant subnormal; random subnormals of both signs; subnormals beside the
  // smallest normals; the largest subnormal. In each, a is at most the tensor's largest |x|.
  const std::array<std::size_t, 3> g{3, 7, 300};
  const float tiny = std::numeric_limits<float>::denorm_min();
  for (int c = 0; c < 4; ++c) {
    auto value = [&](std::size_t i) -> float {
      std::mt19937 r(std::uint32_t(i * 2654435761u + 5));
      switch (c) {
        case 0: return 1e-43f;
        case 1: return float(int(r() % 2001) - 1000) * tiny;  // |x| <= 1000 * 2^-149
        case 2:
          return i % 2 ? std::numeric_limits<float>::min() * (1.0f + float(r() % 8) / 8) : float(r() % 100) * tiny;
        default: return std::nextafter(std::numeric_limits<float>::min(), 0.0f) * (i % 3 ? 1.0f : -1.0f);
      }
    };
    double a = 0;
    for (std::size_t i = 0; i < g[0] * g[1] * g[2]; ++i) a = std::max(a, std::fabs(double(value(i))));
    auto bound = [&](float v) {
      return (std::ldexp(std::fabs(double(v)), -4) + a * std::ldexp(1.0, -10) / 448) * (1 + 1e-6) +
             std::ldexp(1.0, -150);
    };
    F3<dsp::Sharded<0>> x{world(), g};
    auto* p = x.local().data();
    for_each_local(x, [&](auto&, auto& gi, std::size_t k) { p[k] = value(linear(gi, g)); });
    auto y = dsp::dynamic_switch<2>(x, dsp::Wire::fp8_e4m3);
    auto r = dsp::gather(x, dsp::Wire::fp8_e4m3);
    std::size_t outside = 0, lost = 0;
    auto check = [&](const auto& t) {
      for_each_local(t, [&](auto&, auto& gi, std::size_t k) {
        const float v = value(linear(gi, g)), out = t.local().data()[k];
        if (std::fabs(double(out) - double(v)) > bound(v)) ++outside;
        if (c == 0 && out != v) ++lost;  // a constant block arrives exactly: its largest element is exact
      });
    };
    check(y);
    check(r);
    CHECK(outside == 0);
    CHECK(lost == 0);
    std::size_t changed = 0;  // the input is unchanged
    for_each_local(x, [&](auto&, auto& gi, std::size_t k) { changed += p[k] != value(linear(gi, g)); });
    CHECK(changed == 0);
  }
}
