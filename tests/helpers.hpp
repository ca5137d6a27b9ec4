// SPDX-License-Identifier: BSD-3-Clause
// Test helpers: deterministic random shapes (identical on every rank) and
// fill / verify by global index, so any rank can check any block against the
// serial reference "element at global index g has value f(g)".
#pragma once

#include <dsp/mpi.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace dsp_test {

/// The tests' communicator over MPI_COMM_WORLD. It may outlive MPI_Finalize:
/// dsp releases its MPI objects when MPI_Finalize starts.
inline dsp::MpiCommunicator& world() {
  static dsp::MpiCommunicator c{MPI_COMM_WORLD};
  return c;
}

/// The sum and the largest of v over the world's ranks.
inline std::size_t sum_all(std::size_t v) {
  unsigned long long x = v, s = 0;
  MPI_Allreduce(&x, &s, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return std::size_t(s);
}
inline std::size_t max_all(std::size_t v) {
  unsigned long long x = v, s = 0;
  MPI_Allreduce(&x, &s, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return std::size_t(s);
}

/// Every 2-axis mesh shape of n ranks: {d, n / d} for each divisor d.
inline std::vector<std::array<int, 2>> shapes2(int n) {
  std::vector<std::array<int, 2>> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back({d, n / d});
  return out;
}

/// Value stored at linear global index g (exact in every tested type).
template <class T>
T value_at(std::size_t g) {
  if constexpr (std::is_same_v<T, Kokkos::complex<double>>) return T(double(g), -double(g) * 0.5);
  else return static_cast<T>(g % (std::size_t(1) << 20)) + static_cast<T>(1);
}

template <std::size_t R>
std::size_t linear(const std::array<std::size_t, R>& idx, const std::array<std::size_t, R>& ext) {
  std::size_t g = 0;
  for (std::size_t d = 0; d < R; ++d) g = g * ext[d] + idx[d];
  return g;
}

/// Calls f(local multi-index, global multi-index, linear local offset) for every local element.
template <class X, class F>
void for_each_local(const X& x, F&& f) {
  constexpr std::size_t R = std::remove_cvref_t<X>::rank;
  const auto le = x.local_extents();
  const auto lo = x.local_offsets();
  std::size_t total = 1;
  for (auto e : le) total *= e;
  std::array<std::size_t, R> idx{};
  for (std::size_t k = 0; k < total; ++k) {
    std::size_t rem = k;
    for (std::size_t d = R; d-- > 0;) {
      idx[d] = rem % le[d];
      rem /= le[d];
    }
    std::array<std::size_t, R> g{};
    for (std::size_t d = 0; d < R; ++d) g[d] = idx[d] + lo[d];
    f(idx, g, k);
  }
}

template <class X>
void fill(const X& x) {
  auto* p = x.local().data();
  using T = typename std::remove_cvref_t<X>::value_type;
  for_each_local(x, [&](auto&, auto& g, std::size_t k) { p[k] = value_at<T>(linear(g, x.global_extents())); });
}

/// Number of local elements that differ from the reference.
template <class X>
std::size_t count_wrong(const X& x) {
  const auto* p = x.local().data();
  using T = typename std::remove_cvref_t<X>::value_type;
  std::size_t wrong = 0;
  for_each_local(x, [&](auto&, auto& g, std::size_t k) {
    if (!(p[k] == value_at<T>(linear(g, x.global_extents())))) ++wrong;
  });
  return wrong;
}

/// Random extents, identical on every rank: 0, values below the rank count,
/// and values divisible or not by it.
template <std::size_t R>
std::array<std::size_t, R> random_extents(std::mt19937& rng) {
  static constexpr std::size_t pool[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13};
  std::array<std::size_t, R> e{};
  for (auto& x : e) x = pool[rng() % std::size(pool)];
  if (rng() % 4 != 0)  // most shapes non-empty, so data really moves
    for (auto& x : e)
      if (x == 0) x = 1 + rng() % 5;
  return e;
}

/// The message of the dsp::Error that f() raises ("" when it raises none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const dsp::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace dsp_test
