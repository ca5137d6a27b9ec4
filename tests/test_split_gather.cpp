// SPDX-License-Identifier: BSD-3-Clause
// split and gather against the serial reference for tensors of rank 1 to 6,
// every dim, random shapes; split -> gather is the identity.
#include "helpers.hpp"

#include <doctest/doctest.h>

using namespace dsp_test;

namespace {

template <std::size_t R, std::size_t D>
void check_split_gather(const std::array<std::size_t, R>& g) {
  using T = std::int64_t;
  using Rep = dsp::DistTensor<T, R, dsp::Replicated, dsp::MpiCommunicator>;
  using Sh = dsp::DistTensor<T, R, dsp::Sharded<D>, dsp::MpiCommunicator>;
  CAPTURE(R);
  CAPTURE(D);
  INFO("global extents ", dsp::detail::text(g));
  Rep r{world(), g};
  fill(r);
  CHECK(r.local_extents() == g);

  Sh s = dsp::split<D>(r);
  CHECK(count_wrong(s) == 0);
  CHECK(count_wrong(r) == 0);
  Sh s2{world(), g};
  dsp::split<D>(r, s2);
  CHECK(count_wrong(s2) == 0);

  Rep back = dsp::gather(s);  // split -> gather is the identity
  CHECK(back.global_extents() == g);
  CHECK(count_wrong(back) == 0);
  CHECK(count_wrong(s) == 0);
  Rep into{world(), g};
  for (int warm = 0; warm < 2; ++warm) {
    dsp::gather(s, into);
    CHECK(count_wrong(into) == 0);
  }
}

template <std::size_t R>
void all_dims(const std::array<std::size_t, R>& g) {
  [&]<std::size_t... D>(std::index_sequence<D...>) { (check_split_gather<R, D>(g), ...); }
  (std::make_index_sequence<R>{});
}

template <std::size_t R>
void random_trials(unsigned seed, int trials) {
  std::mt19937 rng(seed);
  for (int t = 0; t < trials; ++t) all_dims<R>(random_extents<R>(rng));
}

}  // namespace

TEST_CASE("split and gather, rank 1") { random_trials<1>(21, 8); }
TEST_CASE("split and gather, rank 2") { random_trials<2>(22, 8); }
TEST_CASE("split and gather, rank 3") { random_trials<3>(23, 6); }
TEST_CASE("split and gather, rank 4") { random_trials<4>(24, 4); }
TEST_CASE("split and gather, rank 5") { random_trials<5>(25, 3); }
TEST_CASE("split and gather, rank 6") { random_trials<6>(26, 2); }

TEST_CASE("split and gather: extents smaller than the rank count, and zero") {
  all_dims<3>({1, 3, 2});
  all_dims<3>({0, 4, 4});
  all_dims<1>({0});
  all_dims<1>({1});
}

TEST_CASE("the paper's pipeline: split, switch, switch, gather") {
  const std::size_t n = static_cast<std::size_t>(world().size());
  using T = float;
  dsp::DistTensor<T, 4, dsp::Replicated, dsp::MpiCommunicator> r{world(), {2, 3 * n + 1, 2 * n + 3, 4}};
  fill(r);
  auto a = dsp::split<1>(r);
  auto b = dsp::dynamic_switch<2>(a);
  auto c = dsp::dynamic_switch<1>(b);
  auto d = dsp::gather(c);
  CHECK(count_wrong(a) == 0);
  CHECK(count_wrong(b) == 0);
  CHECK(count_wrong(c) == 0);
  CHECK(count_wrong(d) == 0);
}
