// SPDX-License-Identifier: BSD-3-Clause
// dsp: the pack, unpack and own-block kernels of a low-precision wire
// (wire.hpp): they copy between a float tensor's run pattern and a wire
// section (or, for the own block, between two run patterns) and convert on
// the way, so the conversion costs no pass of its own. Work is split into
// blocks of kFp8Block elements in the chunk's element order; in fp8 a block
// is also the unit of one scale.
#pragma once

#include <dsp/plan/runs.hpp>
#include <dsp/wire.hpp>

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>

namespace dsp::detail {

/// Walks a run pattern element by element from element e.
struct RunCursor {
  Runs r;
  std::size_t run = 0, at = 0;
  KOKKOS_INLINE_FUNCTION RunCursor(const Runs& runs, std::size_t e) : r(runs), run(e / runs.len), at(e % runs.len) {}
  KOKKOS_INLINE_FUNCTION std::size_t index() const { return r.base + run * r.stride + at; }
  KOKKOS_INLINE_FUNCTION void next() {
    if (++at == r.len) at = 0, ++run;
  }
};

/// The element index of e0 when elements [e0, e1) lie in one run (then they
/// are contiguous), else ~0: the common case takes a loop the compiler can
/// vectorize.
KOKKOS_INLINE_FUNCTION std::size_t contiguous_from(const Runs& r, std::size_t e0, std::size_t e1) {
  const std::size_t at = e0 % r.len;
  return at + (e1 - e0) <= r.len ? r.base + (e0 / r.len) * r.stride + at : ~std::size_t(0);
}

KOKKOS_INLINE_FUNCTION float load_f32(const unsigned char* p) {
  float f;
  __builtin_memcpy(&f, p, sizeof f);
  return f;
}
KOKKOS_INLINE_FUNCTION void store_f32(unsigned char* p, float f) { __builtin_memcpy(p, &f, sizeof f); }

/// The largest finite |x| of elements [e0, e1) of `src` along `runs`.
KOKKOS_INLINE_FUNCTION float block_amax(const float* src, const Runs& runs, std::size_t e0, std::size_t e1) {
  float amax = 0;
  RunCursor c(runs, e0);
  for (std::size_t e = e0; e < e1; ++e, c.next()) {
    const float x = src[c.index()];
    const float a = x < 0 ? -x : x;
    if (wire::finite(x) && a > amax) amax = a;
  }
  return amax;
}

/// Block b of a pack: elements of `src` along `runs` into wire section `sec`
/// (n elements, nb blocks).
KOKKOS_INLINE_FUNCTION void pack_block(Wire w, unsigned char* sec, std::size_t n, const float* src, const Runs& runs,
                                       std::size_t b) {
  const std::size_t e0 = b * kFp8Block, e1 = e0 + kFp8Block < n ? e0 + kFp8Block : n;
  if (const std::size_t i0 = contiguous_from(runs, e0, e1); i0 != ~std::size_t(0)) {
    const float* in = src + i0;
    const std::size_t m = e1 - e0;
    if (w == Wire::fp8_e4m3) {
      const std::size_t nb = (n + kFp8Block - 1) / kFp8Block;
      float amax = 0;
      for (std::size_t e = 0; e < m; ++e) {
        const float a = in[e] < 0 ? -in[e] : in[e];
        amax = wire::finite(in[e]) && a > amax ? a : amax;
      }
      const wire::Fp8Scale s = wire::fp8_scale(amax);
      store_f32(sec + 4 * b, s.amax);
      unsigned char* codes = sec + 4 * nb + e0;
      for (std::size_t e = 0; e < m; ++e) codes[e] = wire::to_fp8(in[e], s.scale);
    } else {
      auto* h = reinterpret_cast<std::uint16_t*>(sec) + e0;
      if (w == Wire::bf16)
        for (std::size_t e = 0; e < m; ++e) h[e] = wire::to_bf16(in[e]);
      else
        for (std::size_t e = 0; e < m; ++e) h[e] = wire::to_fp16(in[e]);
    }
    return;
  }
  RunCursor c(runs, e0);
  if (w == Wire::fp8_e4m3) {
    const std::size_t nb = (n + kFp8Block - 1) / kFp8Block;
    const wire::Fp8Scale s = wire::fp8_scale(block_amax(src, runs, e0, e1));
    store_f32(sec + 4 * b, s.amax);
    unsigned char* codes = sec + 4 * nb;
    for (std::size_t e = e0; e < e1; ++e, c.next()) codes[e] = wire::to_fp8(src[c.index()], s.scale);
    return;
  }
  auto* h = reinterpret_cast<std::uint16_t*>(sec);
  if (w == Wire::bf16)
    for (std::size_t e = e0; e < e1; ++e, c.next()) h[e] = wire::to_bf16(src[c.index()]);
  else
    for (std::size_t e = e0; e < e1; ++e, c.next()) h[e] = wire::to_fp16(src[c.index()]);
}

/// Block b of an unpack: wire section `sec` (n elements) into `dst` along `runs`.
KOKKOS_INLINE_FUNCTION void unpack_block(Wire w, float* dst, const Runs& runs, const unsigned char* sec, std::size_t n,
                                         std::size_t b) {
  const std::size_t e0 = b * kFp8Block, e1 = e0 + kFp8Block < n ? e0 + kFp8Block : n;
  if (const std::size_t i0 = contiguous_from(runs, e0, e1); i0 != ~std::size_t(0)) {
    float* out = dst + i0;
    const std::size_t m = e1 - e0;
    if (w == Wire::fp8_e4m3) {
      const std::size_t nb = (n + kFp8Block - 1) / kFp8Block;
      const double inverse = wire::fp8_inverse(load_f32(sec + 4 * b));
      const unsigned char* codes = sec + 4 * nb + e0;
      for (std::size_t e = 0; e < m; ++e) out[e] = wire::from_fp8(codes[e], inverse);
    } else {
      const auto* h = reinterpret_cast<const std::uint16_t*>(sec) + e0;
      if (w == Wire::bf16)
        for (std::size_t e = 0; e < m; ++e) out[e] = wire::from_bf16(h[e]);
      else
        for (std::size_t e = 0; e < m; ++e) out[e] = wire::from_fp16(h[e]);
    }
    return;
  }
  RunCursor c(runs, e0);
  if (w == Wire::fp8_e4m3) {
    const std::size_t nb = (n + kFp8Block - 1) / kFp8Block;
    const double inverse = wire::fp8_inverse(load_f32(sec + 4 * b));
    const unsigned char* codes = sec + 4 * nb;
    for (std::size_t e = e0; e < e1; ++e, c.next()) dst[c.index()] = wire::from_fp8(codes[e], inverse);
    return;
  }
  const auto* h = reinterpret_cast<const std::uint16_t*>(sec);
  if (w == Wire::bf16)
    for (std::size_t e = e0; e < e1; ++e, c.next()) dst[c.index()] = wire::from_bf16(h[e]);
  else
    for (std::size_t e = e0; e < e1; ++e, c.next()) dst[c.index()] = wire::from_fp16(h[e]);
}

/// Block b of the own block: `src` along `sr` into `dst` along `dr`, through
/// the wire's rounding (the same values a peer would receive).
KOKKOS_INLINE_FUNCTION void round_block(Wire w, float* dst, const Runs& dr, const float* src, const Runs& sr,
                                        std::size_t n, std::size_t b) {
  const std::size_t e0 = b * kFp8Block, e1 = e0 + kFp8Block < n ? e0 + kFp8Block : n;
  const std::size_t di = contiguous_from(dr, e0, e1), si = contiguous_from(sr, e0, e1);
  if (di != ~std::size_t(0) && si != ~std::size_t(0) && w != Wire::fp8_e4m3) {  // the common case: loops that vectorize
    float* out = dst + di;
    const float* in = src + si;
    const std::size_t m = e1 - e0;
    if (w == Wire::bf16)
      for (std::size_t e = 0; e < m; ++e) out[e] = wire::from_bf16(wire::to_bf16(in[e]));
    else
      for (std::size_t e = 0; e < m; ++e) out[e] = wire::from_fp16(wire::to_fp16(in[e]));
    return;
  }
  RunCursor d(dr, e0), s(sr, e0);
  if (w == Wire::fp8_e4m3) {
    const wire::Fp8Scale k = wire::fp8_scale(block_amax(src, sr, e0, e1));
    const double inverse = wire::fp8_inverse(k.amax);
    for (std::size_t e = e0; e < e1; ++e, d.next(), s.next())
      dst[d.index()] = wire::from_fp8(wire::to_fp8(src[s.index()], k.scale), inverse);
  } else if (w == Wire::bf16) {
    for (std::size_t e = e0; e < e1; ++e, d.next(), s.next())
      dst[d.index()] = wire::from_bf16(wire::to_bf16(src[s.index()]));
  } else {
    for (std::size_t e = e0; e < e1; ++e, d.next(), s.next())
      dst[d.index()] = wire::from_fp16(wire::to_fp16(src[s.index()]));
  }
}

/// Runs `body(b)` for every block of an n-element chunk on `exec`: inline on
/// the host for small chunks (a kernel launch would cost more), else one kernel.
template <class Exec, class Body>
void for_blocks(const Exec& exec, std::size_t n, const Body& body) {
  const std::size_t nb = (n + kFp8Block - 1) / kFp8Block;
  if (nb == 0) return;
  if constexpr (Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible) {
    if (n * sizeof(float) <= (std::size_t(64) << 10)) {
      for (std::size_t b = 0; b < nb; ++b) body(b);
      return;
    }
  }
  Kokkos::parallel_for("dsp::wire", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>(exec, 0, nb), body);
}

/// Packs n float elements of `src` along `runs` into the wire section at `sec`.
template <class Exec>
void wire_pack(const Exec& exec, Wire w, unsigned char* sec, const float* src, Runs runs, std::size_t n) {
  for_blocks(
      exec, n, KOKKOS_LAMBDA(std::size_t b) { pack_block(w, sec, n, src, runs, b); });
}

/// Unpacks the wire section at `sec` (n elements) into `dst` along `runs`.
template <class Exec>
void wire_unpack(const Exec& exec, Wire w, float* dst, Runs runs, const unsigned char* sec, std::size_t n) {
  for_blocks(
      exec, n, KOKKOS_LAMBDA(std::size_t b) { unpack_block(w, dst, runs, sec, n, b); });
}

/// The own block: a copy task through the wire's rounding.
template <class Exec>
void wire_round(const Exec& exec, Wire w, float* dst, const float* src, const CopyTask& t) {
  const Runs dr = t.dst, sr = t.src;
  const std::size_t n = t.elems;
  for_blocks(
      exec, n, KOKKOS_LAMBDA(std::size_t b) { round_block(w, dst, dr, src, sr, n, b); });
}

}  // namespace dsp::detail
