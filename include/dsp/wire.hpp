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
//   bf16      |x' - x| <= 2^-8 |x|          for |x| >= 2^-126 (normal floats;
//                                           +-inf past the largest bf16)
//             |x' - x| <= 2^-134            below 2^-126 (bf16 subnormals)
//   fp16      |x' - x| <= 2^-11 |x|         for 2^-14 <= |x| <= 65504
//             |x' - x| <= 2^-25             below 2^-14 (fp16 subnormals)
//             x' = +-inf                    for |x| >= 65520 (as a cast would)
//   fp8_e4m3  |x' - x| <= 2^-4 |x| + a 2^-10 / 448 + 2^-150, with a the
//             largest |x| of its block; every element of a block is scaled by
//             448 / a before rounding, so a block's largest element never
//             saturates. (Both first terms carry a further relative 2^-22
//             from the float scale; 2^-150 is half the spacing of float
//             subnormals, where the decoded value is rounded to a float. It
//             holds for every finite input, subnormal blocks included.)
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
}  // namespace dsp
