// SPDX-License-Identifier: BSD-3-Clause
// dsp: block partition of one extent over N parts. Pure arithmetic.
#pragma once

#include <dsp/layout.hpp>

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

/// The run-time sizes a mesh layout's Blocks codes stand for: the prefix
/// offsets (parts + 1 of them) of the input's Blocks (a kBlocks code) and of
/// the output's (kBlocksOut, in a plan). A layout has at most one Blocks.
struct CutSizes {
  const std::size_t* in = nullptr;
  const std::size_t* out = nullptr;
};

/// How placement code c cuts `count` indices over `parts` ranks: Sharded
/// (the 1-D rule), Zigzag, Blocks (the sizes `z` name; a Blocks axis is the
/// first that cuts its dim, so `count` is the whole extent), else whole.
constexpr Cut code_cut(long c, std::size_t count, std::size_t parts, CutSizes z = {}) {
  if (code_dim(c) < 0) return Cut{Cut::Kind::whole, count, parts, nullptr};
  if (is_blocks_code(c)) return Cut{Cut::Kind::blocks, count, parts, is_blocks_out_code(c) ? z.out : z.in};
  return Cut{is_zigzag_code(c) ? Cut::Kind::zigzag : Cut::Kind::even, count, parts, nullptr};
}

/// How placement code c (layout_code: Sharded, Zigzag, Blocks; else whole)
/// cuts extents e over n ranks.
constexpr CutSide code_side(long c, std::span<const std::size_t> e, std::size_t n, CutSizes z = {}) {
  const long d = code_dim(c);
  if (d < 0) return CutSide{0, code_cut(c, e.empty() ? 0 : e[0], n)};
  return CutSide{std::size_t(d), code_cut(c, e[std::size_t(d)], n, z)};
}

/// A rank's block of one or more dims: offset and count per dim.
template <std::size_t R>
struct Box {
  std::array<std::size_t, R> offset{}, count{};
};

/// Where a block held as two ranges of one dim jumps (a Zigzag block, or a
/// part of one): along `dim` (none: ~0), after its first `first` indices,
/// to global index `second`. The block's offset along `dim` is its first
/// range's.
struct Split {
  static constexpr std::size_t none = ~std::size_t(0);
  std::size_t dim = none, first = 0, second = 0;
};

/// Appends to `out` the global ranges of local indices [s, s + k) of a block
/// held as the ranges `p[0..np)` (in block order): one per range it meets,
/// or one empty range at s's position. At most `cap` ranges are written.
constexpr void map_local(const Piece* p, std::size_t np, std::size_t s, std::size_t k, Piece* out, std::size_t& no,
                         std::size_t cap) {
  std::size_t at = 0;
  bool any = false;
  for (std::size_t i = 0; i < np; ++i) {
    const std::size_t lo = s > at ? s : at, hi = s + k < at + p[i].count ? s + k : at + p[i].count;
    if (hi > lo && no < cap) out[no++] = {p[i].offset + (lo - at), hi - lo}, any = true;
    at += p[i].count;
  }
  if (any || no >= cap) return;
  std::size_t pos = np ? p[np - 1].offset + p[np - 1].count : 0;
  for (std::size_t i = 0, a = 0; i < np; a += p[i].count, ++i)
    if (s < a + p[i].count) {
      pos = p[i].offset + (s - a);
      break;
    }
  out[no++] = {pos, 0};
}

/// Axis a's cut of a block of `count` indices along its dim: Sharded (the
/// 1-D rule), Zigzag (chunks r and 2N-1-r of 2N) or Blocks (sizes `z`);
/// local ranges into `out`.
constexpr std::size_t axis_pieces(long code, std::size_t count, std::size_t parts, std::size_t r, Piece (&out)[2],
                                  CutSizes z = {}) {
  return code_cut(code, count, parts, z).pieces(r, out);
}

/// The counts of this rank's block under the nested partition (see
/// nested_block), for the dims of `global` (at most kMaxRank).
inline std::array<std::size_t, kMaxRank> nested_counts(std::span<const std::size_t> global, std::span<const long> codes,
                                                       std::span<const int> shape, std::span<const int> coords,
                                                       CutSizes z = {}) {
  std::array<std::size_t, kMaxRank> c{};
  for (std::size_t d = 0; d < global.size() && d < kMaxRank; ++d) c[d] = global[d];
  for (std::size_t a = 0; a < codes.size(); ++a) {
    const long d = code_dim(codes[a]);
    if (d < 0 || std::size_t(d) >= kMaxRank) continue;
    Piece p[2];
    const std::size_t k = axis_pieces(codes[a], c[std::size_t(d)], std::size_t(shape[a]), std::size_t(coords[a]), p, z);
    c[std::size_t(d)] = p[0].count + (k > 1 ? p[1].count : 0);
  }
  return c;
}

/// A rank's block under the nested partition: its box (the offset of its
/// first range along a split dim) and where it jumps (Split).
template <std::size_t R>
struct NestedBlock {
  Box<R> box;
  Split split;
};

/// The nested partition of a mesh (or of one communicator, a mesh of one
/// axis). `codes[a]` is axis a's placement code (layout_code: D for
/// Sharded<D>, kZigzag - D for Zigzag<D>; Replicated and Partial do not
/// cut), `shape[a]` its rank count and `coords[a]` this rank's coordinate. A
/// dim cut by several axes is cut by them in axis order: by the lowest axis
/// first (the 1-D rule, or Zigzag's chunks), then each rank's block, in its
/// own order of indices, by the next. Without Zigzag a block is one box;
/// with one Zigzag on a dim, the block holds at most two ranges of it
/// (Split). With two Zigzags on one dim the counts hold but not the split
/// (a tensor's layout has at most one Zigzag). A Blocks code (sizes `z`)
/// stands on the first axis that cuts its dim.
template <std::size_t R>
constexpr NestedBlock<R> nested_block(const std::array<std::size_t, R>& global, std::span<const long> codes,
                                      std::span<const int> shape, std::span<const int> coords, CutSizes z = {}) {
  constexpr std::size_t cap = 8;
  NestedBlock<R> b;
  b.box.count = global;
  for (std::size_t d = 0; d < R; ++d) {
    bool cut = false;
    for (long c : codes) cut = cut || code_dim(c) == long(d);
    if (!cut) continue;
    Piece cur[cap] = {{0, global[d]}};
    std::size_t n = 1;
    for (std::size_t a = 0; a < codes.size(); ++a) {
      if (code_dim(codes[a]) != long(d)) continue;
      Piece loc[2];
      const std::size_t k =
          axis_pieces(codes[a], b.box.count[d], std::size_t(shape[a]), std::size_t(coords[a]), loc, z);
      Piece next[cap] = {};
      std::size_t m = 0;
      for (std::size_t i = 0; i < k; ++i) map_local(cur, n, loc[i].offset, loc[i].count, next, m, cap);
      b.box.count[d] = loc[0].count + (k > 1 ? loc[1].count : 0);
      n = m;
      for (std::size_t i = 0; i < m; ++i) cur[i] = next[i];
    }
    Piece run[cap] = {};  // the non-empty ranges, adjacent ones merged
    std::size_t r = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (cur[i].count == 0) continue;
      if (r > 0 && run[r - 1].offset + run[r - 1].count == cur[i].offset) run[r - 1].count += cur[i].count;
      else run[r++] = cur[i];
    }
    b.box.offset[d] = r > 0 ? run[0].offset : cur[0].offset;
    if (r > 1) b.split = Split{d, run[0].count, run[1].offset};
  }
  return b;
}

/// This rank's box under the nested partition (nested_block's).
template <std::size_t R>
constexpr Box<R> nested_box(const std::array<std::size_t, R>& global, std::span<const long> codes,
                            std::span<const int> shape, std::span<const int> coords, CutSizes z = {}) {
  return nested_block(global, codes, shape, coords, z).box;
}

}  // namespace detail

/// Where a block jumps along one dim (DistTensor::block_split()).
using Split = detail::Split;
}  // namespace dsp
