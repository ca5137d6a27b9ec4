// SPDX-License-Identifier: BSD-3-Clause
// dsp: global extents, the tensor rank limit, and the size rules every
// tensor obeys. Pure arithmetic: no Kokkos, no communication.
#pragma once

#include <dsp/error.hpp>

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

namespace dsp {

/// The largest tensor rank dsp supports (DistTensor ranks 1 to kMaxRank).
inline constexpr std::size_t kMaxRank = 8;
/// The most axes a process mesh may have (dsp::Mesh<K, Comm>, K from 1 to kMaxAxes).
inline constexpr std::size_t kMaxAxes = 4;

/// The largest extent of one dim, and the largest tensor size in bytes:
/// 2^63 - 1. Kokkos reserves the all-ones size_t as "no extent given", and
/// byte offsets must fit a signed 64-bit integer.
inline constexpr std::size_t kMaxExtent = static_cast<std::size_t>(INT64_MAX);

/// Global extents of a rank-R tensor. Built from R integers of any type
/// (`{T, S, C}`), negative ones rejected, or from a std::array<std::size_t, R>.
template <std::size_t R>
struct Extents {
  std::array<std::size_t, R> values{};

  Extents(const std::array<std::size_t, R>& v) : values(v) {}  // NOLINT: implicit by design
  template <std::integral... I>
  requires(sizeof...(I) == R) Extents(I... e) {  // NOLINT: implicit by design, so that {T, S, C} converts
    std::size_t d = 0;
    ((values[d++] = checked(e)), ...);
  }

 private:
  template <std::integral I>
  static std::size_t checked(I e) {
    if constexpr (std::is_signed_v<I>)
      if (e < 0) throw InvalidArgument("dsp::Extents: extent " + std::to_string(e) + " is negative");
    return static_cast<std::size_t>(e);
  }
};

namespace detail {

/// Whether a * b, or a + b, overflows std::size_t. Every product and sum
/// that dsp forms from user input and that could wrap (byte counts, cost
/// sums, mesh shapes) is checked with these before it is formed.
constexpr bool mul_overflows(std::size_t a, std::size_t b) { return a != 0 && b > static_cast<std::size_t>(-1) / a; }
constexpr bool add_overflows(std::size_t a, std::size_t b) { return b > static_cast<std::size_t>(-1) - a; }

/// Product of e[begin, end). The one product over extents dsp uses.
constexpr std::size_t product(std::span<const std::size_t> e, std::size_t begin, std::size_t end) {
  std::size_t p = 1;
  for (std::size_t d = begin; d < end; ++d) p *= e[d];
  return p;
}
constexpr std::size_t product(std::span<const std::size_t> e) { return product(e, 0, e.size()); }

/// "[a, b, c]": the one way dsp prints extents.
DSP_FUNC std::string text(std::span<const std::size_t> e);
/// Why a tensor of global extents `g` with `elem_bytes`-byte elements cannot
/// exist, or "". Every extent must be below kMaxExtent, and the size in bytes
/// must fit too: past that, sizes computed from the extents wrap around, and a
/// tensor of extents [2^32, 2^31, 4] would get an empty block and be written
/// out of bounds.
DSP_FUNC std::string size_error(std::span<const std::size_t> g, std::size_t elem_bytes);

#if DSP_FUNC_BODIES
DSP_FUNC std::string text(std::span<const std::size_t> e) {
  std::string t = "[";
  for (std::size_t d = 0; d < e.size(); ++d) t += (d ? ", " : "") + std::to_string(e[d]);
  return t + "]";
}

DSP_FUNC std::string size_error(std::span<const std::size_t> g, std::size_t elem_bytes) {
  for (std::size_t x : g)
    if (x > kMaxExtent)
      return "dsp::DistTensor: global extents " + text(g) + ": an extent of 2^63 or more is not supported";
  for (std::size_t x : g)
    if (x == 0) return "";
  std::size_t bytes = elem_bytes;
  for (std::size_t x : g) {
    if (mul_overflows(bytes, x) || bytes * x > kMaxExtent)
      return "dsp::DistTensor: global extents " + text(g) + " of " + std::to_string(elem_bytes) +
             "-byte elements exceed 2^63 bytes (sizes would wrap around)";
    bytes *= x;
  }
  return "";
}
#endif

}  // namespace detail
}  // namespace dsp
