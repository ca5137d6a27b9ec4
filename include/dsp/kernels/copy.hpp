// SPDX-License-Identifier: BSD-3-Clause
// dsp: the one copy kernel every primitive reduces to: copies between run
// patterns (plan/runs.hpp), on the tensor's execution space.
#pragma once

#include <dsp/plan/runs.hpp>

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace dsp::detail {

template <class Exec>
inline constexpr bool is_host_exec_v = Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible;

template <class Word, class Exec>
void copy_task_device(const Exec& exec, unsigned char* dst, const unsigned char* src, std::size_t elem_bytes,
                      const CopyTask& t) {
  const std::size_t w = elem_bytes / sizeof(Word);  // words per element
  const std::size_t piece = (t.dst.len < t.src.len ? t.dst.len : t.src.len) * w;
  const std::size_t md = t.dst.len * w / piece, ms = t.src.len * w / piece;
  const Runs d{t.dst.base * w, t.dst.stride * w, t.dst.len * w};
  const Runs s{t.src.base * w, t.src.stride * w, t.src.len * w};
  Word* out = reinterpret_cast<Word*>(dst);
  const Word* in = reinterpret_cast<const Word*>(src);
  Kokkos::parallel_for(
      "dsp::copy_runs", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>(exec, 0, t.elems * w),
      KOKKOS_LAMBDA(std::size_t e) {
        const std::size_t k = e / piece, o = e % piece;
        out[d.base + (k / md) * d.stride + (k % md) * piece + o] =
            in[s.base + (k / ms) * s.stride + (k % ms) * piece + o];
      });
}

/// Host tasks of at least this many bytes are written with streaming
/// (non-temporal) stores: the destination is not read into the cache first,
/// which saves a third of the memory traffic of a copy much larger than the
/// cache. glibc's memcpy does this only for single copies of several MiB, not
/// for the short runs a pack or unpack is made of.
inline std::size_t& stream_threshold() {
  static std::size_t bytes = std::size_t(4) << 20;
  return bytes;
}

/// Host tasks of at most this many bytes are copied by the calling thread, not
/// through a Kokkos kernel (whose launch and profiling hooks cost more).
inline constexpr std::size_t kInlineCopyBytes = std::size_t(64) << 10;

/// memcpy with streaming stores where the CPU has them (SSE2), memcpy elsewhere.
/// Callers end a sequence of these with stream_fence().
inline void stream_copy(unsigned char* dst, const unsigned char* src, std::size_t bytes) {
#if defined(__SSE2__)
  const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16;
  if (bytes < head + 64) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  const std::size_t body = bytes / 64 * 64;
  for (std::size_t k = 0; k < body; k += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 48), d);
  }
  std::memcpy(dst + body, src + body, bytes - body);
#else
  std::memcpy(dst, src, bytes);
#endif
}

/// Orders streaming stores before what follows (a no-op without SSE2).
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

/// Runs every task on `exec`; does not fence.
template <class Exec>
void copy_runs(const Exec& exec, void* dst_ptr, const void* src_ptr, std::size_t elem_bytes,
               std::span<const CopyTask> tasks) {
  auto* dst = static_cast<unsigned char*>(dst_ptr);
  const auto* src = static_cast<const unsigned char*>(src_ptr);
  for (const CopyTask& t : tasks) {
    if (t.elems == 0) continue;
    if constexpr (is_host_exec_v<Exec>) {
      const std::size_t piece = t.dst.len < t.src.len ? t.dst.len : t.src.len;
      const std::size_t n = t.elems / piece, md = t.dst.len / piece, ms = t.src.len / piece;
      const std::size_t pb = piece * elem_bytes;
      const Runs d = t.dst, s = t.src;
      auto at = [=](std::size_t k, auto&& copy) {
        copy(dst + (d.base + (k / md) * d.stride + (k % md) * piece) * elem_bytes,
             src + (s.base + (k / ms) * s.stride + (k % ms) * piece) * elem_bytes, pb);
      };
      using Policy = Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>;
      if (t.elems * elem_bytes <= kInlineCopyBytes) {  // small: a kernel launch would cost more than the copy
        // Walk both run patterns incrementally (no divisions per piece).
        std::size_t dk = 0, dm = 0, sk = 0, sm = 0;
        for (std::size_t k = 0; k < n; ++k) {
          std::memcpy(dst + (d.base + dk * d.stride + dm * piece) * elem_bytes,
                      src + (s.base + sk * s.stride + sm * piece) * elem_bytes, pb);
          if (++dm == md) dm = 0, ++dk;
          if (++sm == ms) sm = 0, ++sk;
        }
      } else if (t.elems * elem_bytes >= stream_threshold()) {
        Kokkos::parallel_for("dsp::copy_runs", Policy(exec, 0, n), [=](std::size_t k) {
          at(k, [](unsigned char* o, const unsigned char* i, std::size_t b) {
            stream_copy(o, i, b);
            stream_fence();  // on the thread that stored: orders its streaming stores before the kernel ends
          });
        });
      } else {
        Kokkos::parallel_for("dsp::copy_runs", Policy(exec, 0, n), [=](std::size_t k) {
          at(k, [](unsigned char* o, const unsigned char* i, std::size_t b) { std::memcpy(o, i, b); });
        });
      }
    } else {
      // Widest word that divides the element and keeps both buffers aligned.
      const auto a = reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src);
      if (elem_bytes % 8 == 0 && a % 8 == 0) copy_task_device<std::uint64_t>(exec, dst, src, elem_bytes, t);
      else if (elem_bytes % 4 == 0 && a % 4 == 0) copy_task_device<std::uint32_t>(exec, dst, src, elem_bytes, t);
      else if (elem_bytes % 2 == 0 && a % 2 == 0) copy_task_device<std::uint16_t>(exec, dst, src, elem_bytes, t);
      else copy_task_device<std::uint8_t>(exec, dst, src, elem_bytes, t);
    }
  }
}

}  // namespace dsp::detail
