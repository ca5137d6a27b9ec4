// SPDX-License-Identifier: BSD-3-Clause
// Fill and check DistTensors whose blocks live in device memory (CUDA builds:
// test_nccl, test_cuda_mpi), through host mirrors: the element at global index
// g holds value_at<T>(g), so any rank can check any block.
#pragma once

#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>
#include <type_traits>

namespace dsp_device_test {

/// Value stored at linear global index g (exact in every tested type).
template <class T>
T value_at(std::size_t g) {
  if constexpr (sizeof(T) == 1) return static_cast<T>((g * 7 + 1) % 127);
  else return static_cast<T>(g % (std::size_t(1) << 20) + 1);
}

/// Calls f(linear local offset, linear global index) for every local element.
template <class X, class F>
void for_each_local(const X& x, F&& f) {
  constexpr std::size_t R = std::remove_cvref_t<X>::rank;
  const auto le = x.local_extents(), lo = x.local_offsets(), ge = x.global_extents();
  std::size_t total = 1;
  for (auto e : le) total *= e;
  for (std::size_t k = 0; k < total; ++k) {
    std::size_t rem = k, g = 0, scale = 1;
    for (std::size_t d = R; d-- > 0;) {
      g += (rem % le[d] + lo[d]) * scale;
      scale *= ge[d];
      rem /= le[d];
    }
    f(k, g);
  }
}

/// Writes the reference values into x's block (wherever it lives).
template <class X>
void fill(const X& x) {
  using T = typename std::remove_cvref_t<X>::value_type;
  auto h = Kokkos::create_mirror_view(x.local());
  for_each_local(x, [&](std::size_t k, std::size_t g) { h.data()[k] = value_at<T>(g); });
  Kokkos::deep_copy(x.local(), h);
}

/// Number of elements of x's block that differ from the reference.
template <class X>
std::size_t count_wrong(const X& x) {
  using T = typename std::remove_cvref_t<X>::value_type;
  Kokkos::fence();  // stream-ordered backends return before the data is there
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, x.local());
  std::size_t wrong = 0;
  for_each_local(x, [&](std::size_t k, std::size_t g) { wrong += !(h.data()[k] == value_at<T>(g)); });
  return wrong;
}

}  // namespace dsp_device_test
