// SPDX-License-Identifier: BSD-3-Clause
// dsp: boxes of a tensor (an offset and a count per dim) and the copy tasks
// between a box and a block that holds it. Pure arithmetic: what reshard's
// and the Zigzag/Blocks exchanges' plans are made of.
#pragma once

#include <dsp/extents.hpp>
#include <dsp/plan/tasks.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

namespace dsp::detail {

/// A box of a tensor: offset and count per dim. As a block that holds a box,
/// `off` may be a virtual origin (global index minus local index along a dim
/// whose block holds several pieces): only differences g - off are taken,
/// and unsigned arithmetic makes them right.
struct RBox {
  std::array<std::size_t, kMaxRank> off{}, cnt{};
};

inline std::size_t box_elems(const RBox& b, std::size_t rank) {
  std::size_t n = 1;
  for (std::size_t d = 0; d < rank; ++d) n *= b.cnt[d];
  return n;
}
inline bool same_box(const RBox& a, const RBox& b, std::size_t rank) {
  for (std::size_t d = 0; d < rank; ++d)
    if (a.off[d] != b.off[d] || a.cnt[d] != b.cnt[d]) return false;
  return true;
}
/// The intersection of two boxes (empty: some count 0).
inline RBox intersect(const RBox& a, const RBox& b, std::size_t rank) {
  RBox r;
  for (std::size_t d = 0; d < rank; ++d) {
    const std::size_t lo = std::max(a.off[d], b.off[d]);
    const std::size_t hi = std::min(a.off[d] + a.cnt[d], b.off[d] + b.cnt[d]);
    r.off[d] = lo;
    r.cnt[d] = hi > lo ? hi - lo : 0;
  }
  return r;
}

/// Copy tasks between the part `part` (global coordinates) of a local block
/// `block` (its box) and a contiguous buffer from element `at`, in the row-
/// major order of `part`: the block side in runs, one task per index of the
/// dims before the last two that `part` does not cover whole. `to_buffer`:
/// block -> buffer (pack), else buffer -> block (unpack); with `other` set,
/// block -> other block (both sides in runs: a local copy).
inline std::size_t box_tasks(const RBox& block, const RBox& part, std::size_t rank, std::size_t at, bool to_buffer,
                             std::vector<CopyTask>& out, const RBox* other = nullptr) {
  const std::size_t n = box_elems(part, rank);
  if (n == 0) return at;
  // Element strides of each block (LayoutRight).
  auto strides = [rank](const RBox& b) {
    std::array<std::size_t, kMaxRank> s{};
    std::size_t m = 1;
    for (std::size_t d = rank; d-- > 0;) s[d] = m, m *= b.cnt[d];
    return s;
  };
  const auto sb = strides(block);
  const auto so = other ? strides(*other) : sb;
  // q: the last dim `part` does not cover whole in the block (and, for a
  // local copy, in the other block); the dims after it are whole in both.
  std::size_t q = 0;
  for (std::size_t d = rank; d-- > 0;)
    if (part.cnt[d] != block.cnt[d] || (other && part.cnt[d] != other->cnt[d])) {
      q = d;
      break;
    }
  const std::size_t len = part.cnt[q] * sb[q];  // a contiguous run in both blocks (the dims after q are whole)
  const std::size_t level = q > 0 ? q - 1 : 0;  // the runs of one task step along this dim
  const std::size_t runs = q > 0 ? part.cnt[level] : 1;
  std::array<std::size_t, kMaxRank> idx{};  // index over dims [0, level) of `part`
  while (true) {
    std::size_t bb = 0, ob = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      const std::size_t g = part.off[d] + (d < level ? idx[d] : 0);
      if (d > q) continue;
      bb += (g - block.off[d]) * sb[d];
      if (other) ob += (g - other->off[d]) * so[d];
    }
    const Runs br{bb, q > 0 ? sb[level] : len, len};
    const std::size_t elems = runs * len;
    if (other) out.push_back({Runs{ob, q > 0 ? so[level] : len, len}, br, elems});
    else if (to_buffer) out.push_back({contiguous(at, elems), br, elems});
    else out.push_back({br, contiguous(at, elems), elems});
    at += elems;
    std::size_t d = level;
    while (d > 0) {
      --d;
      if (++idx[d] < part.cnt[d]) break;
      idx[d] = 0;
      if (d == 0) return at;
    }
    if (level == 0) return at;
  }
}

/// The contiguous run length of box `part` inside block `block` (what
/// box_tasks cuts it into, without a second block): the part's extents from
/// the last dim it does not cover whole on.
inline std::size_t box_run(const RBox& block, const RBox& part, std::size_t rank) {
  std::size_t len = 1;
  for (std::size_t d = rank; d-- > 0;) {
    len *= part.cnt[d];
    if (part.cnt[d] != block.cnt[d]) break;
  }
  return len;
}

}  // namespace dsp::detail
