// SPDX-License-Identifier: BSD-3-Clause
// dsp: low-precision wire types. A switch of float tensors can send its
// chunks as bf16, fp16 or fp8 (e4m3, one scale per block of 128 elements):
// the pack kernel converts while it packs, the unpack kernel converts back
// while it unpacks, so there is no extra pass over the data. The own block
// goes through the same rounding, so the result does not depend on which rank
// held an element.
//
//   auto y = dsp::dynamic_switch<2>(x, dsp::Wire::bf16);
//
// Rounding is to nearest, ties to even, in every format. Error bounds, for a
// finite float x that arrives as x':
//   bf16      |x' - x| <= 2^-8 |x|          (and +-inf past the largest bf16)
//   fp16      |x' - x| <= 2^-11 |x|         for 2^-14 <= |x| <= 65504
//             |x' - x| <= 2^-25             below 2^-14 (fp16 subnormals)
//             x' = +-inf                    for |x| >= 65520 (as a cast would)
//   fp8_e4m3  |x' - x| <= 2^-4 |x| + a 2^-10 / 448, with a the largest |x| of
//             its block; every element of a block is scaled by 448 / a
//             before rounding, so a block's largest element never saturates.
//             (Both terms carry a further relative 2^-22 from the float scale.)
// NaN arrives as NaN in every format; in fp8 an infinity also arrives as NaN
// (e4m3 has no infinity), and a block's scale ignores non-finite values.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dsp {

/// How the elements of a float tensor travel between ranks.
enum class Wire : std::uint8_t {
  exact = 0,  ///< as they are (the default)
  bf16,       ///< bfloat16: half the bytes, float's range, 8 significant bits
  fp16,       ///< IEEE half: half the bytes, 11 significant bits, range +-65504
  fp8_e4m3,   ///< fp8 e4m3 with a float scale per block of 128 elements: about a quarter of the bytes
};

constexpr const char* wire_name(Wire w) {
  switch (w) {
    case Wire::exact: return "exact";
    case Wire::bf16: return "bf16";
    case Wire::fp16: return "fp16";
    case Wire::fp8_e4m3: return "fp8_e4m3";
  }
  return "unknown";
}

/// Elements per fp8 block (one float scale each).
inline constexpr std::size_t kFp8Block = 128;

/// The bytes `elems` consecutive elements of `elem_bytes` bytes take on the
/// wire, as one section of a chunk. Exact: elems * elem_bytes. Otherwise the
/// section is padded to a multiple of 4 bytes (so that the next one starts
/// aligned): bf16 and fp16 2 bytes per element; fp8 one byte per element
/// after one 4-byte scale per block of kFp8Block elements. Empty: 0.
constexpr std::size_t wire_section_bytes(Wire w, std::size_t elems, std::size_t elem_bytes) {
  if (elems == 0) return 0;
  auto up4 = [](std::size_t b) { return (b + 3) / 4 * 4; };
  switch (w) {
    case Wire::exact: return elems * elem_bytes;
    case Wire::bf16:
    case Wire::fp16: return up4(2 * elems);
    case Wire::fp8_e4m3: return 4 * ((elems + kFp8Block - 1) / kFp8Block) + up4(elems);
  }
  return elems * elem_bytes;
}

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

/// float -> IEEE binary16, round to nearest even; overflow to +-inf.
KOKKOS_INLINE_FUNCTION std::uint16_t to_fp16(float f) {
  std::uint32_t x = bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<std::uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: rounds past 65504
  if (x >= 0x38800000u) {                                                   // normal: >= 2^-14
    x -= std::uint32_t(127 - 15) << 23;
    return static_cast<std::uint16_t>(sign | ((x + 0x0fffu + ((x >> 13) & 1u)) >> 13));
  }
  if (x <= 0x33000000u) return static_cast<std::uint16_t>(sign);  // <= 2^-25: ties to even zero
  const std::uint32_t e = x >> 23, mant = (x & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126 - e;  // value / 2^-24 = mant / 2^shift, shift in [14, 24]
  std::uint32_t r = mant >> shift;
  const std::uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1u))) ++r;
  return static_cast<std::uint16_t>(sign | r);
}
KOKKOS_INLINE_FUNCTION float from_fp16(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) return from_bits(sign | bits(float(m) * 5.9604644775390625e-8f));  // m * 2^-24, exact
  if (e == 31) return from_bits(sign | 0x7f800000u | (m << 13));
  return from_bits(sign | ((e + 112) << 23) | (m << 13));
}

/// float -> fp8 e4m3 (bias 7, no infinities, NaN 0x7f), round to nearest
/// even, saturating at +-448; NaN and infinities become NaN.
KOKKOS_INLINE_FUNCTION std::uint8_t to_e4m3(float v) {
  const std::uint32_t u = bits(v);
  const std::uint8_t sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  const std::uint32_t x = u & 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<std::uint8_t>(sign | 0x7fu);
  if (x < 0x3c800000u) {  // below 2^-6: a multiple of 2^-9 (code 8 is 2^-6 itself)
    const float q = from_bits(x) * 512.0f;
    std::uint32_t i = static_cast<std::uint32_t>(q);
    const float frac = q - float(i);
    if (frac > 0.5f || (frac == 0.5f && (i & 1u))) ++i;
    return static_cast<std::uint8_t>(sign | i);
  }
  int e = int(x >> 23) - 127;  // in [-6, ...]
  const std::uint32_t m = x & 0x7fffffu;
  std::uint32_t r = (m + 0x7ffffu + ((m >> 20) & 1u)) >> 20;  // 3 mantissa bits, nearest even
  if (r == 8) r = 0, ++e;
  if (e > 8 || (e == 8 && r > 6)) return static_cast<std::uint8_t>(sign | 0x7eu);  // 448
  return static_cast<std::uint8_t>(sign | (std::uint32_t(e + 7) << 3) | r);
}
KOKKOS_INLINE_FUNCTION float from_e4m3(std::uint8_t c) {
  const std::uint32_t sign = std::uint32_t(c & 0x80u) << 24, e = (c >> 3) & 0xfu, m = c & 7u;
  if (e == 15 && m == 7) return from_bits(0x7fc00000u | sign);
  if (e == 0) return from_bits(sign | bits(float(m) * 0.001953125f));  // m * 2^-9
  return from_bits(sign | ((e + 120) << 23) | (m << 20));
}

/// The scale of an fp8 block whose largest finite |x| is `amax`: elements are
/// multiplied by `scale` before rounding and by `inverse` after.
struct Fp8Scale {
  double scale = 0;  // 448 / amax (0 for an all-zero block)
  float inverse = 0;
};
KOKKOS_INLINE_FUNCTION Fp8Scale fp8_scale(float amax) {
  if (!(amax > 0)) return {};
  return {448.0 / double(amax), float(double(amax) / 448.0)};
}
KOKKOS_INLINE_FUNCTION std::uint8_t to_fp8(float x, double scale) {
  const std::uint32_t a = bits(x) & 0x7fffffffu;
  if (a >= 0x7f800000u) return 0x7fu;
  return to_e4m3(float(double(x) * scale));
}
KOKKOS_INLINE_FUNCTION bool finite(float x) { return (bits(x) & 0x7fffffffu) < 0x7f800000u; }

}  // namespace wire
}  // namespace dsp
