// SPDX-License-Identifier: BSD-3-Clause
// dsp: a constexpr model of what each layout transition sends, exact for
// uneven partitions. Built on primitive_for / collective_for (layout.hpp).
#pragma once

#include <dsp/error.hpp>
#include <dsp/layout.hpp>
#include <dsp/partition.hpp>

#include <array>
#include <cstddef>

namespace dsp {

/// The cost of one transition on one rank.
///
/// `bytes` is what rank `rank` sends to OTHER ranks (the chunk a rank keeps is
/// copied locally and never counted), `max_bytes` the largest such value over
/// all ranks. `collectives` counts collectives that move data between ranks:
/// 0 for split and identity, and 0 when N == 1 or the tensor is empty (the
/// engine may still make a one-rank call that moves nothing). These are exactly
/// what a CountingCommunicator records as `bytes_sent` and (for N > 1)
/// `collectives()`.
struct TransitionCost {
  Primitive primitive = Primitive::identity;
  Collective collective = Collective::none;
  std::size_t collectives = 0;
  std::size_t bytes = 0;
  std::size_t max_bytes = 0;
  friend constexpr bool operator==(const TransitionCost&, const TransitionCost&) = default;
};

namespace detail {
/// a * b, or InvalidArgument when it overflows std::size_t: in a constant
/// expression (a static_assert on a cost) the overflow is a compile error.
constexpr std::size_t checked_mul(std::size_t a, std::size_t b) {
  if (a != 0 && b > static_cast<std::size_t>(-1) / a)
    throw InvalidArgument("dsp cost model: a byte count overflows std::size_t");
  return a * b;
}
/// a + b, or InvalidArgument when it overflows std::size_t.
constexpr std::size_t checked_add(std::size_t a, std::size_t b) {
  if (b > static_cast<std::size_t>(-1) - a) throw InvalidArgument("dsp cost model: a byte count overflows std::size_t");
  return a + b;
}

template <std::size_t R>
constexpr std::size_t product_except(const std::array<std::size_t, R>& e, std::size_t a, std::size_t b) {
  std::size_t p = 1;
  for (std::size_t d = 0; d < R; ++d)
    if (d != a && d != b) p = checked_mul(p, e[d]);
  return p;
}

/// Throws InvalidArgument (and so is no constant expression) for n == 0 or rank >= n.
constexpr void check_cost_args(std::size_t n, std::size_t rank) {
  if (n == 0 || rank >= n) throw InvalidArgument("dsp cost model: need 0 <= rank < N and N >= 1");
}

/// Bytes rank p of n sends moving From -> To (extents e, elem_bytes each).
template <Layout From, Layout To, std::size_t R>
constexpr std::size_t bytes_sent(const std::array<std::size_t, R>& e, std::size_t elem_bytes, std::size_t n,
                                 std::size_t p) {
  constexpr Primitive prim = primitive_for<From, To>();
  if constexpr (prim == Primitive::dynamic_switch) {
    // Rank p holds count_i(p) of dim i and sends peer q its count_j(q) of dim j.
    constexpr std::size_t i = From::dim, j = To::dim;
    const Partition pi{e[i], n}, pj{e[j], n};
    return checked_mul(checked_mul(checked_mul(elem_bytes, product_except(e, i, j)), pi.count(p)), e[j] - pj.count(p));
  } else if constexpr (prim == Primitive::gather) {
    // Rank p's block goes to each of the n - 1 others.
    constexpr std::size_t d = From::dim;
    return checked_mul(checked_mul(checked_mul(elem_bytes, product_except(e, d, d)), Partition{e[d], n}.count(p)),
                       n - 1);
  } else {
    return 0;  // split and identity: local
  }
}
}  // namespace detail

/// The cost of moving a tensor of global extents `e` with `elem_bytes`-byte
/// elements From -> To on rank `rank` of `n`. constexpr: usable in static_assert.
/// Throws dsp::InvalidArgument when n == 0 or rank >= n, or when a byte count
/// overflows std::size_t (in a constant expression: a compile error).
template <Layout From, Layout To, std::size_t R>
constexpr TransitionCost transition_cost(const std::array<std::size_t, R>& e, std::size_t elem_bytes, std::size_t n,
                                         std::size_t rank) {
  static_assert(layout_fits_v<From, R> && layout_fits_v<To, R>,
                "dsp::transition_cost: a Sharded<D> layout names a dim D >= the tensor's rank.");
  detail::check_cost_args(n, rank);
  TransitionCost c;
  c.primitive = primitive_for<From, To>();
  c.collective = collective_for<From, To>();
  std::size_t total = 1;
  for (std::size_t x : e) total = detail::checked_mul(total, x);
  c.collectives = (c.collective != Collective::none && n > 1 && total > 0) ? 1 : 0;
  c.bytes = detail::bytes_sent<From, To>(e, elem_bytes, n, rank);
  for (std::size_t q = 0; q < n; ++q) {
    const std::size_t b = detail::bytes_sent<From, To>(e, elem_bytes, n, q);
    if (b > c.max_bytes) c.max_bytes = b;
  }
  return c;
}

}  // namespace dsp
