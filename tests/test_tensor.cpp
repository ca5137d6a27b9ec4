// SPDX-License-Identifier: BSD-3-Clause
// DistTensor: extents, offsets, local blocks per the partition rule, shallow copies.
#include "helpers.hpp"

#include <doctest/doctest.h>

using namespace dsp_test;

TEST_CASE("local extents and offsets follow the partition rule") {
  const std::size_t n = std::size_t(world().size()), p = std::size_t(world().rank());
  for (std::size_t e : {std::size_t(0), std::size_t(1), n - 1, n, n + 1, 3 * n + 2}) {
    dsp::DistTensor<double, 3, dsp::Sharded<1>, dsp::MpiCommunicator> x{world(), {2, e, 3}};
    const dsp::Partition part{e, n};
    CHECK(x.global_extents() == std::array<std::size_t, 3>{2, e, 3});
    CHECK(x.local_extents() == std::array<std::size_t, 3>{2, part.count(p), 3});
    CHECK(x.local_offsets() == std::array<std::size_t, 3>{0, part.offset(p), 0});
    CHECK(x.local().extent(1) == part.count(p));
    CHECK(x.local_size() == 6 * part.count(p));
    CHECK(x.global_size() == 6 * e);
    CHECK(x.local().span_is_contiguous());
  }
}

TEST_CASE("a replicated tensor holds everything on every rank") {
  dsp::DistTensor<int, 2, dsp::Replicated, dsp::MpiCommunicator> r{world(), {4, 5}};
  CHECK(r.local_extents() == std::array<std::size_t, 2>{4, 5});
  CHECK(r.local_offsets() == std::array<std::size_t, 2>{0, 0});
  static_assert(std::is_same_v<decltype(r)::layout_type, dsp::Replicated>);
}

TEST_CASE("extents from any integer type, or a std::array") {
  int t = 3;
  long s = 4;
  unsigned c = 5;
  dsp::DistTensor<float, 3, dsp::Sharded<0>, dsp::MpiCommunicator> x{world(), {t, s, c}};
  CHECK(x.global_extents() == std::array<std::size_t, 3>{3, 4, 5});
  std::array<std::size_t, 3> a{6, 7, 8};
  dsp::DistTensor<float, 3, dsp::Sharded<0>, dsp::MpiCommunicator> y{world(), a};
  CHECK(y.global_extents() == a);
}

TEST_CASE("a new tensor is zero-initialized; copies share the block") {
  dsp::DistTensor<double, 2, dsp::Sharded<0>, dsp::MpiCommunicator> x{world(), {9, 3}};
  for (std::size_t k = 0; k < x.local_size(); ++k) CHECK(x.local().data()[k] == 0.0);
  auto y = x;
  CHECK(y.local().data() == x.local().data());
}

TEST_CASE("switch outputs never alias their inputs, the identity switch included") {
  dsp::DistTensor<double, 2, dsp::Sharded<0>, dsp::MpiCommunicator> x{world(), {9, 3}};
  fill(x);
  auto same = dsp::dynamic_switch<0>(x);
  CHECK(count_wrong(same) == 0);
  if (x.local_size() > 0) CHECK(same.local().data() != x.local().data());
}
