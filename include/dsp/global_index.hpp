// SPDX-License-Identifier: BSD-3-Clause
// dsp: filling, visiting and checking a tensor's block by global index.
#pragma once

#include <dsp/tensor.hpp>

#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>
#include <type_traits>

namespace dsp {
namespace detail {

/// Calls f(k, g) for every element of x's block, in row-major order: k its
/// linear offset in the block, g its global multi-index (where the block
/// holds two ranges of a dim, Zigzag's: block_split(), each in turn).
template <class X, class F>
void for_each_global_index(const X& x, F&& f) {
  using Xt = std::remove_cvref_t<X>;
  constexpr std::size_t R = Xt::rank;
  const auto lo = x.local_offsets();
  const auto le = x.local_extents();
  std::size_t total = 1;
  for (std::size_t d = 0; d < R; ++d) total *= le[d];
  std::array<std::size_t, R> l{}, g{};  // local and global multi-index
  for (std::size_t d = 0; d < R; ++d) g[d] = lo[d];
  const Split split = x.block_split();
  for (std::size_t k = 0; k < total; ++k) {
    f(k, static_cast<const std::array<std::size_t, R>&>(g));
    for (std::size_t d = R; d-- > 0;) {  // the next index, the last dim fastest
      ++g[d];
      if (++l[d] < le[d]) {
        if (d == split.dim && l[d] == split.first) g[d] = split.second;  // the second range
        break;
      }
      l[d] = 0;
      g[d] = lo[d];
    }
  }
}

}  // namespace detail

/// Writes f(g) into every element of x's block, g its global multi-index
/// (std::array<std::size_t, Rank>), so that any layout, mesh and rank count
/// holds the same global tensor. Local, no communication; f runs on the host
/// (a block in device memory is filled through a host copy, then copied
/// over). Under a Partial placement the block is this rank's term.
template <class X, class F>
void fill(const X& x, F&& f) {
  static_assert(is_dist_tensor_v<X>, "dsp::fill: the argument must be a dsp::DistTensor");
  using T = typename std::remove_cvref_t<X>::value_type;
  const auto& block = x.local();
  auto host = Kokkos::create_mirror_view(block);  // the block itself where the host can reach it
  T* p = host.data();
  detail::for_each_global_index(x, [&](std::size_t k, const auto& g) { p[k] = static_cast<T>(f(g)); });
  if (host.data() != block.data()) Kokkos::deep_copy(block, host);
}

/// Calls f(g, value) for every element of x's block (g its global
/// multi-index, value a const reference), in row-major order. Local; f runs
/// on the host (a block in device memory is read through a host copy).
template <class X, class F>
void for_each(const X& x, F&& f) {
  static_assert(is_dist_tensor_v<X>, "dsp::for_each: the argument must be a dsp::DistTensor");
  Kokkos::fence();  // stream-ordered backends may still be writing the block
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, x.local());
  const auto* p = host.data();
  detail::for_each_global_index(x, [&](std::size_t k, const auto& g) { f(g, p[k]); });
}

/// The number of elements of x's block that differ from f(g) (compared with
/// ==, f's result converted to the element type first). Local: add the
/// ranks' counts for the whole tensor (MPI_Allreduce).
template <class X, class F>
std::size_t count_mismatches(const X& x, F&& f) {
  static_assert(is_dist_tensor_v<X>, "dsp::count_mismatches: the argument must be a dsp::DistTensor");
  using T = typename std::remove_cvref_t<X>::value_type;
  std::size_t wrong = 0;
  for_each(x, [&](const auto& g, const T& v) { wrong += !(v == static_cast<T>(f(g))); });
  return wrong;
}

}  // namespace dsp
