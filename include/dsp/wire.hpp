// SPDX-License-Identifier: BSD-3-Clause
// dsp: low-precision wires. A switch or gather can send its chunks in a
// narrower format than the tensor's: the pack kernel converts while it
// packs, the unpack kernel converts back while it unpacks, so there is no
// extra pass over the data. The own block goes through the same rounding, so
// the result does not depend on which rank held an element.
//
//   auto y = dsp::dynamic_switch<2>(x, dsp::Wire::bf16);
//
// Which tensor travels on which wire (any other pair does not compile, and
// in a batch of mixed element types raises InvalidArgument on every rank):
//   float            bf16, fp16, fp8_e4m3
//   dsp::bfloat16    fp8_e4m3
//   dsp::float16     fp8_e4m3, bf16
//   double           fp32
// (half.hpp has dsp::bfloat16 and dsp::float16, and the conversions.) This
// header is types and arithmetic only, no Kokkos: plans include it.
//
// Rounding is to nearest, ties to even, in every format. Error bounds, for a
// finite value x that arrives as x':
//   float on bf16     |x' - x| <= 2^-8 |x|      for |x| >= 2^-126 (normal floats;
//                                             +-inf past the largest bf16)
//                     |x' - x| <= 2^-134        below 2^-126 (bf16 subnormals)
//   float on fp16     |x' - x| <= 2^-11 |x|     for 2^-14 <= |x| <= 65504
//                     |x' - x| <= 2^-25         below 2^-14 (fp16 subnormals)
//                     x' = +-inf                for |x| >= 65520 (as a cast would)
//   float on fp8_e4m3 |x' - x| <= 2^-4 |x| + a 2^-10 / 448 + 2^-150, with a
//                     the largest |x| of its block; every element of a block
//                     is scaled by 448 / a before rounding, so a block's
//                     largest element never saturates. (Both first terms
//                     carry a further relative 2^-22 from the float scale;
//                     2^-150 is half the spacing of float subnormals, where
//                     the decoded value is rounded to a float. It holds for
//                     every finite input, subnormal blocks included.)
//   bfloat16 on fp8   the float bound, then rounded to bf16: |x' - x| <=
//                     (2^-4 + 2^-8 + 2^-12) |x| + 1.01 a 2^-10 / 448 + 2^-134
//   float16 on fp8    likewise, rounded to fp16: |x' - x| <= (2^-4 + 2^-11 +
//                     2^-15) |x| + 1.01 a 2^-10 / 448 + 2^-25
//   float16 on bf16   |x' - x| <= 2^-8 |x| for every finite x (fp16's whole
//                     range, subnormals included, is inside bf16's normal
//                     range); values above 65408 in magnitude, which round
//                     to 65536 in bf16, arrive as +-65504 (within the bound)
//   double on fp32    |x' - x| <= 2^-24 |x| for 2^-126 <= |x| < 2^128 (less
//                     half a float ulp: x' = +-inf from the largest float
//                     plus half an ulp on); |x' - x| <= 2^-150 below 2^-126
// NaN arrives as NaN in every format, infinities as infinities, but in fp8
// an infinity arrives as NaN (e4m3 has no infinity), and a block's scale
// ignores non-finite values.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dsp {

/// How the elements of a tensor travel between ranks (the pairs above).
enum class Wire : std::uint8_t {
  exact = 0,  ///< as they are (the default)
  bf16,       ///< bfloat16: 2 bytes, float's range, 8 significant bits
  fp16,       ///< IEEE half: 2 bytes, 11 significant bits, range +-65504
  fp8_e4m3,   ///< fp8 e4m3 with a float scale per block of 128 elements: about 1 byte per element
  fp32,       ///< IEEE single: 4 bytes, for double tensors
};

constexpr const char* wire_name(Wire w) {
  switch (w) {
    case Wire::exact: return "exact";
    case Wire::bf16: return "bf16";
    case Wire::fp16: return "fp16";
    case Wire::fp8_e4m3: return "fp8_e4m3";
    case Wire::fp32: return "fp32";
  }
  return "unknown";
}

/// Every wire, in declaration order (for parsers and tests).
inline constexpr Wire kWires[] = {Wire::exact, Wire::bf16, Wire::fp16, Wire::fp8_e4m3, Wire::fp32};

/// The element types a wire converts, as the engine sees them (a byte per tensor).
enum class ElemKind : std::uint8_t {
  other = 0,  ///< any other type: exact wires only
  f32,        ///< float
  f64,        ///< double
  bf16,       ///< dsp::bfloat16
  f16,        ///< dsp::float16
};

constexpr const char* elem_kind_name(ElemKind k) {
  switch (k) {
    case ElemKind::f32: return "float";
    case ElemKind::f64: return "double";
    case ElemKind::bf16: return "dsp::bfloat16";
    case ElemKind::f16: return "dsp::float16";
    case ElemKind::other: break;
  }
  return "this element type";
}

/// Whether wire `w` carries tensors of kind `k` (the table above).
constexpr bool wire_carries(Wire w, ElemKind k) {
  switch (w) {
    case Wire::exact: return true;
    case Wire::bf16: return k == ElemKind::f32 || k == ElemKind::f16;
    case Wire::fp16: return k == ElemKind::f32;
    case Wire::fp8_e4m3: return k == ElemKind::f32 || k == ElemKind::bf16 || k == ElemKind::f16;
    case Wire::fp32: return k == ElemKind::f64;
  }
  return false;
}

/// The wires that carry kind `k`, as text for messages.
constexpr const char* wires_for(ElemKind k) {
  switch (k) {
    case ElemKind::f32: return "bf16, fp16 or fp8_e4m3";
    case ElemKind::f64: return "fp32";
    case ElemKind::bf16: return "fp8_e4m3";
    case ElemKind::f16: return "fp8_e4m3 or bf16";
    case ElemKind::other: break;
  }
  return "none (only Wire::exact)";
}

/// Elements per fp8 block (one float scale each).
inline constexpr std::size_t kFp8Block = 128;

/// The bytes `elems` consecutive elements of `elem_bytes` bytes take on the
/// wire, as one section of a chunk. Exact: elems * elem_bytes. Otherwise the
/// section is padded to a multiple of 4 bytes (so that the next one starts
/// aligned): bf16 and fp16 2 bytes per element; fp8 one byte per element
/// after one 4-byte scale per block of kFp8Block elements; fp32 4 bytes per
/// element. Empty: 0.
constexpr std::size_t wire_section_bytes(Wire w, std::size_t elems, std::size_t elem_bytes) {
  if (elems == 0) return 0;
  auto up4 = [](std::size_t b) { return (b + 3) / 4 * 4; };
  switch (w) {
    case Wire::exact: return elems * elem_bytes;
    case Wire::bf16:
    case Wire::fp16: return up4(2 * elems);
    case Wire::fp8_e4m3: return 4 * ((elems + kFp8Block - 1) / kFp8Block) + up4(elems);
    case Wire::fp32: return 4 * elems;
  }
  return elems * elem_bytes;
}

}  // namespace dsp
