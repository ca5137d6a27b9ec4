// SPDX-License-Identifier: BSD-3-Clause
// dynamic_switch against the serial reference, for every pair of dims of
// tensors of rank 1 to 6, on random shapes (divisible and not, smaller than
// the rank count, zero); allocating and into an existing output; round trips.
#include "helpers.hpp"

#include <doctest/doctest.h>

using namespace dsp_test;

namespace {

template <std::size_t R, std::size_t I, std::size_t J>
void check_switch(const std::array<std::size_t, R>& g) {
  using T = std::int64_t;
  using X = dsp::DistTensor<T, R, dsp::Sharded<I>, dsp::MpiCommunicator>;
  using Y = dsp::DistTensor<T, R, dsp::Sharded<J>, dsp::MpiCommunicator>;
  CAPTURE(R);
  CAPTURE(I);
  CAPTURE(J);
  INFO("global extents ", dsp::detail::text(g));
  X x{world(), g};
  fill(x);
  Y y = dsp::dynamic_switch<J>(x);
  static_assert(std::is_same_v<typename Y::layout_type, dsp::Sharded<J>>);
  CHECK(y.global_extents() == g);
  CHECK(y.local_extents() == dsp::detail::local_extents<dsp::Sharded<J>>(g, world().rank(), world().size()));
  CHECK(count_wrong(y) == 0);
  CHECK(count_wrong(x) == 0);  // the input is untouched

  Y into{world(), g};
  for (int warm = 0; warm < 2; ++warm) {
    dsp::dynamic_switch<J>(x, into);
    CHECK(count_wrong(into) == 0);
  }
  X back = dsp::dynamic_switch<I>(y);  // switch i -> j -> i is the identity
  CHECK(count_wrong(back) == 0);
}

template <std::size_t R, std::size_t I, std::size_t... J>
void from_dim(const std::array<std::size_t, R>& g, std::index_sequence<J...>) {
  (check_switch<R, I, J>(g), ...);
}

template <std::size_t R, std::size_t... I>
void all_pairs(const std::array<std::size_t, R>& g, std::index_sequence<I...>) {
  (from_dim<R, I>(g, std::make_index_sequence<R>{}), ...);
}

template <std::size_t R>
void all_pairs(const std::array<std::size_t, R>& g) {
  all_pairs<R>(g, std::make_index_sequence<R>{});
}

template <std::size_t R>
void random_trials(unsigned seed, int trials) {
  std::mt19937 rng(seed);
  for (int t = 0; t < trials; ++t) all_pairs<R>(random_extents<R>(rng));
}

}  // namespace

TEST_CASE("dynamic_switch, rank 1 (identity only)") { random_trials<1>(11, 4); }
TEST_CASE("dynamic_switch, rank 2, every pair of dims") { random_trials<2>(12, 12); }
TEST_CASE("dynamic_switch, rank 3, every pair of dims") { random_trials<3>(13, 8); }
TEST_CASE("dynamic_switch, rank 4, every pair of dims") { random_trials<4>(14, 5); }
TEST_CASE("dynamic_switch, rank 5, every pair of dims") { random_trials<5>(15, 3); }
TEST_CASE("dynamic_switch, rank 6, every pair of dims") { random_trials<6>(16, 2); }

TEST_CASE("dynamic_switch: extents smaller than the rank count, and zero") {
  all_pairs<3>({1, 2, 3});
  all_pairs<3>({0, 5, 2});
  all_pairs<3>({4, 0, 0});
  all_pairs<2>({1, 1});
}

TEST_CASE("dynamic_switch: the paper's shape family [B, T, S, C], T -> S and back") {
  const std::size_t n = static_cast<std::size_t>(world().size());
  all_pairs<4>({2, 4 * n + 1, 3 * n, 5});
}
