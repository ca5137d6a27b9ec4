// SPDX-License-Identifier: BSD-3-Clause
// dsp: the pack, unpack and own-block kernels of a low-precision wire
// (wire.hpp): they copy between a tensor's run pattern and a wire section
// (or, for the own block, between two run patterns) and convert on the way,
// so the conversion costs no pass of its own. Every element goes through
// float (a double tensor: rounded to float, which is what the fp32 wire
// carries). In fp8 the elements are in blocks of kFp8Block in the chunk's
// element order, one scale each.
//
// Three schedules, the same values: on the host, a loop per block of
// kFp8Block elements, written so the compiler vectorizes the contiguous case.
// On a device, DeviceKernels::tuned: a thread per group of kGroup elements
// (16-byte loads and stores where the group is one aligned run), and for fp8
// packs 32 vector lanes per block (see "device group schedule");
// DeviceKernels::segments: one element per thread, and for fp8 a team per
// block (0.29x and 0.08x of cudaMemcpy on an H200, 2026-11-27);
// DeviceKernels::baseline runs the host schedule on the device (a thread per
// block: its loads are 512 bytes apart: 0.07x).
#pragma once

#include <dsp/config.hpp>
#include <dsp/half.hpp>
#include <dsp/kernels/copy.hpp>
#include <dsp/plan/tasks.hpp>
#include <dsp/settings.hpp>
#include <dsp/wire.hpp>

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

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

/// An element kind's storage and its way to and from float.
template <ElemKind K>
struct ElemOps;
template <>
struct ElemOps<ElemKind::f32> {
  using T = float;
  KOKKOS_INLINE_FUNCTION static float load(T x) { return x; }
  KOKKOS_INLINE_FUNCTION static T store(float v) { return v; }
};
template <>
struct ElemOps<ElemKind::f64> {
  using T = double;
  KOKKOS_INLINE_FUNCTION static float load(T x) { return static_cast<float>(x); }  // round to nearest even
  KOKKOS_INLINE_FUNCTION static T store(float v) { return v; }
};
template <>
struct ElemOps<ElemKind::bf16> {
  using T = std::uint16_t;  // dsp::bfloat16's bits
  KOKKOS_INLINE_FUNCTION static float load(T x) { return wire::from_bf16(x); }
  KOKKOS_INLINE_FUNCTION static T store(float v) { return wire::to_bf16(v); }
};
template <>
struct ElemOps<ElemKind::f16> {
  using T = std::uint16_t;  // dsp::float16's bits
  KOKKOS_INLINE_FUNCTION static float load(T x) { return wire::from_fp16(x); }
  /// A finite value past fp16's largest (a bf16 wire rounds 65409 ... 65504
  /// up to 65536) arrives as +-65504, not as an infinity.
  KOKKOS_INLINE_FUNCTION static T store(float v) {
    const std::uint32_t u = wire::bits(v), a = u & 0x7fffffffu;
    const bool past = a > 0x477fe000u && a < 0x7f800000u;  // 65504 < |v| < inf
    return wire::to_fp16(past ? wire::from_bits((u & 0x80000000u) | 0x477fe000u) : v);
  }
};

/// A value on a 2- or 4-byte wire (bf16, fp16, fp32): element e of section `sec`.
KOKKOS_INLINE_FUNCTION void put_wire(Wire w, unsigned char* sec, std::size_t e, float v) {
  if (w == Wire::fp32) store_f32(sec + 4 * e, v);
  else reinterpret_cast<std::uint16_t*>(sec)[e] = w == Wire::bf16 ? wire::to_bf16(v) : wire::to_fp16(v);
}
KOKKOS_INLINE_FUNCTION float get_wire(Wire w, const unsigned char* sec, std::size_t e) {
  if (w == Wire::fp32) return load_f32(sec + 4 * e);
  const std::uint16_t h = reinterpret_cast<const std::uint16_t*>(sec)[e];
  return w == Wire::bf16 ? wire::from_bf16(h) : wire::from_fp16(h);
}
/// v through a 2- or 4-byte wire and back.
KOKKOS_INLINE_FUNCTION float round_wire(Wire w, float v) {
  if (w == Wire::fp32) return v;
  return w == Wire::bf16 ? wire::from_bf16(wire::to_bf16(v)) : wire::from_fp16(wire::to_fp16(v));
}

/// Calls f(e, index) for elements [e0, e1) along `runs`: a plain loop when
/// they are contiguous (so it vectorizes), else a cursor.
template <class F>
KOKKOS_INLINE_FUNCTION void for_elements(const Runs& runs, std::size_t e0, std::size_t e1, const F& f) {
  if (const std::size_t i0 = contiguous_from(runs, e0, e1); i0 != ~std::size_t(0)) {
    for (std::size_t e = e0; e < e1; ++e) f(e, i0 + (e - e0));
    return;
  }
  RunCursor c(runs, e0);
  for (std::size_t e = e0; e < e1; ++e, c.next()) f(e, c.index());
}

/// The largest finite |x| of elements [e0, e1) of `src` along `runs`.
template <ElemKind K>
KOKKOS_INLINE_FUNCTION float block_amax(const typename ElemOps<K>::T* src, const Runs& runs, std::size_t e0,
                                        std::size_t e1) {
  float amax = 0;
  for_elements(runs, e0, e1, [&](std::size_t, std::size_t i) {
    const float x = ElemOps<K>::load(src[i]);
    const float a = x < 0 ? -x : x;
    amax = wire::finite(x) && a > amax ? a : amax;
  });
  return amax;
}

/// Block b of a pack: elements of `src` along `runs` into wire section `sec`
/// (n elements, nb blocks).
template <ElemKind K>
KOKKOS_INLINE_FUNCTION void pack_block(Wire w, unsigned char* sec, std::size_t n, const typename ElemOps<K>::T* src,
                                       const Runs& runs, std::size_t b) {
  const std::size_t e0 = b * kFp8Block, e1 = e0 + kFp8Block < n ? e0 + kFp8Block : n;
  if (w == Wire::fp8_e4m3) {
    const std::size_t nb = (n + kFp8Block - 1) / kFp8Block;
    const wire::Fp8Scale s = wire::fp8_scale(block_amax<K>(src, runs, e0, e1));
    store_f32(sec + 4 * b, s.amax);
    unsigned char* codes = sec + 4 * nb;
    for_elements(runs, e0, e1,
                 [&](std::size_t e, std::size_t i) { codes[e] = wire::to_fp8(ElemOps<K>::load(src[i]), s.scale); });
    return;
  }
  for_elements(runs, e0, e1, [&](std::size_t e, std::size_t i) { put_wire(w, sec, e, ElemOps<K>::load(src[i])); });
}

/// Block b of an unpack: wire section `sec` (n elements) into `dst` along `runs`.
template <ElemKind K>
KOKKOS_INLINE_FUNCTION void unpack_block(Wire w, typename ElemOps<K>::T* dst, const Runs& runs,
                                         const unsigned char* sec, std::size_t n, std::size_t b) {
  const std::size_t e0 = b * kFp8Block, e1 = e0 + kFp8Block < n ? e0 + kFp8Block : n;
  if (w == Wire::fp8_e4m3) {
    const std::size_t nb = (n + kFp8Block - 1) / kFp8Block;
    const double inverse = wire::fp8_inverse(load_f32(sec + 4 * b));
    const unsigned char* codes = sec + 4 * nb;
    for_elements(runs, e0, e1,
                 [&](std::size_t e, std::size_t i) { dst[i] = ElemOps<K>::store(wire::from_fp8(codes[e], inverse)); });
    return;
  }
  for_elements(runs, e0, e1, [&](std::size_t e, std::size_t i) { dst[i] = ElemOps<K>::store(get_wire(w, sec, e)); });
}

/// Block b of the own block: `src` along `sr` into `dst` along `dr`, through
/// the wire's rounding (the same values a peer would receive).
template <ElemKind K>
KOKKOS_INLINE_FUNCTION void round_block(Wire w, typename ElemOps<K>::T* dst, const Runs& dr,
                                        const typename ElemOps<K>::T* src, const Runs& sr, std::size_t n,
                                        std::size_t b) {
  using Op = ElemOps<K>;
  const std::size_t e0 = b * kFp8Block, e1 = e0 + kFp8Block < n ? e0 + kFp8Block : n;
  const std::size_t di = contiguous_from(dr, e0, e1), si = contiguous_from(sr, e0, e1);
  if (w == Wire::fp8_e4m3) {
    const wire::Fp8Scale k = wire::fp8_scale(block_amax<K>(src, sr, e0, e1));
    const double inverse = wire::fp8_inverse(k.amax);
    RunCursor d(dr, e0), s(sr, e0);
    for (std::size_t e = e0; e < e1; ++e, d.next(), s.next())
      dst[d.index()] = Op::store(wire::from_fp8(wire::to_fp8(Op::load(src[s.index()]), k.scale), inverse));
    return;
  }
  if (di != ~std::size_t(0) && si != ~std::size_t(0)) {  // the common case: a loop that vectorizes
    for (std::size_t e = 0; e < e1 - e0; ++e) dst[di + e] = Op::store(round_wire(w, Op::load(src[si + e])));
    return;
  }
  RunCursor d(dr, e0), s(sr, e0);
  for (std::size_t e = e0; e < e1; ++e, d.next(), s.next())
    dst[d.index()] = Op::store(round_wire(w, Op::load(src[s.index()])));
}

// ------------------------------------------------------------ device schedule

/// Element e of a run pattern: plan/tasks.hpp's element_at, callable on a
/// device (runs.hpp knows no Kokkos, and nvcc calls a plain constexpr
/// function from device code only with --expt-relaxed-constexpr).
KOKKOS_INLINE_FUNCTION std::size_t run_index(const Runs& r, std::size_t e) {
  const std::size_t q = e / r.len;
  return r.base + q * r.stride + (e - q * r.len);
}

/// The largest finite |value| of block b, reduced by the team's threads.
template <ElemKind K, class Member>
KOKKOS_INLINE_FUNCTION float team_amax(const Member& m, const typename ElemOps<K>::T* src, const Runs& runs,
                                       std::size_t e0, std::size_t e1) {
  float amax = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(m, e0, e1),
      [&](std::size_t e, float& a) {
    const float x = ElemOps<K>::load(src[run_index(runs, e)]);
    const float v = x < 0 ? -x : x;
    if (wire::finite(x) && v > a) a = v;
      },
      Kokkos::Max<float>(amax));
  return amax;
}

/// Threads per team of the device fp8 kernels: one block of kFp8Block
/// elements per team, an element per thread (1 on host execution spaces,
/// whose teams have one thread).
template <class Exec>
Kokkos::TeamPolicy<Exec> fp8_teams(const Exec& exec, std::size_t blocks) {
  if constexpr (Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible)
    return Kokkos::TeamPolicy<Exec>(exec, int(blocks), 1);
  else return Kokkos::TeamPolicy<Exec>(exec, int(blocks), int(kFp8Block));
}

/// Runs `body(b)` for every block of an n-element chunk on `exec`: inline on
/// the host for small chunks (a kernel launch would cost more), else one kernel.
/// `body` must be a named functor, not a KOKKOS_LAMBDA: in a CUDA build that is
/// an nvcc extended lambda, and calling one inline on the host crashed.
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

/// The element schedule (devices): a thread per element, a team per fp8 block.
template <ElemKind K, class Exec>
void pack_elements(const Exec& exec, Wire w, unsigned char* sec, const typename ElemOps<K>::T* src, Runs runs,
                   std::size_t n) {
  if (w != Wire::fp8_e4m3) {
    Kokkos::parallel_for(
        "dsp::wire_pack", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>(exec, 0, n),
        KOKKOS_LAMBDA(std::size_t e) { put_wire(w, sec, e, ElemOps<K>::load(src[run_index(runs, e)])); });
    return;
  }
  const std::size_t nb = (n + kFp8Block - 1) / kFp8Block;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::parallel_for(
      "dsp::wire_pack_fp8", fp8_teams(exec, nb), KOKKOS_LAMBDA(const Member& m) {
        const std::size_t b = std::size_t(m.league_rank());
        const std::size_t e0 = b * kFp8Block, e1 = e0 + kFp8Block < n ? e0 + kFp8Block : n;
        const wire::Fp8Scale s = wire::fp8_scale(team_amax<K>(m, src, runs, e0, e1));
        Kokkos::single(Kokkos::PerTeam(m), [&] { store_f32(sec + 4 * b, s.amax); });
        unsigned char* codes = sec + 4 * nb;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, e0, e1), [&](std::size_t e) {
          codes[e] = wire::to_fp8(ElemOps<K>::load(src[run_index(runs, e)]), s.scale);
        });
      });
}
template <ElemKind K, class Exec>
void unpack_elements(const Exec& exec, Wire w, typename ElemOps<K>::T* dst, Runs runs, const unsigned char* sec,
                     std::size_t n) {
  const std::size_t nb = (n + kFp8Block - 1) / kFp8Block;
  Kokkos::parallel_for(
      "dsp::wire_unpack", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>(exec, 0, n),
      KOKKOS_LAMBDA(std::size_t e) {
        float v;
        if (w == Wire::fp8_e4m3)
          v = wire::from_fp8(sec[4 * nb + e], wire::fp8_inverse(load_f32(sec + 4 * (e / kFp8Block))));
        else v = get_wire(w, sec, e);
        dst[run_index(runs, e)] = ElemOps<K>::store(v);
      });
}
template <ElemKind K, class Exec>
void round_elements(const Exec& exec, Wire w, typename ElemOps<K>::T* dst, const typename ElemOps<K>::T* src,
                    const CopyTask& t) {
  using Op = ElemOps<K>;
  const Runs dr = t.dst, sr = t.src;
  const std::size_t n = t.elems;
  if (w != Wire::fp8_e4m3) {
    Kokkos::parallel_for(
        "dsp::wire_round", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>(exec, 0, n),
        KOKKOS_LAMBDA(std::size_t e) {
          dst[run_index(dr, e)] = Op::store(round_wire(w, Op::load(src[run_index(sr, e)])));
        });
    return;
  }
  const std::size_t nb = (n + kFp8Block - 1) / kFp8Block;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::parallel_for(
      "dsp::wire_round_fp8", fp8_teams(exec, nb), KOKKOS_LAMBDA(const Member& m) {
        const std::size_t b = std::size_t(m.league_rank());
        const std::size_t e0 = b * kFp8Block, e1 = e0 + kFp8Block < n ? e0 + kFp8Block : n;
        const wire::Fp8Scale k = wire::fp8_scale(team_amax<K>(m, src, sr, e0, e1));
        const double inverse = wire::fp8_inverse(k.amax);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, e0, e1), [&](std::size_t e) {
          dst[run_index(dr, e)] =
              Op::store(wire::from_fp8(wire::to_fp8(Op::load(src[run_index(sr, e)]), k.scale), inverse));
        });
      });
}

// ----------------------------------------------------- device group schedule
//
// DeviceKernels::tuned: a thread per group of kGroup consecutive elements, so
// that a group inside one run of aligned memory moves as 16-byte words (eight
// floats in, eight bf16 out in one store), the rest element by element; run
// indices by Divisor's multiply, not a 64-bit division. fp8 packs (and the own
// block's rounding) give a block of kFp8Block elements to 32 vector lanes,
// kFp8Block / 32 elements each, which reduce the block's largest value with
// the warp's shuffles and then encode it (the block is read twice: the
// second read comes from the cache).

/// Elements per thread of the group schedule.
inline constexpr std::size_t kGroup = 8;

/// A run pattern with Divisor's division by its run length.
struct RunDiv {
  std::size_t base = 0, stride = 0;
  Divisor len;
  static RunDiv make(const Runs& r, std::size_t n) {
    return RunDiv{r.base, r.stride, Divisor::make(r.len, n < (std::size_t(1) << 32))};
  }
  KOKKOS_INLINE_FUNCTION std::size_t index(std::size_t e) const {
    const std::size_t q = len.div(e);
    return base + q * stride + (e - q * len.d);
  }
  /// The index of element e0 when elements [e0, e0 + k) lie in one run, else ~0.
  KOKKOS_INLINE_FUNCTION std::size_t run_of(std::size_t e0, std::size_t k) const {
    const std::size_t q = len.div(e0), at = e0 - q * len.d;
    return at + k <= len.d ? base + q * stride + at : ~std::size_t(0);
  }
};

/// Whether p is a multiple of a bytes.
KOKKOS_INLINE_FUNCTION bool aligned_to(const void* p, std::size_t a) {
  return reinterpret_cast<std::uintptr_t>(p) % a == 0;
}
/// kGroup values of type U from aligned memory into a local array: on a GPU
/// in words of 16 bytes (or 8), its vector loads; on the host a plain loop
/// (GCC 12 at -O3 miscompiled a memcpy form of it: the third 16-byte word of
/// a group came out of a round unrounded).
template <class U>
KOKKOS_INLINE_FUNCTION void load_group(U (&x)[kGroup], const U* from) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  constexpr std::size_t B = kGroup * sizeof(U);
  using W = std::conditional_t<B % 16 == 0, Word16, Word8>;
  W w[B / sizeof(W)];
  for (std::size_t h = 0; h < B / sizeof(W); ++h) w[h] = reinterpret_cast<const W*>(from)[h];
  __builtin_memcpy(x, w, B);
#else
  for (std::size_t c = 0; c < kGroup; ++c) x[c] = from[c];
#endif
}
/// A local array of kGroup values to aligned memory, as load_group.
template <class U>
KOKKOS_INLINE_FUNCTION void store_group(U* to, const U (&x)[kGroup]) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  constexpr std::size_t B = kGroup * sizeof(U);
  using W = std::conditional_t<B % 16 == 0, Word16, Word8>;
  W w[B / sizeof(W)];
  __builtin_memcpy(w, x, B);
  for (std::size_t h = 0; h < B / sizeof(W); ++h) reinterpret_cast<W*>(to)[h] = w[h];
#else
  for (std::size_t c = 0; c < kGroup; ++c) to[c] = x[c];
#endif
}
/// The byte alignment load_group and store_group need for kGroup values of type U.
template <class U>
inline constexpr std::size_t group_align_v = kGroup * sizeof(U) % 16 == 0 ? 16 : 8;

/// Stores 4 bytes as one 4-byte word (to is 4-byte aligned).
KOKKOS_INLINE_FUNCTION void move_bytes4(unsigned char* to, const unsigned char* from) {
  std::uint32_t w;
  __builtin_memcpy(&w, from, 4);
  *reinterpret_cast<std::uint32_t*>(to) = w;
}

/// Bytes per element on a 2- or 4-byte wire.
KOKKOS_INLINE_FUNCTION std::size_t wire_width(Wire w) { return w == Wire::fp32 ? 4 : 2; }

/// Group g of a pack on a 2- or 4-byte wire.
template <ElemKind K>
KOKKOS_INLINE_FUNCTION void pack_group(Wire w, unsigned char* sec, const typename ElemOps<K>::T* src, const RunDiv& r,
                                       std::size_t n, std::size_t g) {
  using T = typename ElemOps<K>::T;
  const std::size_t e0 = g * kGroup;
  const std::size_t i0 = e0 + kGroup <= n ? r.run_of(e0, kGroup) : ~std::size_t(0);
  const std::size_t wb = wire_width(w);
  if (i0 != ~std::size_t(0) && aligned_to(src + i0, group_align_v<T>) && aligned_to(sec + e0 * wb, 16)) {
    T x[kGroup];
    load_group(x, src + i0);
    if (w == Wire::fp32) {
      float f[kGroup];
      for (std::size_t c = 0; c < kGroup; ++c) f[c] = ElemOps<K>::load(x[c]);
      store_group(reinterpret_cast<float*>(sec) + e0, f);
    } else {
      std::uint16_t h[kGroup];
      for (std::size_t c = 0; c < kGroup; ++c) {
        const float v = ElemOps<K>::load(x[c]);
        h[c] = w == Wire::bf16 ? wire::to_bf16(v) : wire::to_fp16(v);
      }
      store_group(reinterpret_cast<std::uint16_t*>(sec) + e0, h);
    }
    return;
  }
  for (std::size_t e = e0; e < e0 + kGroup && e < n; ++e) put_wire(w, sec, e, ElemOps<K>::load(src[r.index(e)]));
}

/// Group g of an unpack, any wire (fp8: a group lies in one block, kGroup divides kFp8Block).
template <ElemKind K>
KOKKOS_INLINE_FUNCTION void unpack_group(Wire w, typename ElemOps<K>::T* dst, const RunDiv& r, const unsigned char* sec,
                                         std::size_t n, std::size_t g) {
  using T = typename ElemOps<K>::T;
  static_assert(kFp8Block % kGroup == 0);
  const std::size_t e0 = g * kGroup, nb = (n + kFp8Block - 1) / kFp8Block;
  const bool fp8 = w == Wire::fp8_e4m3;
  const double inverse = fp8 ? wire::fp8_inverse(load_f32(sec + 4 * (e0 / kFp8Block))) : 1.0;
  const unsigned char* codes = sec + 4 * nb;
  auto value = [&](std::size_t e) { return fp8 ? wire::from_fp8(codes[e], inverse) : get_wire(w, sec, e); };
  const std::size_t i0 = e0 + kGroup <= n ? r.run_of(e0, kGroup) : ~std::size_t(0);
  if (i0 != ~std::size_t(0) && aligned_to(dst + i0, group_align_v<T>) &&
      aligned_to(fp8 ? codes + e0 : sec + e0 * wire_width(w), fp8 ? 8 : 16)) {
    T x[kGroup];
    if (fp8) {
      unsigned char c8[kGroup];
      load_group(c8, codes + e0);
      for (std::size_t c = 0; c < kGroup; ++c) x[c] = ElemOps<K>::store(wire::from_fp8(c8[c], inverse));
    } else if (w == Wire::fp32) {
      float f[kGroup];
      load_group(f, reinterpret_cast<const float*>(sec) + e0);
      for (std::size_t c = 0; c < kGroup; ++c) x[c] = ElemOps<K>::store(f[c]);
    } else {
      std::uint16_t h[kGroup];
      load_group(h, reinterpret_cast<const std::uint16_t*>(sec) + e0);
      for (std::size_t c = 0; c < kGroup; ++c)
        x[c] = ElemOps<K>::store(w == Wire::bf16 ? wire::from_bf16(h[c]) : wire::from_fp16(h[c]));
    }
    store_group(dst + i0, x);
    return;
  }
  for (std::size_t e = e0; e < e0 + kGroup && e < n; ++e) dst[r.index(e)] = ElemOps<K>::store(value(e));
}

/// Group g of the own block on a 2- or 4-byte wire: src along sr to dst along dr.
template <ElemKind K>
KOKKOS_INLINE_FUNCTION void round_group(Wire w, typename ElemOps<K>::T* dst, const RunDiv& dr,
                                        const typename ElemOps<K>::T* src, const RunDiv& sr, std::size_t n,
                                        std::size_t g) {
  using T = typename ElemOps<K>::T;
  using Op = ElemOps<K>;
  const std::size_t e0 = g * kGroup;
  const bool whole = e0 + kGroup <= n;
  const std::size_t di = whole ? dr.run_of(e0, kGroup) : ~std::size_t(0);
  const std::size_t si = whole ? sr.run_of(e0, kGroup) : ~std::size_t(0);
  if (di != ~std::size_t(0) && si != ~std::size_t(0) && aligned_to(dst + di, group_align_v<T>) &&
      aligned_to(src + si, group_align_v<T>)) {
    T x[kGroup];
    load_group(x, src + si);
    for (std::size_t c = 0; c < kGroup; ++c) x[c] = Op::store(round_wire(w, Op::load(x[c])));
    store_group(dst + di, x);
    return;
  }
  for (std::size_t e = e0; e < e0 + kGroup && e < n; ++e)
    dst[dr.index(e)] = Op::store(round_wire(w, Op::load(src[sr.index(e)])));
}

/// Launches body(g) for every group of n elements.
template <class Exec, class Body>
void for_groups(const Exec& exec, std::size_t n, const Body& body) {
  Kokkos::parallel_for("dsp::wire_groups",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>(exec, 0, (n + kGroup - 1) / kGroup),
                       body);
}

/// fp8 blocks per team and vector lanes per block: 8 and 32 on a device, 1 and 1 on the host.
template <class Exec>
Kokkos::TeamPolicy<Exec> fp8_lane_teams(const Exec& exec, std::size_t blocks, std::size_t& per_team) {
  if constexpr (Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible) {
    per_team = 1;
    return Kokkos::TeamPolicy<Exec>(exec, int(blocks), 1, 1);
  } else {
    per_team = 8;
    return Kokkos::TeamPolicy<Exec>(exec, int((blocks + 7) / 8), 8, 32);
  }
}
/// Elements per vector lane of an fp8 block.
inline constexpr std::size_t kFp8Lane = kFp8Block / 32;

/// The fp8 block of thread group (team member) m of fp8_lane_teams, and its
/// elements [e0, e1); false past the last block.
template <class Member>
KOKKOS_INLINE_FUNCTION bool fp8_lane_block(const Member& m, std::size_t per, std::size_t n, std::size_t& b,
                                           std::size_t& e0, std::size_t& e1) {
  b = std::size_t(m.league_rank()) * per + std::size_t(m.team_rank());
  e0 = b * kFp8Block;
  e1 = e0 + kFp8Block < n ? e0 + kFp8Block : n;
  return e0 < n;
}

/// The largest finite |x| of block [e0, e1) along r, reduced by the vector lanes of m.
template <ElemKind K, class Member>
KOKKOS_INLINE_FUNCTION float lanes_amax(const Member& m, const typename ElemOps<K>::T* src, const RunDiv& r,
                                        std::size_t e0, std::size_t e1) {
  float amax = 0;
  Kokkos::parallel_reduce(
      Kokkos::ThreadVectorRange(m, 32),
      [&](int l, float& a) {
    const std::size_t f = e0 + std::size_t(l) * kFp8Lane;  // the lane's first element
    const std::size_t i0 = f + kFp8Lane <= e1 ? r.run_of(f, kFp8Lane) : ~std::size_t(0);
    for (std::size_t c = 0; c < kFp8Lane; ++c) {
      const std::size_t e = f + c;
      if (e >= e1) break;
      const float x = ElemOps<K>::load(src[i0 != ~std::size_t(0) ? i0 + c : r.index(e)]);
      const float v = x < 0 ? -x : x;
      if (wire::finite(x) && v > a) a = v;
    }
      },
      Kokkos::Max<float>(amax));
  return amax;
}

template <ElemKind K, class Exec>
void pack_fp8_lanes(const Exec& exec, unsigned char* sec, const typename ElemOps<K>::T* src, Runs runs, std::size_t n) {
  const std::size_t nb = (n + kFp8Block - 1) / kFp8Block;
  const RunDiv r = RunDiv::make(runs, n);
  std::size_t per = 1;
  const auto policy = fp8_lane_teams(exec, nb, per);
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::parallel_for(
      "dsp::wire_pack_fp8_lanes", policy, KOKKOS_LAMBDA(const Member& m) {
        std::size_t b, e0, e1;
        if (!fp8_lane_block(m, per, n, b, e0, e1)) return;
        const wire::Fp8Scale s = wire::fp8_scale(lanes_amax<K>(m, src, r, e0, e1));
        Kokkos::single(Kokkos::PerThread(m), [&] { store_f32(sec + 4 * b, s.amax); });
        unsigned char* codes = sec + 4 * nb;
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(m, 32), [&](int l) {
          const std::size_t a = e0 + std::size_t(l) * kFp8Lane;
          if (a >= e1) return;
          const std::size_t i0 = a + kFp8Lane <= e1 ? r.run_of(a, kFp8Lane) : ~std::size_t(0);
          if (i0 != ~std::size_t(0) && aligned_to(codes + a, 4)) {
            unsigned char c4[kFp8Lane];
            for (std::size_t c = 0; c < kFp8Lane; ++c) c4[c] = wire::to_fp8(ElemOps<K>::load(src[i0 + c]), s.scale);
            move_bytes4(codes + a, c4);
            return;
          }
          for (std::size_t e = a; e < a + kFp8Lane && e < e1; ++e)
            codes[e] = wire::to_fp8(ElemOps<K>::load(src[r.index(e)]), s.scale);
        });
      });
}

template <ElemKind K, class Exec>
void round_fp8_lanes(const Exec& exec, typename ElemOps<K>::T* dst, const typename ElemOps<K>::T* src,
                     const CopyTask& t) {
  using Op = ElemOps<K>;
  const std::size_t n = t.elems, nb = (n + kFp8Block - 1) / kFp8Block;
  const RunDiv dr = RunDiv::make(t.dst, n), sr = RunDiv::make(t.src, n);
  std::size_t per = 1;
  const auto policy = fp8_lane_teams(exec, nb, per);
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::parallel_for(
      "dsp::wire_round_fp8_lanes", policy, KOKKOS_LAMBDA(const Member& m) {
        std::size_t b, e0, e1;
        if (!fp8_lane_block(m, per, n, b, e0, e1)) return;
        const wire::Fp8Scale k = wire::fp8_scale(lanes_amax<K>(m, src, sr, e0, e1));
        const double inverse = wire::fp8_inverse(k.amax);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(m, 32), [&](int l) {
          const std::size_t a = e0 + std::size_t(l) * kFp8Lane;
          for (std::size_t e = a; e < a + kFp8Lane && e < e1; ++e)
            dst[dr.index(e)] = Op::store(wire::from_fp8(wire::to_fp8(Op::load(src[sr.index(e)]), k.scale), inverse));
        });
      });
}

/// The block functors of the host schedule (named types, not lambdas: nvcc
/// calls an extended host-device lambda on the host through a wrapper whose
/// function pointer was null where for_blocks calls it inline, a crash in
/// CUDA builds on the host; found on the H200, 2026-11-27).
template <ElemKind K>
struct PackBlocks {
  Wire w;
  unsigned char* sec;
  std::size_t n;
  const typename ElemOps<K>::T* src;
  Runs runs;
  KOKKOS_INLINE_FUNCTION void operator()(std::size_t b) const { pack_block<K>(w, sec, n, src, runs, b); }
};
template <ElemKind K>
struct UnpackBlocks {
  Wire w;
  typename ElemOps<K>::T* dst;
  Runs runs;
  const unsigned char* sec;
  std::size_t n;
  KOKKOS_INLINE_FUNCTION void operator()(std::size_t b) const { unpack_block<K>(w, dst, runs, sec, n, b); }
};
template <ElemKind K>
struct RoundBlocks {
  Wire w;
  typename ElemOps<K>::T* dst;
  Runs dr;
  const typename ElemOps<K>::T* src;
  Runs sr;
  std::size_t n;
  KOKKOS_INLINE_FUNCTION void operator()(std::size_t b) const { round_block<K>(w, dst, dr, src, sr, n, b); }
};

/// A wire kernel's schedule: kBySpace picks by execution space and
/// DeviceKernels (hosts: the block loop; devices: groups under tuned, the
/// element schedule under segments, blocks under baseline); the others force
/// one on any execution space (the tests run them on the host).
inline constexpr int kBySpace = 0, kElements = 1, kGroups = 2;

template <class Exec>
int device_schedule() {
  if constexpr (Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible) return -1;
  else {
    switch (device_kernels()) {
      case DeviceKernels::tuned: return kGroups;
      case DeviceKernels::segments: return kElements;
      case DeviceKernels::baseline: break;
    }
    return -1;
  }
}

/// Packs n elements of kind K of `src` along `runs` into the wire section at `sec`.
template <ElemKind K, int Force = kBySpace, class Exec>
void wire_pack_as(const Exec& exec, Wire w, unsigned char* sec, const void* src_ptr, Runs runs, std::size_t n) {
  using T = typename ElemOps<K>::T;
  const T* src = static_cast<const T*>(src_ptr);
  if (n == 0) return;
  const int sched = Force != kBySpace ? Force : device_schedule<Exec>();
  if constexpr (Force != kBySpace || !is_host_exec_v<Exec>) {
    if (sched == kElements) return pack_elements<K>(exec, w, sec, src, runs, n);
    if (sched == kGroups) {
      if (w == Wire::fp8_e4m3) return pack_fp8_lanes<K>(exec, sec, src, runs, n);
      const RunDiv r = RunDiv::make(runs, n);
      return for_groups(
          exec, n, KOKKOS_LAMBDA(std::size_t g) { pack_group<K>(w, sec, src, r, n, g); });
    }
  }
  for_blocks(exec, n, PackBlocks<K>{w, sec, n, src, runs});
}

/// Unpacks the wire section at `sec` (n elements) into `dst` along `runs`.
template <ElemKind K, int Force = kBySpace, class Exec>
void wire_unpack_as(const Exec& exec, Wire w, void* dst_ptr, Runs runs, const unsigned char* sec, std::size_t n) {
  using T = typename ElemOps<K>::T;
  T* dst = static_cast<T*>(dst_ptr);
  if (n == 0) return;
  const int sched = Force != kBySpace ? Force : device_schedule<Exec>();
  if constexpr (Force != kBySpace || !is_host_exec_v<Exec>) {
    if (sched == kElements) return unpack_elements<K>(exec, w, dst, runs, sec, n);
    if (sched == kGroups) {
      const RunDiv r = RunDiv::make(runs, n);
      return for_groups(
          exec, n, KOKKOS_LAMBDA(std::size_t g) { unpack_group<K>(w, dst, r, sec, n, g); });
    }
  }
  for_blocks(exec, n, UnpackBlocks<K>{w, dst, runs, sec, n});
}

/// The own block: a copy task through the wire's rounding.
template <ElemKind K, int Force = kBySpace, class Exec>
void wire_round_as(const Exec& exec, Wire w, void* dst_ptr, const void* src_ptr, const CopyTask& t) {
  using T = typename ElemOps<K>::T;
  T* dst = static_cast<T*>(dst_ptr);
  const T* src = static_cast<const T*>(src_ptr);
  if (t.elems == 0) return;
  const std::size_t n = t.elems;
  const int sched = Force != kBySpace ? Force : device_schedule<Exec>();
  if constexpr (Force != kBySpace || !is_host_exec_v<Exec>) {
    if (sched == kElements) return round_elements<K>(exec, w, dst, src, t);
    if (sched == kGroups) {
      if (w == Wire::fp8_e4m3) return round_fp8_lanes<K>(exec, dst, src, t);
      const RunDiv dr = RunDiv::make(t.dst, n), sr = RunDiv::make(t.src, n);
      return for_groups(
          exec, n, KOKKOS_LAMBDA(std::size_t g) { round_group<K>(w, dst, dr, src, sr, n, g); });
    }
  }
  for_blocks(exec, n, RoundBlocks<K>{w, dst, t.dst, src, t.src, n});
}

/// The wire kernels of one element kind on one execution space, as the
/// typed front end hands them to the engine (PackedItem::wire): a file
/// compiles the kernels of the element types it moves, not all four.
template <class Exec>
struct WireKernels {
  void (*pack)(const Exec&, Wire, unsigned char*, const void*, Runs, std::size_t);
  void (*unpack)(const Exec&, Wire, void*, Runs, const unsigned char*, std::size_t);
  void (*round)(const Exec&, Wire, void*, const void*, const CopyTask&);
};
template <ElemKind K, class Exec>
inline constexpr WireKernels<Exec> wire_kernels_v{&wire_pack_as<K, kBySpace, Exec>, &wire_unpack_as<K, kBySpace, Exec>,
                                                  &wire_round_as<K, kBySpace, Exec>};
/// The kernels of an element type (nullptr for a type no wire carries).
template <class T, class Exec>
constexpr const void* wire_kernels_for() {
  constexpr ElemKind k = elem_kind_v<T>;
  if constexpr (k == ElemKind::other) return nullptr;
  else return &wire_kernels_v<k, Exec>;
}
/// The kernels a PackedItem carries (its typed front end's).
template <class Exec>
const WireKernels<Exec>& wire_kernels(const PackedItem& t) {
  return *static_cast<const WireKernels<Exec>*>(t.wire);
}

#if DSP_FUNC_BODIES
DSP_FUNC const void* host_wire_kernels(ElemKind k) {
  using E = Kokkos::HostSpace::execution_space;
  switch (k) {
    case ElemKind::f32: return &wire_kernels_v<ElemKind::f32, E>;
    case ElemKind::f64: return &wire_kernels_v<ElemKind::f64, E>;
    case ElemKind::bf16: return &wire_kernels_v<ElemKind::bf16, E>;
    case ElemKind::f16: return &wire_kernels_v<ElemKind::f16, E>;
    case ElemKind::other: break;
  }
  return nullptr;
}
#endif

/// By element kind, for tests and tools (the engine goes through
/// PackedItem::wire): every kind's kernels compiled. `Force`: kElements or
/// kGroups runs that device schedule on any execution space.
#define DSP_WIRE_DISPATCH(kind, call)                 \
  switch (kind) {                                     \
    case ElemKind::f64: return call(ElemKind::f64);   \
    case ElemKind::bf16: return call(ElemKind::bf16); \
    case ElemKind::f16: return call(ElemKind::f16);   \
    default: return call(ElemKind::f32);              \
  }
template <int Force = kBySpace, class Exec>
void wire_pack(const Exec& exec, Wire w, ElemKind kind, unsigned char* sec, const void* src, Runs runs, std::size_t n) {
#define DSP_CALL(K) wire_pack_as<K, Force>(exec, w, sec, src, runs, n)
  DSP_WIRE_DISPATCH(kind, DSP_CALL)
#undef DSP_CALL
}
template <int Force = kBySpace, class Exec>
void wire_unpack(const Exec& exec, Wire w, ElemKind kind, void* dst, Runs runs, const unsigned char* sec,
                 std::size_t n) {
#define DSP_CALL(K) wire_unpack_as<K, Force>(exec, w, dst, runs, sec, n)
  DSP_WIRE_DISPATCH(kind, DSP_CALL)
#undef DSP_CALL
}
template <int Force = kBySpace, class Exec>
void wire_round(const Exec& exec, Wire w, ElemKind kind, void* dst, const void* src, const CopyTask& t) {
#define DSP_CALL(K) wire_round_as<K, Force>(exec, w, dst, src, t)
  DSP_WIRE_DISPATCH(kind, DSP_CALL)
#undef DSP_CALL
}
#undef DSP_WIRE_DISPATCH

}  // namespace dsp::detail
