// SPDX-License-Identifier: BSD-3-Clause
// dsp: run patterns, the vocabulary shared by plans, kernels and backends.
// A leaf header: pure types and arithmetic, no Kokkos, no communication.
//
// A block of a LayoutRight tensor restricted along one dim is `outer` runs of
// `count * inner` contiguous elements at a fixed stride (a Slab). Packing,
// unpacking, split's slice, gather's placement and a switch's own chunk are
// all copies from one such run pattern to another, in the same element order.
#pragma once

#include <dsp/comm/runs.hpp>
#include <dsp/extents.hpp>
#include <dsp/wire.hpp>

#include <cstddef>
#include <span>

namespace dsp::detail {

/// Copy `elems` elements from src runs to dst runs, in run order. The shorter
/// run length divides the longer one (true for every block of a LayoutRight
/// tensor restricted along one dim, and for contiguous buffers).
struct CopyTask {
  Runs dst;
  Runs src;
  std::size_t elems = 0;
};

/// The most tensors one batch carries.
inline constexpr std::size_t kMaxBatch = 16;

/// One tensor of an operation: its block, its output's block, its element
/// size in bytes and kind (which wires convert it; wire.hpp), and the wire
/// kernels of that kind (a kernels/convert.hpp WireKernels, from the typed
/// front end; nullptr where no wire carries the type).
struct PackedItem {
  const void* in = nullptr;
  void* out = nullptr;
  std::size_t elem_bytes = 0;
  ElemKind kind = ElemKind::other;
  const void* wire = nullptr;
};

/// The block of a LayoutRight tensor of extents `e` restricted along dim `d`
/// to [offset, offset + count): outer runs of count * inner elements.
struct Slab {
  std::size_t outer = 0, inner = 0, extent = 0;
  constexpr Runs runs(std::size_t offset, std::size_t count) const {
    return Runs{offset * inner, extent * inner, count * inner};
  }
  constexpr std::size_t elems(std::size_t count) const { return outer * count * inner; }
};
constexpr Slab slab(std::span<const std::size_t> e, std::size_t d) {
  return Slab{product(e, 0, d), product(e, d + 1, e.size()), e[d]};
}

}  // namespace dsp::detail
