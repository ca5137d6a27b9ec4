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

// The device's conversion instructions (CUDA: cvt.rn.bf16.f32 from sm_80,
// cvt.rn.f16.f32, cvt.rn.satfinite.e4m3x2.f32 from sm_89) round as wire::'s
// software conversions do (to nearest even; fp16 to +-inf past 65520, e4m3
// saturating at +-448) but give a canonical NaN for a NaN: dsp keeps its own
// NaN (one select). `hw` false (DeviceTuning::hardware_convert), host code, or
// a device without the instruction: the software conversion. test_nccl
// (tests/device_wire.hpp) compares both on the device over every 257th float
// bit pattern and the boundaries of each format.
KOKKOS_INLINE_FUNCTION std::uint16_t cvt_bf16(float f, [[maybe_unused]] bool hw) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (hw) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    const std::uint32_t u = wire::bits(f);
    return (u & 0x7fffffffu) > 0x7f800000u ? static_cast<std::uint16_t>((u >> 16) | 0x40u) : h;
  }
#endif
  return wire::to_bf16(f);
}
KOKKOS_INLINE_FUNCTION std::uint16_t cvt_fp16(float f, [[maybe_unused]] bool hw) {
#if defined(__CUDA_ARCH__)
  if (hw) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    const std::uint32_t u = wire::bits(f);
    return (u & 0x7fffffffu) > 0x7f800000u ? static_cast<std::uint16_t>(((u >> 16) & 0x8000u) | 0x7e00u) : h;
  }
#endif
  return wire::to_fp16(f);
}
/// The e4m3 codes of two finite values, a in the low byte and b in the high
/// one (as they lie in memory).
KOKKOS_INLINE_FUNCTION std::uint16_t cvt_e4m3x2(float a, float b, [[maybe_unused]] bool hw) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if (hw) {
    unsigned short h;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(b), "f"(a));  // the first source goes high
    return h;
  }
#endif
  return static_cast<std::uint16_t>(wire::to_e4m3(a) | (std::uint32_t(wire::to_e4m3(b)) << 8));
}
/// wire::to_fp8 of two values, as cvt_e4m3x2 lays them out.
KOKKOS_INLINE_FUNCTION std::uint16_t fp8_pair(float a, float b, double scale, bool hw) {
  const bool fa = wire::finite(a), fb = wire::finite(b);
  const std::uint16_t c = cvt_e4m3x2(fa ? float(double(a) * scale) : 0.0f, fb ? float(double(b) * scale) : 0.0f, hw);
  return static_cast<std::uint16_t>((fa ? c & 0xffu : 0x7fu) | (fb ? c & 0xff00u : 0x7f00u));
}
/// put_wire and round_wire through cvt_bf16 and cvt_fp16.
KOKKOS_INLINE_FUNCTION std::uint16_t cvt_half(Wire w, float v, bool hw) {
  return w == Wire::bf16 ? cvt_bf16(v, hw) : cvt_fp16(v, hw);
}
KOKKOS_INLINE_FUNCTION float round_wire(Wire w, float v, bool hw) {
  if (w == Wire::fp32) return v;
  return w == Wire::bf16 ? wire::from_bf16(cvt_bf16(v, hw)) : wire::from_fp16(cvt_fp16(v, hw));
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
/// The widest word (16, 8 or 4 bytes, else U itself) that N values of type U
/// are a whole number of, and the alignment load_group and store_group need.
template <class U, std::size_t N>
using GroupWord = std::conditional_t<
    N * sizeof(U) % 16 == 0, Word16,
    std::conditional_t<N * sizeof(U) % 8 == 0, Word8, std::conditional_t<N * sizeof(U) % 4 == 0, std::uint32_t, U>>>;
template <class U, std::size_t N = kGroup>
inline constexpr std::size_t group_align_v = alignof(GroupWord<U, N>);

/// N values of type U (kGroup, or a lane's share of an fp8 block) from
/// aligned memory into a local array: on a GPU in words of GroupWord, its
/// vector loads; on the host a plain loop (GCC 12 at -O3 miscompiled a
/// memcpy form of it: the third 16-byte word of a group came out of a round
/// unrounded).
template <class U, std::size_t N>
KOKKOS_INLINE_FUNCTION void load_group(U (&x)[N], const U* from) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  using W = GroupWord<U, N>;
  constexpr std::size_t B = N * sizeof(U);
  W w[B / sizeof(W)];
  for (std::size_t h = 0; h < B / sizeof(W); ++h) w[h] = reinterpret_cast<const W*>(from)[h];
  __builtin_memcpy(x, w, B);
#else
  for (std::size_t c = 0; c < N; ++c) x[c] = from[c];
#endif
}
/// A local array of N values to aligned memory, as load_group.
template <class U, std::size_t N>
KOKKOS_INLINE_FUNCTION void store_group(U* to, const U (&x)[N]) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  using W = GroupWord<U, N>;
  constexpr std::size_t B = N * sizeof(U);
  W w[B / sizeof(W)];
  __builtin_memcpy(w, x, B);
  for (std::size_t h = 0; h < B / sizeof(W); ++h) reinterpret_cast<W*>(to)[h] = w[h];
#else
  for (std::size_t c = 0; c < N; ++c) to[c] = x[c];
#endif
}

/// Bytes per element on a 2- or 4-byte wire.
KOKKOS_INLINE_FUNCTION std::size_t wire_width(Wire w) { return w == Wire::fp32 ? 4 : 2; }

/// Groups per thread of the group schedule, at most (DeviceTuning::groups
/// picks 1 to kGroupsMax, a compile-time count C): thread t takes groups t,
/// t + T, ..., t + (C - 1) T (T threads), loads all of its groups' aligned
/// words before it stores any, so that each thread has several 16-byte loads
/// in flight. (A run-time count over arrays of kGroupsMax cost a quarter of
/// the bf16 pack's rate at one group per thread: H200, 2026-11-27.)
inline constexpr std::size_t kGroupsMax = 4;

/// Where group g's elements lie in src when it can move as words: its index,
/// else ~0 (past the end, across runs, or unaligned).
template <class T>
KOKKOS_INLINE_FUNCTION std::size_t group_at(const T* p, const RunDiv& r, std::size_t n, std::size_t g) {
  const std::size_t e0 = g * kGroup;
  if (e0 + kGroup > n) return ~std::size_t(0);
  const std::size_t i = r.run_of(e0, kGroup);
  return i != ~std::size_t(0) && aligned_to(p + i, group_align_v<T>) ? i : ~std::size_t(0);
}

/// Groups g0, g0 + step, ... (C of them, those below `groups`) of a pack on a
/// 2- or 4-byte wire.
template <ElemKind K, std::size_t C>
KOKKOS_INLINE_FUNCTION void pack_groups(Wire w, unsigned char* sec, const typename ElemOps<K>::T* src, const RunDiv& r,
                                        std::size_t n, std::size_t groups, std::size_t g0, std::size_t step, bool hw) {
  using T = typename ElemOps<K>::T;
  const std::size_t wb = wire_width(w);
  T x[C][kGroup]{};  // initialized: GCC cannot see that the stores read only what the loads wrote
  std::size_t at[C];
  DSP_DEVICE_UNROLL
  for (std::size_t u = 0; u < C; ++u) {
    const std::size_t g = g0 + u * step;
    at[u] = g < groups && aligned_to(sec + g * kGroup * wb, 16) ? group_at(src, r, n, g) : ~std::size_t(0);
    if (at[u] != ~std::size_t(0)) load_group(x[u], src + at[u]);
  }
  DSP_DEVICE_UNROLL
  for (std::size_t u = 0; u < C; ++u) {
    const std::size_t g = g0 + u * step, e0 = g * kGroup;
    if (g >= groups) continue;
    if (at[u] == ~std::size_t(0)) {
      for (std::size_t e = e0; e < e0 + kGroup && e < n; ++e) put_wire(w, sec, e, ElemOps<K>::load(src[r.index(e)]));
    } else if (w == Wire::fp32) {
      float f[kGroup];
      for (std::size_t c = 0; c < kGroup; ++c) f[c] = ElemOps<K>::load(x[u][c]);
      store_group(reinterpret_cast<float*>(sec) + e0, f);
    } else {
      std::uint16_t h[kGroup];
      for (std::size_t c = 0; c < kGroup; ++c) h[c] = cvt_half(w, ElemOps<K>::load(x[u][c]), hw);
      store_group(reinterpret_cast<std::uint16_t*>(sec) + e0, h);
    }
  }
}

/// Groups of an unpack, any wire, as pack_groups (fp8: a group lies in one
/// block, kGroup divides kFp8Block).
template <ElemKind K, std::size_t C>
KOKKOS_INLINE_FUNCTION void unpack_groups(Wire w, typename ElemOps<K>::T* dst, const RunDiv& r,
                                          const unsigned char* sec, std::size_t n, std::size_t groups, std::size_t g0,
                                          std::size_t step) {
  using T = typename ElemOps<K>::T;
  static_assert(kFp8Block % kGroup == 0);
  const std::size_t nb = (n + kFp8Block - 1) / kFp8Block;
  const bool fp8 = w == Wire::fp8_e4m3;
  const unsigned char* codes = sec + 4 * nb;
  // The wire's words of each group: 8 codes (8 bytes), 8 halves (16) or 8 floats (2 x 16).
  std::uint16_t h[C][kGroup]{};  // initialized: as pack_groups' x
  float f[C][kGroup]{};
  unsigned char c8[C][kGroup]{};
  std::size_t at[C];
  DSP_DEVICE_UNROLL
  for (std::size_t u = 0; u < C; ++u) {
    const std::size_t g = g0 + u * step, e0 = g * kGroup;
    const bool in = g < groups && aligned_to(fp8 ? codes + e0 : sec + e0 * wire_width(w), fp8 ? 8 : 16);
    at[u] = in ? group_at(dst, r, n, g) : ~std::size_t(0);
    if (at[u] == ~std::size_t(0)) continue;
    if (fp8) load_group(c8[u], codes + e0);
    else if (w == Wire::fp32) load_group(f[u], reinterpret_cast<const float*>(sec) + e0);
    else load_group(h[u], reinterpret_cast<const std::uint16_t*>(sec) + e0);
  }
  DSP_DEVICE_UNROLL
  for (std::size_t u = 0; u < C; ++u) {
    const std::size_t g = g0 + u * step, e0 = g * kGroup;
    if (g >= groups) continue;
    const double inverse = fp8 ? wire::fp8_inverse(load_f32(sec + 4 * (e0 / kFp8Block))) : 1.0;
    if (at[u] == ~std::size_t(0)) {
      for (std::size_t e = e0; e < e0 + kGroup && e < n; ++e)
        dst[r.index(e)] = ElemOps<K>::store(fp8 ? wire::from_fp8(codes[e], inverse) : get_wire(w, sec, e));
      continue;
    }
    T x[kGroup];
    for (std::size_t c = 0; c < kGroup; ++c) {
      const float v = fp8               ? wire::from_fp8(c8[u][c], inverse)
                      : w == Wire::fp32 ? f[u][c]
                      : w == Wire::bf16 ? wire::from_bf16(h[u][c])
                                        : wire::from_fp16(h[u][c]);
      x[c] = ElemOps<K>::store(v);
    }
    store_group(dst + at[u], x);
  }
}

/// Groups of the own block on a 2- or 4-byte wire, src along sr to dst along
/// dr, as pack_groups.
template <ElemKind K, std::size_t C>
KOKKOS_INLINE_FUNCTION void round_groups(Wire w, typename ElemOps<K>::T* dst, const RunDiv& dr,
                                         const typename ElemOps<K>::T* src, const RunDiv& sr, std::size_t n,
                                         std::size_t groups, std::size_t g0, std::size_t step, bool hw) {
  using T = typename ElemOps<K>::T;
  using Op = ElemOps<K>;
  T x[C][kGroup]{};  // initialized: GCC cannot see that the stores read only what the loads wrote
  std::size_t at[C], to[C];
  DSP_DEVICE_UNROLL
  for (std::size_t u = 0; u < C; ++u) {
    const std::size_t g = g0 + u * step;
    to[u] = g < groups ? group_at(static_cast<const T*>(dst), dr, n, g) : ~std::size_t(0);
    at[u] = to[u] != ~std::size_t(0) ? group_at(src, sr, n, g) : ~std::size_t(0);
    if (at[u] != ~std::size_t(0)) load_group(x[u], src + at[u]);
  }
  DSP_DEVICE_UNROLL
  for (std::size_t u = 0; u < C; ++u) {
    const std::size_t g = g0 + u * step, e0 = g * kGroup;
    if (g >= groups) continue;
    if (at[u] == ~std::size_t(0)) {
      for (std::size_t e = e0; e < e0 + kGroup && e < n; ++e)
        dst[dr.index(e)] = Op::store(round_wire(w, Op::load(src[sr.index(e)]), hw));
      continue;
    }
    for (std::size_t c = 0; c < kGroup; ++c) x[u][c] = Op::store(round_wire(w, Op::load(x[u][c]), hw));
    store_group(dst + to[u], x[u]);
  }
}

/// The group kernels' bodies: named functors, not lambdas (as the block
/// functors below: nvcc's extended lambdas must not be called inside another
/// function on the host). run<C>: C groups per thread.
template <ElemKind K>
struct PackGroups {
  Wire w;
  unsigned char* sec;
  const typename ElemOps<K>::T* src;
  RunDiv r;
  std::size_t n;
  bool hw;
  template <std::size_t C>
  KOKKOS_INLINE_FUNCTION void run(std::size_t groups, std::size_t g0, std::size_t step) const {
    pack_groups<K, C>(w, sec, src, r, n, groups, g0, step, hw);
  }
};
template <ElemKind K>
struct UnpackGroups {
  Wire w;
  typename ElemOps<K>::T* dst;
  RunDiv r;
  const unsigned char* sec;
  std::size_t n;
  template <std::size_t C>
  KOKKOS_INLINE_FUNCTION void run(std::size_t groups, std::size_t g0, std::size_t step) const {
    unpack_groups<K, C>(w, dst, r, sec, n, groups, g0, step);
  }
};
template <ElemKind K>
struct RoundGroups {
  Wire w;
  typename ElemOps<K>::T* dst;
  RunDiv dr;
  const typename ElemOps<K>::T* src;
  RunDiv sr;
  std::size_t n;
  bool hw;
  template <std::size_t C>
  KOKKOS_INLINE_FUNCTION void run(std::size_t groups, std::size_t g0, std::size_t step) const {
    round_groups<K, C>(w, dst, dr, src, sr, n, groups, g0, step, hw);
  }
};

/// One launch of body.run<C>(groups, t, threads) for each of `threads`
/// threads t, C groups each.
template <std::size_t C, class Exec, class Body>
void launch_groups(const Exec& exec, std::size_t groups, const Body& body) {
  const std::size_t threads = (groups + C - 1) / C;
  Kokkos::parallel_for(
      "dsp::wire_groups", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>(exec, 0, threads),
      KOKKOS_LAMBDA(std::size_t t) { body.template run<C>(groups, t, threads); });
}

/// Launches `body` over the groups of n elements, DeviceTuning::groups per
/// thread.
template <class Exec, class Body>
void for_groups(const Exec& exec, std::size_t n, const Body& body) {
  const std::size_t groups = (n + kGroup - 1) / kGroup;
  switch (device_tuning().groups) {
    case 2: return launch_groups<2>(exec, groups, body);
    case 3: return launch_groups<3>(exec, groups, body);
    case 4: return launch_groups<4>(exec, groups, body);
    default: return launch_groups<1>(exec, groups, body);
  }
}

/// Threads per fp8 block of the fp8 lane kernels: a warp (32 lanes, each
/// kFp8Block / 32 consecutive elements in registers, the block's largest
/// value by warp shuffles) on CUDA devices; one thread per block elsewhere
/// (the host, where the tests run this schedule, and other devices).
template <class Exec>
inline constexpr std::size_t fp8_lanes_v =
#if defined(KOKKOS_ENABLE_CUDA)
    std::is_same_v<Exec, Kokkos::Cuda> ? 32 :
#endif
                                       1;

/// The largest of the L lanes' values (consecutive threads of a warp).
template <std::size_t L>
KOKKOS_INLINE_FUNCTION float lanes_max(float a) {
  if constexpr (L > 1) {
#if defined(__CUDA_ARCH__)
    for (unsigned k = L / 2; k > 0; k /= 2) {
      const float o = __shfl_xor_sync(0xffffffffu, a, k, int(L));
      a = o > a ? o : a;
    }
#endif
  }
  return a;
}

/// Lane `i` of the fp8 lane kernels: block b = i / L, its elements [e0, e0 +
/// count) of n, loaded along r into x (zeros past count); returns the
/// block's largest finite |x| over all its lanes. Every lane of a warp calls
/// it (the shuffles), lanes past the end with count 0.
template <ElemKind K, std::size_t L, std::size_t E>
KOKKOS_INLINE_FUNCTION float fp8_lane_load(float (&x)[E], const typename ElemOps<K>::T* src, const RunDiv& r,
                                           std::size_t n, std::size_t i, std::size_t& e0, std::size_t& count) {
  using T = typename ElemOps<K>::T;
#if defined(__CUDA_ARCH__)
  // The shuffles need each warp to be L consecutive indices: Kokkos' CUDA
  // RangePolicy launches blocks of (1, multiple of 32) threads, index =
  // threadIdx.y + blockDim.y * blockIdx.x. Stop rather than mix blocks.
  if constexpr (L > 1)
    if (blockDim.x != 1 || blockDim.y % L != 0)
      Kokkos::abort("dsp: the fp8 lane kernel needs blocks of whole warps (Kokkos' CUDA RangePolicy layout)");
#endif
  const std::size_t b = i / L, end = (b + 1) * kFp8Block < n ? (b + 1) * kFp8Block : n;
  e0 = b * kFp8Block + (i % L) * E;
  count = e0 < end ? (end - e0 < E ? end - e0 : E) : 0;
  const std::size_t i0 = count == E ? r.run_of(e0, E) : ~std::size_t(0);
  if (i0 != ~std::size_t(0) && aligned_to(src + i0, group_align_v<T, E>)) {
    T v[E];
    load_group(v, src + i0);
    for (std::size_t c = 0; c < E; ++c) x[c] = ElemOps<K>::load(v[c]);
  } else {
    for (std::size_t c = 0; c < E; ++c) x[c] = c < count ? ElemOps<K>::load(src[r.index(e0 + c)]) : 0.0f;
  }
  float a = 0;
  for (std::size_t c = 0; c < E; ++c) {
    const float v = x[c] < 0 ? -x[c] : x[c];
    a = wire::finite(x[c]) && v > a ? v : a;
  }
  return lanes_max<L>(a);
}

/// The fp8 pack (DeviceKernels::tuned): each lane loads its elements once,
/// the block's scale comes from the lanes' shuffles, each lane encodes from
/// its registers (pairs by cvt_e4m3x2) and stores its codes as one word.
template <ElemKind K, class Exec>
void pack_fp8_lanes(const Exec& exec, unsigned char* sec, const typename ElemOps<K>::T* src, Runs runs, std::size_t n) {
  constexpr std::size_t L = fp8_lanes_v<Exec>, E = kFp8Block / L;
  static_assert(E % 2 == 0 && kFp8Block % L == 0);
  const std::size_t nb = (n + kFp8Block - 1) / kFp8Block;
  const RunDiv r = RunDiv::make(runs, n);
  const bool hw = device_tuning().hardware_convert;
  Kokkos::parallel_for(
      "dsp::wire_pack_fp8_lanes", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>(exec, 0, nb * L),
      KOKKOS_LAMBDA(std::size_t i) {
        float x[E];
        std::size_t e0, count;
        const wire::Fp8Scale s = wire::fp8_scale(fp8_lane_load<K, L, E>(x, src, r, n, i, e0, count));
        if (i % L == 0) store_f32(sec + 4 * (i / L), s.amax);
        unsigned char* codes = sec + 4 * nb;
        unsigned char c8[E];
        for (std::size_t c = 0; c < E; c += 2) {
          const std::uint16_t p = fp8_pair(x[c], x[c + 1], s.scale, hw);
          c8[c] = static_cast<unsigned char>(p & 0xffu), c8[c + 1] = static_cast<unsigned char>(p >> 8);
        }
        if (count == E && aligned_to(codes + e0, group_align_v<unsigned char, E>)) {
          store_group(codes + e0, c8);
        } else {
          for (std::size_t c = 0; c < count; ++c) codes[e0 + c] = c8[c];
        }
      });
}

/// The own block on the fp8 wire, as pack_fp8_lanes: each lane decodes its
/// codes and stores them along the destination's runs.
template <ElemKind K, class Exec>
void round_fp8_lanes(const Exec& exec, typename ElemOps<K>::T* dst, const typename ElemOps<K>::T* src,
                     const CopyTask& t) {
  using T = typename ElemOps<K>::T;
  using Op = ElemOps<K>;
  constexpr std::size_t L = fp8_lanes_v<Exec>, E = kFp8Block / L;
  const std::size_t n = t.elems, nb = (n + kFp8Block - 1) / kFp8Block;
  const RunDiv dr = RunDiv::make(t.dst, n), sr = RunDiv::make(t.src, n);
  const bool hw = device_tuning().hardware_convert;
  Kokkos::parallel_for(
      "dsp::wire_round_fp8_lanes", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>(exec, 0, nb * L),
      KOKKOS_LAMBDA(std::size_t i) {
        float x[E];
        std::size_t e0, count;
        const wire::Fp8Scale k = wire::fp8_scale(fp8_lane_load<K, L, E>(x, src, sr, n, i, e0, count));
        const double inverse = wire::fp8_inverse(k.amax);
        T y[E];
        for (std::size_t c = 0; c < E; c += 2) {
          const std::uint16_t p = fp8_pair(x[c], x[c + 1], k.scale, hw);
          y[c] = Op::store(wire::from_fp8(static_cast<std::uint8_t>(p & 0xffu), inverse));
          y[c + 1] = Op::store(wire::from_fp8(static_cast<std::uint8_t>(p >> 8), inverse));
        }
        const std::size_t d0 = count == E ? dr.run_of(e0, E) : ~std::size_t(0);
        if (d0 != ~std::size_t(0) && aligned_to(dst + d0, group_align_v<T, E>)) {
          store_group(dst + d0, y);
        } else {
          for (std::size_t c = 0; c < count; ++c) dst[dr.index(e0 + c)] = y[c];
        }
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
      return for_groups(exec, n,
                        PackGroups<K>{w, sec, src, RunDiv::make(runs, n), n, device_tuning().hardware_convert});
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
      return for_groups(exec, n, UnpackGroups<K>{w, dst, RunDiv::make(runs, n), sec, n});
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
      return for_groups(exec, n,
                        RoundGroups<K>{w, dst, RunDiv::make(t.dst, n), src, RunDiv::make(t.src, n), n,
                                       device_tuning().hardware_convert});
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
