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

/// A range of global indices along one dim.
struct Piece {
  std::size_t offset = 0, count = 0;
};

/// How one dim is cut over the `parts` ranks of a group: each rank's block as
/// one or two pieces of global indices, in the order the block holds them.
/// `whole`: every rank holds the whole dim (Replicated); `even`: the Sharded
/// rule; `zigzag`: chunks r and 2N-1-r of Partition{extent, 2N}; `blocks`:
/// run-time sizes, `starts` the parts + 1 prefix offsets (0 ... extent).
struct Cut {
  enum class Kind : unsigned char { whole, even, zigzag, blocks };
  Kind kind = Kind::whole;
  std::size_t extent = 0, parts = 1;
  const std::size_t* starts = nullptr;

  /// Part r's pieces into `out`; returns how many (1 or 2).
  constexpr std::size_t pieces(std::size_t r, Piece (&out)[2]) const noexcept {
    switch (kind) {
      case Kind::whole: out[0] = {0, extent}; return 1;
      case Kind::even: {
        const Partition p{extent, parts};
        out[0] = {p.offset(r), p.count(r)};
        return 1;
      }
      case Kind::zigzag: {
        const Partition p{extent, 2 * parts};
        const std::size_t s = 2 * parts - 1 - r;
        out[0] = {p.offset(r), p.count(r)};
        out[1] = {p.offset(s), p.count(s)};
        return 2;
      }
      case Kind::blocks: out[0] = {starts[r], starts[r + 1] - starts[r]}; return 1;
    }
    return 0;
  }
  /// Number of indices part r holds.
  constexpr std::size_t count(std::size_t r) const noexcept {
    Piece p[2];
    const std::size_t k = pieces(r, p);
    return p[0].count + (k > 1 ? p[1].count : 0);
  }
  /// The local index along the dim of global index g, where part r holds it
  /// (requires that it does).
  constexpr std::size_t local(std::size_t r, std::size_t g) const noexcept {
    Piece p[2];
    const std::size_t k = pieces(r, p);
    if (k > 1 && g >= p[1].offset && g < p[1].offset + p[1].count) return p[0].count + (g - p[1].offset);
    return g - p[0].offset;
  }
};

}  // namespace detail

/// How a Zigzag<D> or Blocks<D> tensor's dim D is cut over its ranks
/// (DistTensor::cut()): `pieces(r, out)` writes rank r's ranges of global
/// indices (`offset`, `count`), in the order its block holds them, and
/// returns how many (Zigzag 2, its chunks r and 2N-1-r, empty ones included;
/// Blocks 1); `count(r)` is their total; `local(r, g)` the local index of
/// global index g.
using Cut = detail::Cut;
using Piece = detail::Piece;

namespace detail {

/// One side of a redistribution between cuts: the dim its placement cuts
/// (any, for a whole one) and how.
struct CutSide {
  std::size_t dim = 0;
  Cut cut;
};

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
