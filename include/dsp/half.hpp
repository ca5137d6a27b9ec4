// SPDX-License-Identifier: BSD-3-Clause
// dsp: half-precision storage types for tensors, dsp::bfloat16 and
// dsp::float16. Two bytes each, trivially copyable, usable as the element
// type of any DistTensor (switch, gather, split, redistribute, batches,
// split-phase, reshard, dsp::hdf5) and on low-precision wires (wire.hpp).
//
//   dsp::DistTensor<dsp::bfloat16, 3, dsp::Sharded<0>, C> h{comm, {A, B, D}};
//   h.local()(0, 0, 0) = 1.5f;                      // from float, rounded to nearest even
//   float f = h.local()(0, 0, 0);                    // to float, exact
//   auto w = dsp::redistribute<dsp::Sharded<1>>(h, dsp::Wire::fp8_e4m3);
//
// They are storage types: conversions to and from float are implicit (as
// torch's c10::BFloat16 and c10::Half), arithmetic happens in float. The
// conversions round to nearest, ties to even; NaN stays NaN; float16
// overflows to +-inf from 65520 on, as a cast would. Debian's Kokkos 3.4 has
// no half types; Kokkos 4's Kokkos::Experimental::half_t and bhalf_t are
// float itself on host-only builds, so dsp keeps its own, converting through
// float.
#pragma once

#include <dsp/wire.hpp>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <type_traits>

namespace dsp {

/// The conversions of the wires and the half types, on host and device.
namespace wire {

KOKKOS_INLINE_FUNCTION std::uint32_t bits(float f) {
  std::uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
}
KOKKOS_INLINE_FUNCTION float from_bits(std::uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

/// float -> bfloat16, round to nearest even; NaN stays NaN.
KOKKOS_INLINE_FUNCTION std::uint16_t to_bf16(float f) {
  const std::uint32_t u = bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
KOKKOS_INLINE_FUNCTION float from_bf16(std::uint16_t h) { return from_bits(std::uint32_t(h) << 16); }

/// A mask of all ones when `c`, else zero: selects by and/or instead of `?:`.
/// With gcc's default -ftrapping-math, a `?:` between a float result and
/// others becomes a branch (the float operation may not be speculated), and a
/// loop with branches is not vectorized; masks keep it straight-line.
KOKKOS_INLINE_FUNCTION std::uint32_t mask_if(bool c) { return 0u - std::uint32_t(c); }

/// float -> IEEE binary16, round to nearest even; overflow to +-inf. Three
/// candidate results, one chosen by masks: no per-element branches, so a loop
/// of them vectorizes.
KOKKOS_INLINE_FUNCTION std::uint16_t to_fp16(float f) {
  const std::uint32_t u = bits(f), sign = (u >> 16) & 0x8000u, x = u & 0x7fffffffu;
  // Normal range (>= 2^-14): rebias, then round the 13 dropped bits to nearest even.
  const std::uint32_t r = x - (std::uint32_t(127 - 15) << 23);
  const std::uint32_t normal = (r + 0x0fffu + ((r >> 13) & 1u)) >> 13;
  // Below 2^-14: adding 0.5 (whose last bit is worth 2^-24) makes the float
  // unit round the value to a multiple of 2^-24, nearest even: the subnormal code.
  const std::uint32_t sub = bits(from_bits(x) + 0.5f) - 0x3f000000u;
  const std::uint32_t big = 0x7c00u | (mask_if(x > 0x7f800000u) & 0x0200u);  // infinity and >= 65520; NaN
  const std::uint32_t is_big = mask_if(x >= 0x477ff000u);
  const std::uint32_t is_normal = ~is_big & mask_if(x >= 0x38800000u);
  const std::uint32_t h = (is_big & big) | (is_normal & normal) | (~(is_big | is_normal) & sub);
  return static_cast<std::uint16_t>(sign | h);
}
KOKKOS_INLINE_FUNCTION float from_fp16(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  const std::uint32_t sub = bits(float(m) * 5.9604644775390625e-8f);  // m * 2^-24, exact
  const std::uint32_t special = 0x7f800000u | (m << 13), normal = ((e + 112) << 23) | (m << 13);
  const std::uint32_t is_sub = mask_if(e == 0), is_special = mask_if(e == 31);
  return from_bits(sign | (is_sub & sub) | (is_special & special) | (~(is_sub | is_special) & normal));
}

/// float -> fp8 e4m3 (bias 7, no infinities, NaN 0x7f), round to nearest
/// even, saturating at +-448; NaN and infinities become NaN. Selects, no
/// per-element branches.
KOKKOS_INLINE_FUNCTION std::uint8_t to_e4m3(float v) {
  const std::uint32_t u = bits(v), sign = (u >> 24) & 0x80u, x = u & 0x7fffffffu;
  // Normal range (>= 2^-6): rebias to 7, round the 20 dropped bits to nearest even.
  const std::uint32_t r = x - (std::uint32_t(127 - 7) << 23);
  const std::uint32_t normal = (r + 0x7ffffu + ((r >> 20) & 1u)) >> 20;
  // Below 2^-6: 16384 + v rounds v to a multiple of 2^-9 (the subnormal spacing); code 8 is 2^-6.
  const std::uint32_t sub = bits(from_bits(x) + 16384.0f) - 0x46800000u;
  const std::uint32_t c = x >= 0x7f800000u   ? 0x7fu
                          : x >= 0x43e00000u ? 0x7eu  // NaN, inf; >= 448 saturates
                          : x >= 0x3c800000u ? (normal < 0x7eu ? normal : 0x7eu)
                                             : sub;
  return static_cast<std::uint8_t>(sign | c);
}
KOKKOS_INLINE_FUNCTION float from_e4m3(std::uint8_t c) {
  const std::uint32_t sign = std::uint32_t(c & 0x80u) << 24, e = (c >> 3) & 0xfu, m = c & 7u;
  const std::uint32_t sub = bits(float(m) * 0.001953125f);  // m * 2^-9
  const std::uint32_t normal = ((e + 120) << 23) | (m << 20);
  return from_bits((c & 0x7fu) == 0x7fu ? 0x7fc00000u | sign : sign | (e == 0 ? sub : normal));
}

/// The scale of an fp8 block whose largest finite |x| is `amax`: elements are
/// multiplied by `scale` before rounding. What travels is amax itself (a
/// float, exact for every block); the receiver multiplies by amax / 448 in
/// double precision (fp8_inverse). A float amax / 448 would underflow to 0
/// for blocks of float subnormals and lose their values.
struct Fp8Scale {
  double scale = 0;  // 448 / amax (0 for an all-zero block)
  float amax = 0;    // what the wire section stores
};
KOKKOS_INLINE_FUNCTION Fp8Scale fp8_scale(float amax) {
  if (!(amax > 0)) return {};
  return {448.0 / double(amax), amax};
}
/// The factor that turns an e4m3 value back into the block's units.
KOKKOS_INLINE_FUNCTION double fp8_inverse(float amax) { return double(amax) * (1.0 / 448.0); }
/// An element decoded: the e4m3 value times the block's inverse scale,
/// rounded once, to float.
KOKKOS_INLINE_FUNCTION float from_fp8(std::uint8_t c, double inverse) { return float(double(from_e4m3(c)) * inverse); }
KOKKOS_INLINE_FUNCTION std::uint8_t to_fp8(float x, double scale) {
  const std::uint32_t a = bits(x) & 0x7fffffffu;
  if (a >= 0x7f800000u) return 0x7fu;
  return to_e4m3(float(double(x) * scale));
}
KOKKOS_INLINE_FUNCTION bool finite(float x) { return (bits(x) & 0x7fffffffu) < 0x7f800000u; }

}  // namespace wire

/// bfloat16: float's 8 exponent bits and 8 significant bits, in 2 bytes.
struct bfloat16 {
  std::uint16_t bits;  ///< the raw encoding (a default-constructed value is uninitialized, as a float)

  bfloat16() = default;
  /// float -> bfloat16, rounded to nearest even.
  KOKKOS_INLINE_FUNCTION bfloat16(float f) : bits(wire::to_bf16(f)) {}  // NOLINT: implicit, as float's storage
  /// bfloat16 -> float, exact.
  KOKKOS_INLINE_FUNCTION operator float() const { return wire::from_bf16(bits); }  // NOLINT
  /// The value with encoding `b`.
  KOKKOS_INLINE_FUNCTION static constexpr bfloat16 from_bits(std::uint16_t b) {
    bfloat16 h{};
    h.bits = b;
    return h;
  }
};

/// float16: IEEE 754 binary16, 5 exponent bits and 11 significant bits, in 2 bytes.
struct float16 {
  std::uint16_t bits;  ///< the raw encoding (a default-constructed value is uninitialized, as a float)

  float16() = default;
  /// float -> float16, rounded to nearest even; +-inf from 65520 on.
  KOKKOS_INLINE_FUNCTION float16(float f) : bits(wire::to_fp16(f)) {}  // NOLINT
  /// float16 -> float, exact.
  KOKKOS_INLINE_FUNCTION operator float() const { return wire::from_fp16(bits); }  // NOLINT
  /// The value with encoding `b`.
  KOKKOS_INLINE_FUNCTION static constexpr float16 from_bits(std::uint16_t b) {
    float16 h{};
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(bfloat16) == 2 && std::is_trivial_v<bfloat16> && alignof(bfloat16) == 2);
static_assert(sizeof(float16) == 2 && std::is_trivial_v<float16> && alignof(float16) == 2);

/// The ElemKind of an element type (wire.hpp): which wires can carry it.
template <class T>
inline constexpr ElemKind elem_kind_v = std::is_same_v<T, float>      ? ElemKind::f32
                                        : std::is_same_v<T, double>   ? ElemKind::f64
                                        : std::is_same_v<T, bfloat16> ? ElemKind::bf16
                                        : std::is_same_v<T, float16>  ? ElemKind::f16
                                                                      : ElemKind::other;

}  // namespace dsp
