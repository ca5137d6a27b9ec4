// SPDX-License-Identifier: BSD-3-Clause
// The wire kernels on a CUDA device (included by test_nccl.cpp in CUDA
// builds): the device's conversion instructions give the software's bits,
// and the device schedule (DeviceKernels::tuned: groups, fp8 lanes) writes
// the bytes the host's block loop writes, for every kind, wire and layout.
#pragma once

#include <dsp/kernels/convert.hpp>

#include "wire_cases.hpp"

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace dsp_test {

/// Float bit patterns where the formats' rounding changes: +-0, the
/// smallest subnormal, 2^-149 to 2^-126, fp16's 2^-24, 2^-14 and 65504/65520,
/// e4m3's 2^-9, 2^-6 and 448/464, bf16's largest, infinities, NaNs; each
/// with its neighbours one and two ulps away, both signs: pattern k of
/// kBoundaryPatterns, computed where it is used (no table in memory).
inline constexpr std::uint64_t kBoundaryPatterns = 18 * 2 * 5;
KOKKOS_INLINE_FUNCTION std::uint32_t boundary_pattern(std::uint64_t k) {
  constexpr std::uint32_t base[18] = {0x00000000u, 0x00000001u, 0x00800000u, 0x33800000u, 0x38800000u, 0x477fe000u,
                                      0x477ff000u, 0x47800000u, 0x3b000000u, 0x3c800000u, 0x43e00000u, 0x43e80000u,
                                      0x7f7f8000u, 0x7f7fffffu, 0x7f800000u, 0x7fc00000u, 0x7f800001u, 0x3f800000u};
  const std::uint32_t sign = (k / 5) % 2 ? 0x80000000u : 0u;
  return (base[k / 10] + std::uint32_t(int(k % 5) - 2)) ^ sign;
}
/// Every 257th float bit pattern: 2^32 / 257 + 1 of them.
inline constexpr std::uint64_t kStridedPatterns = (std::uint64_t(1) << 32) / 257 + 1;

/// Mismatches between cvt_* with and without the device's instructions over
/// every 257th float bit pattern and the boundary patterns (`which`: 0 bf16,
/// 1 fp16, 2 e4m3 pairs of finite values). (The first form of this test
/// read the boundary patterns from a View indexed past the strided ones:
/// an illegal address on the H200, 2026-11-27, not found by reading; the
/// patterns are computed in place now.)
inline long long device_cvt_mismatches(int which) {
  using Policy = Kokkos::RangePolicy<Kokkos::Cuda, Kokkos::IndexType<std::uint64_t>>;
  long long wrong = 0;
  Kokkos::parallel_reduce(
      "dsp_test::cvt", Policy(0, kStridedPatterns + kBoundaryPatterns),
      KOKKOS_LAMBDA(std::uint64_t i, long long& w) {
        const std::uint32_t u = i < kStridedPatterns ? std::uint32_t(i * 257) : boundary_pattern(i - kStridedPatterns);
        const float f = dsp::wire::from_bits(u);
        if (which == 0) w += dsp::detail::cvt_bf16(f, true) != dsp::wire::to_bf16(f);
        else if (which == 1) w += dsp::detail::cvt_fp16(f, true) != dsp::wire::to_fp16(f);
        else {
          const float g = dsp::wire::from_bits(u * 2654435761u);  // another pattern beside it
          if (dsp::wire::finite(f) && dsp::wire::finite(g))
            w += dsp::detail::cvt_e4m3x2(f, g, true) != dsp::detail::cvt_e4m3x2(f, g, false);
        }
      },
      wrong);
  return wrong;
}

using DeviceBytes = Kokkos::View<unsigned char*, Kokkos::CudaSpace>;

inline DeviceBytes to_device(const std::vector<unsigned char>& v) {
  DeviceBytes d("dsp_test::bytes", v.size());
  Kokkos::deep_copy(d,
                    Kokkos::View<const unsigned char*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(v.data(), v.size()));
  return d;
}
inline std::vector<unsigned char> to_host(const DeviceBytes& d) {
  std::vector<unsigned char> v(d.extent(0));
  Kokkos::deep_copy(Kokkos::View<unsigned char*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(v.data(), v.size()), d);
  return v;
}

/// Cases (kind, wire, n, layout) whose device pack, unpack or own block
/// differs from the host's block loop; counts the cases run in `cases`.
inline int device_wire_mismatches(int& cases) {
  std::mt19937 rng(20261127);
  const ElemKind kinds[] = {ElemKind::f32, ElemKind::f64, ElemKind::bf16, ElemKind::f16};
  const Kokkos::DefaultHostExecutionSpace host;
  const Kokkos::Cuda dev;
  int bad = 0;
  for (ElemKind k : kinds)
    for (dsp::Wire w : dsp::kWires) {
      if (w == dsp::Wire::exact || !dsp::wire_carries(w, k)) continue;
      for (std::size_t n : {std::size_t(1), std::size_t(127), std::size_t(129), std::size_t(1000),
                            std::size_t(4096 + 77), std::size_t(100003)})
        for (int layout : {0, 1, 2}) {
          ++cases;
          const bool contiguous = layout == 0, aligned = layout == 2;
          std::size_t ext = 0, ext2 = 0;
          const Runs runs = pattern(n, contiguous, 1 + rng() % 40, ext, aligned);
          const Runs other = pattern(n, !contiguous, 1 + rng() % 40, ext2, aligned);
          const auto src = random_elements(k, ext, rng);
          const std::size_t eb = elem_bytes(k), sec_bytes = dsp::wire_section_bytes(w, n, eb);
          const auto dsrc = to_device(src);
          // pack
          std::vector<unsigned char> a(sec_bytes + 8, 0xab);
          dsp::detail::wire_pack(host, w, k, a.data(), src.data(), runs, n);
          const auto dsec = to_device(std::vector<unsigned char>(sec_bytes + 8, 0xab));
          dsp::detail::wire_pack(dev, w, k, dsec.data(), dsrc.data(), runs, n);
          // unpack of the host's section
          std::vector<unsigned char> ua(ext * eb, 0x5a);
          dsp::detail::wire_unpack(host, w, k, ua.data(), runs, a.data(), n);
          const auto din = to_device(a);
          const auto dun = to_device(std::vector<unsigned char>(ext * eb, 0x5a));
          dsp::detail::wire_unpack(dev, w, k, dun.data(), runs, din.data(), n);
          // the own block
          const dsp::detail::CopyTask t{other, runs, n};
          std::vector<unsigned char> ra(ext2 * eb, 0x33);
          dsp::detail::wire_round(host, w, k, ra.data(), src.data(), t);
          const auto dro = to_device(std::vector<unsigned char>(ext2 * eb, 0x33));
          dsp::detail::wire_round(dev, w, k, dro.data(), dsrc.data(), t);
          host.fence();
          dev.fence();
          const bool ok = to_host(dsec) == a && to_host(dun) == ua && to_host(dro) == ra;
          if (!ok) {
            ++bad;
            MESSAGE("device wire kernels differ: kind ", std::string(dsp::elem_kind_name(k)), " wire ",
                    std::string(dsp::wire_name(w)), " n ", n, " layout ", layout, " (pack ", to_host(dsec) == a,
                    ", unpack ", to_host(dun) == ua, ", own block ", to_host(dro) == ra, ")");
          }
        }
    }
  return bad;
}

}  // namespace dsp_test
