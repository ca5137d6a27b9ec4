// SPDX-License-Identifier: BSD-3-Clause
// StagedCommunicator: every primitive through host staging buffers, checked
// against the reference. Here the "device" space is HostSpace, so the staging
// logic (ranges, untouched bytes, buffer reuse) is exercised without a GPU.
#include "helpers.hpp"

#include <doctest/doctest.h>

using namespace dsp_test;
using Staged = dsp::StagedCommunicator<dsp::MpiCommunicator, Kokkos::HostSpace>;
static_assert(dsp::Communicator<Staged>);

TEST_CASE("split, switch and gather through a host-staged communicator") {
  Staged c{world()};
  const std::size_t n = std::size_t(c.size());
  dsp::DistTensor<double, 3, dsp::Replicated, Staged> r{c, {2 * n + 1, 3, n + 2}};
  fill(r);
  auto x = dsp::split<0>(r);
  auto y = dsp::dynamic_switch<2>(x);
  CHECK(count_wrong(y) == 0);
  auto z = dsp::dynamic_switch<1>(y);
  CHECK(count_wrong(z) == 0);
  auto g = dsp::gather(z);
  CHECK(count_wrong(g) == 0);
  const std::size_t held = c.staging_bytes();
  dsp::dynamic_switch<2>(x, y);  // warm: the staging buffers do not grow
  CHECK(c.staging_bytes() == held);
  CHECK(count_wrong(y) == 0);
}

TEST_CASE("distribute and disagreement checks work through staging") {
  Staged c{world()};
  Kokkos::View<int**, Kokkos::LayoutRight, Kokkos::HostSpace> v("v", 5, 3);
  for (std::size_t k = 0; k < v.size(); ++k) v.data()[k] = dsp_test::value_at<int>(k);
  auto t = dsp::distribute<dsp::Sharded<0>>(c, v, 0);
  CHECK(count_wrong(t) == 0);
  auto b = dsp::distribute<dsp::Replicated>(c, v, c.size() - 1);
  CHECK(count_wrong(b) == 0);
  if (c.size() > 1) {
    dsp::DistTensor<float, 2, dsp::Sharded<0>, Staged> x{c, {4 + std::size_t(c.rank()), 2}};
    CHECK_THROWS_AS(dsp::dynamic_switch<1>(x), dsp::MismatchError);
  }
}

// Staging keeps the inner communicator's point-to-point and typed exchanges
// (the pairwise and datatypes switches, the point-to-point gather).
static_assert(dsp::PeerExchange<Staged> && dsp::TypedExchange<Staged> && dsp::Splittable<Staged>);

TEST_CASE("every switch algorithm and the point-to-point gather through staging") {
  Staged c{world()};
  const std::size_t n = std::size_t(c.size());
  using A = dsp::SwitchAlgorithm;
  const auto saved = dsp::switch_algorithm();
  for (A a : {A::alltoall, A::alltoallv, A::pairwise, A::datatypes}) {
    dsp::set_switch_algorithm(a);
    dsp::DistTensor<std::int32_t, 3, dsp::Sharded<0>, Staged> x{c, {2 * n + 1, 3 * n, 5}};
    fill(x);
    dsp::DistTensor<std::int32_t, 3, dsp::Sharded<2>, Staged> y{c, {2 * n + 1, 3 * n, 5}};
    fill(y);  // overwritten everywhere: bytes no peer writes must not keep stale values
    dsp::dynamic_switch<2>(x, y);
    CHECK(count_wrong(y) == 0);
    CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
  }
  dsp::set_switch_algorithm(saved);
  dsp::DistTensor<std::int32_t, 3, dsp::Sharded<1>, Staged> x{c, {3, 4 * n + 1, 8192}};  // 32 KiB+ runs
  fill(x);
  CHECK(count_wrong(dsp::gather(x)) == 0);
}

TEST_CASE("a staged communicator shares its inner communicator's dsp state") {
  // Regression: it had its own, so a timeout marked only the inner one
  // unusable, and concurrent use of the two went unnoticed.
  Staged c{world()};
  CHECK(c.id() == world().id());
  CHECK(&c.resources() == &world().resources());
  REQUIRE(world().resources().try_acquire());
  dsp::DistTensor<float, 2, dsp::Sharded<0>, Staged> x{c, {6, 4}};
  bool busy = false;
  try {
    dsp::dynamic_switch<1>(x);
  } catch (const dsp::UsageError&) {
    busy = true;
  }
  world().resources().release();
  CHECK(busy);
}
