// SPDX-License-Identifier: BSD-3-Clause
// The one-rank communicator: the whole pipeline without MPI.
#include <dsp/dsp.hpp>

#include <doctest/doctest.h>

// Host memory in every build: these checks read the blocks on the host, and a
// CUDA build's default SelfCommunicator holds device memory.
using HostSelf = dsp::BasicSelfCommunicator<Kokkos::HostSpace>;

TEST_CASE("SelfCommunicator runs split, switch and gather as local copies") {
  HostSelf self;
  using R = dsp::DistTensor<int, 3, dsp::Replicated, HostSelf>;
  R r{self, {3, 4, 5}};
  for (std::size_t k = 0; k < r.local_size(); ++k) r.local().data()[k] = int(k) * 3 + 1;
  auto a = dsp::split<0>(r);
  auto b = dsp::dynamic_switch<2>(a);
  auto c = dsp::dynamic_switch<1>(b);
  dsp::DistTensor<int, 3, dsp::Sharded<0>, HostSelf> d{self, {3, 4, 5}};
  dsp::dynamic_switch<0>(c, d);
  auto e = dsp::gather(d);
  for (std::size_t k = 0; k < r.local_size(); ++k) {
    CHECK(b.local().data()[k] == int(k) * 3 + 1);
    CHECK(e.local().data()[k] == int(k) * 3 + 1);
  }
  CHECK(b.local_extents() == std::array<std::size_t, 3>{3, 4, 5});
}

TEST_CASE("SelfCommunicator: distribute is a copy") {
  HostSelf self;
  Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace> v("v", 2, 3);
  v(1, 2) = 4.5;
  auto t = dsp::distribute<dsp::Sharded<1>>(self, v);
  CHECK(t.local()(1, 2) == 4.5);
}
