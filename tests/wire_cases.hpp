// SPDX-License-Identifier: BSD-3-Clause
// Inputs of the wire kernel tests (test_convert_kernel on the host, test_nccl
// on a CUDA device): element values of every kind and run patterns.
#pragma once

#include <dsp/comm/runs.hpp>
#include <dsp/half.hpp>
#include <dsp/wire.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace dsp_test {

using dsp::ElemKind;
using dsp::Runs;

inline std::size_t elem_bytes(ElemKind k) { return k == ElemKind::f64 ? 8 : k == ElemKind::f32 ? 4 : 2; }

/// Random raw values of kind k: mostly finite values of many magnitudes, some NaN and infinities.
inline std::vector<unsigned char> random_elements(ElemKind k, std::size_t n, std::mt19937& rng) {
  std::vector<unsigned char> v(n * elem_bytes(k));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::size_t i = 0; i < n; ++i) {
    float f = u(rng) * std::ldexp(1.0f, int(rng() % 30) - 15);
    if (rng() % 50 == 0) f = std::numeric_limits<float>::infinity();
    if (rng() % 60 == 0) f = std::numeric_limits<float>::quiet_NaN();
    unsigned char* p = v.data() + i * elem_bytes(k);
    if (k == ElemKind::f32) std::memcpy(p, &f, 4);
    else if (k == ElemKind::f64) {
      const double d = double(f) * (1 + std::ldexp(1.0, -35));
      std::memcpy(p, &d, 8);
    } else {
      const std::uint16_t h = k == ElemKind::bf16 ? dsp::wire::to_bf16(f) : dsp::wire::to_fp16(f);
      std::memcpy(p, &h, 2);
    }
  }
  return v;
}

/// A run pattern of n elements inside a buffer: contiguous from element 3,
/// or runs of `len` at `stride`; `aligned`: runs of 64 from element 8 at a
/// stride of 72, so groups of 8 elements start 16-byte aligned (the device
/// group schedule's vector path).
inline Runs pattern(std::size_t n, bool contiguous, std::size_t len, std::size_t& extent, bool aligned = false) {
  if (aligned && n > 0) {
    extent = 8 + (n / 64 + 1) * 72;
    return Runs{8, 72, 64};
  }
  if (contiguous || n == 0) {
    extent = n + 3;
    return Runs{3, n ? n : 1, n ? n : 1};
  }
  while (n % len) --len;
  extent = 5 + (n / len) * (len + 2);
  return Runs{5, len + 2, len};
}

}  // namespace dsp_test
