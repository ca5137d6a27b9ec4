// SPDX-License-Identifier: BSD-3-Clause
// dsp: block partition of one extent over N parts. Pure arithmetic.
#pragma once

#include <algorithm>
#include <cstddef>

namespace dsp {

/// Contiguous blocks in rank order; the first (extent % parts) parts hold one
/// more element. Any extent >= 0 works, extent < parts included (trailing parts
/// are empty). No padding.
struct Partition {
  std::size_t extent = 0;
  std::size_t parts = 1;

  /// Number of elements part r holds.
  constexpr std::size_t count(std::size_t r) const noexcept { return extent / parts + (r < extent % parts ? 1 : 0); }
  /// Global index of part r's first element.
  constexpr std::size_t offset(std::size_t r) const noexcept {
    return r * (extent / parts) + std::min(r, extent % parts);
  }
  /// The part that holds global index i (requires i < extent).
  constexpr std::size_t owner(std::size_t i) const noexcept {
    const std::size_t q = extent / parts, rem = extent % parts;
    const std::size_t big = rem * (q + 1);  // elements held by the larger parts
    if (i < big) return i / (q + 1);
    return rem + (i - big) / q;
  }
  /// True when every part holds the same count.
  constexpr bool even() const noexcept { return extent % parts == 0; }
};

}  // namespace dsp
