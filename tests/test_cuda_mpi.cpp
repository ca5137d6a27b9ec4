// SPDX-License-Identifier: BSD-3-Clause
// Device tensors over MPI (CUDA builds only; the ranks may share one GPU):
// StagedCommunicator<MpiCommunicator, Kokkos::CudaSpace> with every primitive,
// every switch algorithm and pipelines, and the one-rank communicator in
// CudaSpace, and every modifier of the operation (tests/device_modifiers.hpp).
// This is where the device copy kernel (one launch for all peers)
// runs with several peers. Without a driver or a GPU, dsp_cuda_launcher
// reports the test skipped; the build still compiles every path.
#include "device_check.hpp"
#include "device_modifiers.hpp"
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <dsp/pipeline.hpp>

#include <cstdint>

using Staged = dsp::StagedCommunicator<dsp::MpiCommunicator, Kokkos::CudaSpace>;
static_assert(dsp::Communicator<Staged>);
static_assert(dsp::PeerExchange<Staged> && dsp::TypedExchange<Staged>);
static_assert(!dsp::StreamOrdered<Staged>);

using dsp::Replicated;
using dsp::Sharded;
using dsp_device_test::count_wrong;
using dsp_device_test::fill;

TEST_CASE("StagedCommunicator in CudaSpace: every primitive and every switch algorithm") {
  Staged c{dsp_test::world()};
  const std::size_t n = std::size_t(c.size());
  const std::array<std::size_t, 3> e{2 * n + 1, 3 * n, 5};
  Kokkos::View<double***, Kokkos::LayoutRight, Kokkos::CudaSpace> whole("whole", e[0], e[1], e[2]);
  {
    auto h = Kokkos::create_mirror_view(whole);
    for (std::size_t k = 0; k < h.size(); ++k) h.data()[k] = dsp_device_test::value_at<double>(k);
    Kokkos::deep_copy(whole, h);
  }
  auto r = dsp::distribute<Replicated>(c, whole, 0);
  auto s1 = dsp::distribute<Sharded<1>>(c, whole, c.size() - 1);
  CHECK(count_wrong(r) == 0);
  CHECK(count_wrong(s1) == 0);
  auto s0 = dsp::split<0>(r);
  CHECK(count_wrong(s0) == 0);
  using A = dsp::SwitchAlgorithm;
  const auto saved = dsp::switch_algorithm();
  for (A a : {A::automatic, A::alltoall, A::alltoallv, A::pairwise, A::datatypes}) {
    dsp::set_switch_algorithm(a);
    dsp::DistTensor<double, 3, Sharded<2>, Staged> s2{c, e};
    fill(s2);  // overwritten everywhere
    dsp::dynamic_switch<2>(s0, s2);
    CHECK(count_wrong(s2) == 0);
    CHECK(count_wrong(dsp::dynamic_switch<1>(s2)) == 0);
    CHECK(count_wrong(dsp::dynamic_switch<0>(s1)) == 0);
  }
  dsp::set_switch_algorithm(saved);
  dsp::DistTensor<double, 3, Replicated, Staged> g{c, e};
  dsp::gather(s1, g);
  CHECK(count_wrong(g) == 0);
  CHECK(count_wrong(dsp::gather(s0)) == 0);
}

TEST_CASE("StagedCommunicator in CudaSpace: pipelines, 1-byte elements, and a warm switch uploads no task table") {
  Staged c{dsp_test::world()};
  const std::size_t n = std::size_t(c.size());
  namespace st = dsp::steps;
  dsp::DistTensor<std::int8_t, 4, Replicated, Staged> x{c, {2, n + 3, 2 * n + 1, 6}};
  fill(x);
  constexpr auto p = st::split<1> | st::switch_to<2> | st::switch_to<0>;
  auto y = p(x);
  CHECK(count_wrong(y) == 0);
  CHECK(count_wrong(p.adjoint()(y)) == 0);

  dsp::DistTensor<float, 3, Sharded<0>, Staged> a{c, {4 * n, 3 * n + 1, 7}};
  dsp::DistTensor<float, 3, Sharded<1>, Staged> b{c, {4 * n, 3 * n + 1, 7}};
  fill(a);
  dsp::dynamic_switch<1>(a, b);
  auto& tables = dsp::detail::task_table_cache<Kokkos::CudaSpace>();
  const std::size_t uploads = tables.uploads();
  dsp::dynamic_switch<1>(a, b);
  CHECK(tables.uploads() == uploads);
  CHECK(count_wrong(b) == 0);
}

TEST_CASE("the one-rank communicator in CudaSpace (each rank on its own)") {
  using Self = dsp::BasicSelfCommunicator<Kokkos::CudaSpace>;
  Self self;
  dsp::DistTensor<std::int32_t, 3, Replicated, Self> r{self, {3, 4, 5}};
  fill(r);
  namespace st = dsp::steps;
  auto out = (st::split<0> | st::switch_to<2> | st::switch_to<1> | st::gather)(r);
  CHECK(count_wrong(out) == 0);
}

TEST_CASE("StagedCommunicator in CudaSpace: batches, bf16 wire, Partial, split-phase, on every 2-axis mesh") {
  Staged c{dsp_test::world()};
  dsp_device_test::every_modifier_everywhere(c);
}
