// SPDX-License-Identifier: BSD-3-Clause
// dsp: layouts as types, and the rules for moving between them.
#pragma once

#include <dsp/extents.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
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

/// Causal load balance along dim D: the dim is cut into 2N chunks by the
/// Sharded rule (Partition{extent, 2N}) and rank r holds chunk r followed by
/// chunk 2N-1-r, one contiguous block (so each rank has equal work under a
/// causal mask). On a plain communicator or a mesh axis; dsp::redistribute
/// moves between it and Sharded, Blocks and Replicated (docs/attention.md).
template <std::size_t D>
struct Zigzag {
  static constexpr std::size_t dim = D;
};

/// Blocks along dim D whose sizes are given at run time, one per rank in
/// rank order, summing to the extent (a DistTensor of this layout takes them
/// at construction: whole documents per rank, or balanced work). On a plain
/// communicator, or one mesh axis (sizes: one per rank of that axis; the
/// axis must be the first that cuts D); dsp::redistribute moves between it
/// and Sharded, Zigzag and Replicated (docs/attention.md).
template <std::size_t D>
struct Blocks {
  static constexpr std::size_t dim = D;
};

template <class L>
struct is_zigzag : std::false_type {};
template <std::size_t D>
struct is_zigzag<Zigzag<D>> : std::true_type {};
template <class L>
inline constexpr bool is_zigzag_v = is_zigzag<L>::value;

template <class L>
struct is_blocks : std::false_type {};
template <std::size_t D>
struct is_blocks<Blocks<D>> : std::true_type {};
template <class L>
inline constexpr bool is_blocks_v = is_blocks<L>::value;

/// Zigzag<D> or Blocks<D>: a placement whose blocks are not the Sharded rule's.
template <class L>
inline constexpr bool is_cut_v = is_zigzag_v<L> || is_blocks_v<L>;

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

/// Reduction operations a Partial placement can be pending on.
struct Sum {};
struct Max {};
struct Min {};

/// Every rank holds a partial value of the whole tensor; the tensor is the
/// reduction (Op: Sum, Max or Min) over the ranks of the group or mesh axis.
/// Partial -> Replicated is an all-reduce, Partial -> Sharded<D> a
/// reduce-scatter, Replicated -> Partial local (dsp::redistribute).
template <class Op = Sum>
struct Partial {
  using op = Op;
};

template <class L>
struct is_partial : std::false_type {};
template <class Op>
struct is_partial<Partial<Op>> : std::true_type {};
template <class L>
inline constexpr bool is_partial_v = is_partial<L>::value;

/// A placement: what one group of ranks (a communicator, or one mesh axis)
/// does to a tensor: Replicated, Sharded<D> or Partial<Op>.
template <class L>
concept Placement = Layout<L> ||
    (is_partial_v<L> && (std::is_same_v<typename L::op, Sum> || std::is_same_v<typename L::op, Max> ||
                         std::is_same_v<typename L::op, Min>));

/// One placement per axis of a process mesh, in axis order: Axes<P0, ..., PK-1>
/// on a Mesh<K, Comm>. A dim sharded by several axes is split by them in axis
/// order (see dsp::Mesh).
template <class... P>
struct Axes {
  static constexpr std::size_t size = sizeof...(P);
};

template <class L>
struct is_axes : std::false_type {};
template <class... P>
struct is_axes<Axes<P...>> : std::true_type {};
template <class L>
inline constexpr bool is_axes_v = is_axes<L>::value;

/// A layout (a placement, or Axes of placements) is valid for a tensor of
/// rank R when it does not name a dim >= R.
template <class L, std::size_t R>
constexpr bool layout_fits() {
  if constexpr (is_sharded_v<L> || is_cut_v<L>) return L::dim < R;
  else if constexpr (is_axes_v<L>)
    return []<class... P>(Axes<P...>*) { return (layout_fits<P, R>() && ...); }(static_cast<L*>(nullptr));
  else return is_replicated_v<L> || is_partial_v<L>;
}
template <class L, std::size_t R>
inline constexpr bool layout_fits_v = layout_fits<L, R>();

/// The collective a transition between two layouts needs (paper, Table 2);
/// `planned` for a redistribution whose plan may use several.
enum class Collective { none, all_to_all, all_gather, planned };

/// The primitive that moves From -> To, and the collective it costs;
/// `redistribute` for a planned redistribution (dsp::redistribute).
enum class Primitive { identity, split, dynamic_switch, gather, redistribute };

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
/// Integer code of a placement, exchanged between ranks and used by the mesh
/// planner: D for Sharded<D>, -1 Replicated, -2 / -3 / -4 Partial<Sum / Max /
/// Min>, kZigzag - D for Zigzag<D> and kBlocks - D for Blocks<D>. In a plan,
/// the output's Blocks<D> is kBlocksOut - D (plan_codes: its sizes are the
/// output tensor's, which may differ from the input's on the same axis).
inline constexpr long kReplicated = -1, kPartialSum = -2, kPartialMax = -3, kPartialMin = -4;
inline constexpr long kZigzag = -1000, kBlocks = -2000, kBlocksOut = -3000;
template <class L>
constexpr long layout_code() {
  if constexpr (is_replicated_v<L>) return kReplicated;
  else if constexpr (is_sharded_v<L>) return static_cast<long>(L::dim);
  else if constexpr (is_zigzag_v<L>) return kZigzag - static_cast<long>(L::dim);
  else if constexpr (is_blocks_v<L>) return kBlocks - static_cast<long>(L::dim);
  else if constexpr (std::is_same_v<L, Partial<Max>>) return kPartialMax;
  else if constexpr (std::is_same_v<L, Partial<Min>>) return kPartialMin;
  else return kPartialSum;
}
constexpr bool is_partial_code(long c) { return c <= kPartialSum && c >= kPartialMin; }
/// Whether a code is Zigzag's or Blocks'.
constexpr bool is_cut_code(long c) { return c <= kZigzag; }
constexpr bool is_zigzag_code(long c) { return c <= kZigzag && c > kBlocks; }
/// Whether a code is a Blocks one (the input's or, in a plan, the output's).
constexpr bool is_blocks_code(long c) { return c <= kBlocks; }
/// Whether a code is the output's Blocks in a plan (kBlocksOut - D).
constexpr bool is_blocks_out_code(long c) { return c <= kBlocksOut; }
/// The dim a code cuts (Sharded, Zigzag, Blocks), or -1 (Replicated, Partial).
constexpr long code_dim(long c) {
  if (c >= 0) return c;
  if (c <= kBlocksOut) return kBlocksOut - c;
  if (c <= kBlocks) return kBlocks - c;
  if (c <= kZigzag) return kZigzag - c;
  return -1;
}

/// The placement codes of a layout: one per axis (Axes<...>), or one.
template <class L>
struct placement_codes {
  static constexpr std::array<long, 1> value{layout_code<L>()};
};
template <class... P>
struct placement_codes<Axes<P...>> {
  static constexpr std::array<long, sizeof...(P)> value{layout_code<P>()...};
};

/// The placement codes of a layout, one per mesh axis (one for a placement).
template <class L>
inline constexpr auto codes_v = placement_codes<L>::value;

/// Whether a layout (a placement, or Axes of them) has a Zigzag or Blocks.
template <class L>
constexpr bool has_cut_code() {
  for (long c : codes_v<L>)
    if (is_cut_code(c)) return true;
  return false;
}

/// Whether a layout (a placement, or Axes of them) has a Blocks.
template <class L>
constexpr bool has_blocks_code() {
  for (long c : codes_v<L>)
    if (is_blocks_code(c)) return true;
  return false;
}

/// The codes of an output layout as a plan names them: its Blocks codes as
/// kBlocksOut - D (the output's sizes), the others as they are.
template <std::size_t K>
constexpr std::array<long, K> plan_codes(std::array<long, K> c) {
  for (long& x : c)
    if (is_blocks_code(x)) x = kBlocksOut - code_dim(x);
  return c;
}

/// The mesh axis of a layout's Blocks, or -1.
template <class L>
constexpr int blocks_axis() {
  for (std::size_t a = 0; a < codes_v<L>.size(); ++a)
    if (is_blocks_code(codes_v<L>[a])) return int(a);
  return -1;
}

/// Whether mesh layouts From and To hold the same Blocks<D> on the same axis
/// (an output of To may then take the input's sizes).
template <class From, class To>
constexpr bool keeps_blocks() {
  constexpr int a = blocks_axis<From>();
  if constexpr (a < 0 || !is_axes_v<From> || !is_axes_v<To>) return false;
  else return blocks_axis<To>() == a && codes_v<From>[std::size_t(a)] == codes_v<To>[std::size_t(a)];
}

/// A placement code (layout_code) as text: Sharded<d>, Replicated, Partial<...>.
inline std::string layout_text(std::int64_t code) {
  if (code >= 0) return "Sharded<" + std::to_string(code) + ">";
  if (code <= kBlocks) return "Blocks<" + std::to_string(code_dim(long(code))) + ">";
  if (code <= kZigzag) return "Zigzag<" + std::to_string(kZigzag - code) + ">";
  if (code == kPartialSum) return "Partial<Sum>";
  if (code == kPartialMax) return "Partial<Max>";
  if (code == kPartialMin) return "Partial<Min>";
  return "Replicated";
}

/// A placement as text: one layout, or Axes<...> on a mesh of `axes` axes.
inline std::string layout_text(const std::int64_t* codes, std::uint32_t axes) {
  if (axes == 0) return layout_text(codes[0]);
  std::string t = "Axes<";
  for (std::uint32_t a = 0; a < axes && a < kMaxAxes; ++a) t += (a ? ", " : "") + layout_text(codes[a]);
  return t + ">";
}
}  // namespace detail

}  // namespace dsp
