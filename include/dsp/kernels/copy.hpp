// dsp: the one copy kernel every primitive reduces to.
//
// A block of a LayoutRight tensor restricted along one dim is a sequence of
// equal contiguous runs at a fixed stride ("outer" runs of count * inner
// elements). Packing, unpacking, split's slice, gather's placement and the
// switch's self chunk are all copies from one such run pattern to another, in
// the same element order, so one kernel serves them all.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace dsp::detail {

/// Run r covers elements [base + r * stride, base + r * stride + len).
struct Runs {
  std::size_t base = 0;
  std::size_t stride = 0;
  std::size_t len = 0;
};

/// Copy `elems` elements from src runs to dst runs, in run order. The shorter
/// run length divides the longer one (true for every block of a LayoutRight
/// tensor restricted along one dim, and for contiguous buffers).
struct CopyTask {
  Runs dst;
  Runs src;
  std::size_t elems = 0;
};

/// A contiguous range of `n` elements from `base`, as runs.
inline Runs contiguous(std::size_t base, std::size_t n) { return Runs{base, n, n}; }

template <class Exec>
inline constexpr bool is_host_exec_v = Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible;

template <class Word, class Exec>
void copy_task_device(const Exec& exec, unsigned char* dst, const unsigned char* src,
                      std::size_t elem_bytes, const CopyTask& t) {
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
      Kokkos::parallel_for(
          "dsp::copy_runs", Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::size_t>>(exec, 0, n),
          [=](std::size_t k) {
            std::memcpy(dst + (d.base + (k / md) * d.stride + (k % md) * piece) * elem_bytes,
                        src + (s.base + (k / ms) * s.stride + (k % ms) * piece) * elem_bytes, pb);
          });
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
