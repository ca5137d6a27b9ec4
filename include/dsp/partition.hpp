// SPDX-License-Identifier: BSD-3-Clause
// dsp: block partition of one extent over N parts. Pure arithmetic.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>

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

namespace detail {

/// A rank's block of one or more dims: offset and count per dim.
template <std::size_t R>
struct Box {
  std::array<std::size_t, R> offset{}, count{};
};

/// The nested partition of a mesh (or of one communicator, a mesh of one
/// axis). `codes[a]` is axis a's placement code (D for Sharded<D>; negative:
/// not sharded), `shape[a]` its rank count and `coords[a]` this rank's
/// coordinate. A dim sharded by several axes is split by them in axis order:
/// over the lowest axis first (the 1-D rule), then each block over the next.
/// The result is this rank's box: still one contiguous row-major block.
template <std::size_t R>
constexpr Box<R> nested_box(const std::array<std::size_t, R>& global, std::span<const long> codes,
                            std::span<const int> shape, std::span<const int> coords) {
  Box<R> b;
  b.count = global;
  for (std::size_t a = 0; a < codes.size(); ++a) {
    if (codes[a] < 0) continue;
    const std::size_t d = static_cast<std::size_t>(codes[a]);
    const Partition part{b.count[d], static_cast<std::size_t>(shape[a])};
    const std::size_t c = static_cast<std::size_t>(coords[a]);
    b.offset[d] += part.offset(c);
    b.count[d] = part.count(c);
  }
  return b;
}

}  // namespace detail
}  // namespace dsp
