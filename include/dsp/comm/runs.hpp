// SPDX-License-Identifier: BSD-3-Clause
// dsp: run patterns, as communicators see them (the Communicator concept's
// point-to-point and typed exchanges take PeerRuns). A leaf header.
#pragma once

#include <cstddef>

namespace dsp {

/// Run r covers elements [base + r * stride, base + r * stride + len).
struct Runs {
  std::size_t base = 0;
  std::size_t stride = 0;
  std::size_t len = 0;
};

/// One peer's chunk as point-to-point messages: the chunk is `runs` of the
/// local tensor (`elems` elements in all), cut into consecutive messages of
/// `piece` elements, the shorter of the sender's and the receiver's
/// contiguous runs, so both sides cut it the same way.
struct PeerRuns {
  int peer = 0;
  Runs runs;
  std::size_t piece = 0, elems = 0;
};

}  // namespace dsp

namespace dsp::detail {

/// A contiguous range of `n` elements from `base`, as runs.
constexpr Runs contiguous(std::size_t base, std::size_t n) { return Runs{base, n, n}; }

/// Element e of a run pattern.
constexpr std::size_t element_at(const Runs& r, std::size_t e) { return r.base + (e / r.len) * r.stride + e % r.len; }

}  // namespace dsp::detail
