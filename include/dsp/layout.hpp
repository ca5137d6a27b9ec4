// SPDX-License-Identifier: BSD-3-Clause
// dsp: layouts as types, and the rules for moving between them.
#pragma once

#include <cstddef>
#include <type_traits>

namespace dsp {

/// Every rank holds the whole tensor.
struct Replicated {};

/// The tensor is split along dim D in contiguous blocks, one per rank, in rank
/// order; the first (extent % N) ranks hold one more element (see partition.hpp).
template <std::size_t D>
struct Sharded {
  static constexpr std::size_t dim = D;
};

template <class L>
struct is_sharded : std::false_type {};
template <std::size_t D>
struct is_sharded<Sharded<D>> : std::true_type {};
template <class L>
inline constexpr bool is_sharded_v = is_sharded<L>::value;

template <class L>
inline constexpr bool is_replicated_v = std::is_same_v<L, Replicated>;

/// A layout policy: Replicated or Sharded<D>.
template <class L>
concept Layout = is_sharded_v<L> || is_replicated_v<L>;

/// A layout is valid for a tensor of rank R when it does not name a dim >= R.
template <class L, std::size_t R>
constexpr bool layout_fits() {
  if constexpr (is_sharded_v<L>) return L::dim < R;
  else return is_replicated_v<L>;
}
template <class L, std::size_t R>
inline constexpr bool layout_fits_v = layout_fits<L, R>();

/// The collective a transition between two layouts needs (paper, Table 2).
enum class Collective { none, all_to_all, all_gather };

/// The primitive that moves From -> To, and the collective it costs.
enum class Primitive { identity, split, dynamic_switch, gather };

template <Layout From, Layout To>
constexpr Primitive primitive_for() {
  if constexpr (std::is_same_v<From, To>) return Primitive::identity;
  else if constexpr (is_replicated_v<From>) return Primitive::split;
  else if constexpr (is_replicated_v<To>) return Primitive::gather;
  else return Primitive::dynamic_switch;
}

template <Layout From, Layout To>
constexpr Collective collective_for() {
  constexpr Primitive p = primitive_for<From, To>();
  if constexpr (p == Primitive::dynamic_switch) return Collective::all_to_all;
  else if constexpr (p == Primitive::gather) return Collective::all_gather;
  else return Collective::none;
}

namespace detail {
/// Integer code of a layout, exchanged between ranks: -1 Replicated, D for Sharded<D>.
template <Layout L>
constexpr long layout_code() {
  if constexpr (is_replicated_v<L>) return -1;
  else return static_cast<long>(L::dim);
}
}  // namespace detail

}  // namespace dsp
