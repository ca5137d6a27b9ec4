// SPDX-License-Identifier: BSD-3-Clause
// dsp::reshard: a tensor moved from one group of ranks to another, both
// inside one parent communicator, any layouts on both sides.
//
//   dsp::reshard(parent, rank_in_a ? &x : nullptr, rank_in_b ? &y : nullptr);
//
// Every rank of `parent` calls it. `x` is a DistTensor on a communicator or
// mesh whose ranks are some of parent's (in any order), passed by each of
// them; `y` likewise on another (or the same, or an overlapping) group; ranks
// in neither pass two nullptrs. Grow (2 ranks -> 6), shrink (6 -> 3), a
// reversed group, a pipeline stage's mesh to the next's. One check on the
// parent (element type, extents, call site, every rank's blocks) raises on
// every rank of the parent and writes nothing when something is wrong; then
// one all-to-all-v in which each element a receiver wants moves once, from
// one holder (a receiver that holds it copies it locally).
#pragma once

#include <dsp/comm/concepts.hpp>
#include <dsp/core/agree.hpp>
#include <dsp/core/port.hpp>
#include <dsp/engine/api.hpp>
#include <dsp/layout.hpp>
#include <dsp/redistribute.hpp>
#include <dsp/tensor.hpp>

#include <cstddef>
#include <source_location>
#include <string>
#include <type_traits>

// The engine of reshard (engine/api.hpp says when the headers hold it).
#if DSP_ENGINE_DEFINITIONS
#include <dsp/engine/regroup.hpp>
#endif

namespace dsp {

namespace detail {
template <class Parent, class X, class Y>
constexpr bool reshard_ok() {
  constexpr bool tensors = is_dist_tensor_v<X> && is_dist_tensor_v<Y>;
  static_assert(tensors, "dsp::reshard(parent, x, y): x and y must point to dsp::DistTensor types.");
  if constexpr (!tensors) {
    return false;
  } else {
    constexpr bool same_type = std::is_same_v<typename X::value_type, typename Y::value_type>;
    static_assert(same_type, "dsp::reshard: x and y must have the same element type.");
    constexpr bool same_rank = X::rank == Y::rank;
    static_assert(same_rank, "dsp::reshard: x and y must have the same tensor rank.");
    constexpr bool no_partial =
        !has_partial(codes_v<typename X::layout_type>) && !has_partial(codes_v<typename Y::layout_type>);
    static_assert(no_partial,
                  "dsp::reshard: a Partial placement holds addends, not the tensor: reduce it first "
                  "(dsp::redistribute to Replicated or Sharded<D>), then reshard.");
    constexpr bool spaces = std::is_same_v<typename X::memory_space, typename Parent::memory_space> &&
                            std::is_same_v<typename Y::memory_space, typename Parent::memory_space>;
    static_assert(spaces, "dsp::reshard: x, y and the parent communicator must use the same memory space.");
    return same_type && same_rank && no_partial && spaces;
  }
}
}  // namespace detail

/// Moves `*x` (held by its group) into `*y` (held by its group), both groups
/// inside `parent`. Collective over `parent`: every rank calls it, with
/// nullptr for a tensor it does not hold. See the header's comment.
template <Communicator Parent, class X, class Y>
void reshard(const Parent& parent, const X* x, Y* y, std::source_location loc = std::source_location::current()) {
  if constexpr (detail::reshard_ok<Parent, X, Y>()) {
    using T = typename X::value_type;
    constexpr std::size_t R = X::rank;
    detail::Signature sig = detail::make_signature<T>(detail::Op::reshard, {}, -1, -1, loc);
    sig.tensor_rank = R;
    std::string err;
    detail::ReshardDesc d;
    d.rank = R;
    // A block's box (a Zigzag block's spans its two chunks: off is the first's, and the split says where
    // the second starts).
    auto box = [](const auto& t, detail::RBox& b, std::uint64_t& split, std::uint64_t& first, std::uint64_t& second) {
      const auto o = t.local_offsets(), c = t.local_extents();
      for (std::size_t k = 0; k < R; ++k) b.off[k] = o[k], b.cnt[k] = c[k];
      if (const Split sp = t.block_split(); sp.dim != Split::none) split = sp.dim, first = sp.first, second = sp.second;
    };
    auto group_size = [](const auto& t) {
      using G = typename std::remove_cvref_t<decltype(t)>::communicator_type;
      return std::uint64_t(detail::group_traits<G>::world(t.communicator()).size());
    };
    if (x) {
      d.has_x = 1;
      d.x_group = group_size(*x);
      for (std::size_t k = 0; k < R; ++k) d.extents[k] = x->global_extents()[k];
      box(*x, d.x, d.x_split, d.x_first, d.x_second);
    }
    if (y) {
      d.has_y = 1;
      d.y_group = group_size(*y);
      for (std::size_t k = 0; k < R; ++k) d.extents[k] = y->global_extents()[k];
      box(*y, d.y, d.y_split, d.y_first, d.y_second);
    }
    const void* xp = x ? static_cast<const void*>(x->unchecked_local().data()) : nullptr;
    void* yp = y ? static_cast<void*>(y->unchecked_local().data()) : nullptr;
    if (x && y) {
      bool same = true;
      for (std::size_t k = 0; k < R; ++k) same = same && x->global_extents()[k] == y->global_extents()[k];
      const auto xb = static_cast<const unsigned char*>(xp), yb = static_cast<const unsigned char*>(yp);
      const std::size_t xn = x->unchecked_local().span() * sizeof(T), yn = y->unchecked_local().span() * sizeof(T);
      if (!same) {
        err = "dsp::reshard (rank " + std::to_string(parent.rank()) + "): x and y have different global extents: x " +
              detail::text(std::span<const std::size_t>(x->global_extents())) + ", y " +
              detail::text(std::span<const std::size_t>(y->global_extents()));
        sig.status = static_cast<std::uint32_t>(detail::Status::bad_output);
      } else if (xn && yn && xb < yb + yn && yb < xb + xn) {
        err = "dsp::reshard (rank " + std::to_string(parent.rank()) + "): y's block overlaps x's";
        sig.status = static_cast<std::uint32_t>(detail::Status::bad_output);
      }
    }
    detail::PortOf<Parent> port(parent);
    detail::run_reshard<typename Parent::memory_space>(port, sig, std::move(err), d, xp, yp, sizeof(T));
  }
}

}  // namespace dsp
