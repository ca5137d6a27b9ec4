// SPDX-License-Identifier: BSD-3-Clause
// The operation's modifiers on device tensors (CUDA builds: test_nccl on one
// GPU, test_cuda_mpi at several ranks sharing one): batches of mixed element
// types (allocating and into outputs), a bf16 wire on one tensor and on a
// batch (within its documented bound), Partial placements (to-partial, then a
// reduce-scatter and an all-reduce), split-phase (start_redistribute, wait)
// and redistribute_each (every output element reported once), on the plain
// communicator and on every 2-axis mesh of its ranks. Inputs are checked
// unchanged after every call.
#pragma once

#include "device_check.hpp"

#include <dsp/batch.hpp>
#include <dsp/mesh.hpp>
#include <dsp/redistribute.hpp>
#include <dsp/wire.hpp>

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

namespace dsp_device_test {

/// Elements of x's block farther from the reference than the bf16 wire's bound
/// (|x' - x| <= 2^-8 |x|; every reference value is a normal float).
template <class X>
std::size_t count_beyond_bf16(const X& x) {
  Kokkos::fence();
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, x.local());
  std::size_t far = 0;
  for_each_local(x, [&](std::size_t k, std::size_t g) {
    const double ref = value_at<float>(g);
    far += !(std::fabs(double(h.data()[k]) - ref) <= std::ldexp(std::fabs(ref), -8));
  });
  return far;
}

/// Every modifier from placement From to To (and To back to From) on `where`
/// (a communicator or a mesh); From and To are what redistribute takes there.
template <class From, class To, class Partial, class Where>
void every_modifier(const Where& where, const std::array<std::size_t, 3>& e) {
  using F = dsp::DistTensor<float, 3, From, Where>;
  using D = dsp::DistTensor<double, 3, From, Where>;
  using B = dsp::DistTensor<std::int8_t, 3, From, Where>;
  F xf{where, e};
  D xd{where, e};
  B xb{where, e};
  fill(xf);
  fill(xd);
  fill(xb);
  const auto unchanged = [&] { return count_wrong(xf) + count_wrong(xd) + count_wrong(xb); };

  // a batch of three element types (12 + 8 + 1 bytes a triple: sections no size divides)
  auto [yf, yd, yb] = dsp::redistribute<To>(dsp::batch(xf, xd, xb));
  CHECK(count_wrong(yf) + count_wrong(yd) + count_wrong(yb) == 0);
  CHECK(unchanged() == 0);
  // back, into existing tensors
  F bf{where, e};
  D bd{where, e};
  B bb{where, e};
  dsp::redistribute<From>(dsp::batch(yf, yd, yb), dsp::batch(bf, bd, bb));
  CHECK(count_wrong(bf) + count_wrong(bd) + count_wrong(bb) == 0);

  // a bf16 wire: one tensor, and a batch of two
  auto wf = dsp::redistribute<To>(xf, dsp::Wire::bf16);
  CHECK(count_beyond_bf16(wf) == 0);
  F xf2{where, e};
  fill(xf2);
  auto [w1, w2] = dsp::redistribute<To>(dsp::batch(xf, xf2), dsp::Wire::bf16);
  CHECK(count_beyond_bf16(w1) + count_beyond_bf16(w2) == 0);
  CHECK(unchanged() == 0);

  // split-phase: the handle completes the output (over NCCL the work is queued at start)
  dsp::DistTensor<double, 3, To, Where> sd{where, e};
  auto h = dsp::start_redistribute<To>(xd, sd);
  h.wait();
  CHECK(count_wrong(sd) == 0);
  dsp::DistTensor<float, 3, To, Where> s1{where, e}, s2{where, e};
  dsp::start_redistribute<To>(dsp::batch(xf, xf2), dsp::batch(s1, s2), dsp::Wire::bf16).wait();
  CHECK(count_beyond_bf16(s1) + count_beyond_bf16(s2) == 0);

  // on arrival: every element of the output reported once, and right once all have landed
  dsp::DistTensor<std::int8_t, 3, To, Where> eb{where, e};
  std::size_t reported = 0;
  dsp::redistribute_each<To>(xb, eb, [&](const auto& block, const auto&, int) { reported += block.size(); });
  CHECK(reported == eb.local_size());
  CHECK(count_wrong(eb) == 0);
  CHECK(unchanged() == 0);

  // Partial: to-partial keeps the values at coordinate 0 (zeros elsewhere), then
  // a reduce-scatter and an all-reduce give them back exactly
  dsp::DistTensor<double, 3, Partial, Where> pd{where, e};
  auto p = dsp::redistribute<Partial>(xd);
  auto rs = dsp::redistribute<To>(p);
  CHECK(count_wrong(rs) == 0);
  dsp::redistribute<Partial>(xd, pd);
  auto ar = dsp::redistribute<From>(pd);
  CHECK(count_wrong(ar) == 0);
  CHECK(unchanged() == 0);
}

/// The modifiers on communicator c (From = Replicated so that a Partial step
/// exists) and on every 2-axis mesh of its ranks.
template <class Comm>
void every_modifier_everywhere(const Comm& c) {
  using dsp::Axes;
  using dsp::Replicated;
  using dsp::Sharded;
  const std::size_t n = std::size_t(c.size());
  const std::array<std::size_t, 3> e{2 * n + 1, 3 * n, 5};
  every_modifier<Replicated, Sharded<1>, dsp::Partial<>>(c, e);
  const std::array<std::size_t, 3> uneven{n + 1, 2 * n + 3, 7};  // uneven blocks, some empty on 3+ ranks
  every_modifier<Replicated, Sharded<2>, dsp::Partial<>>(c, {uneven[0], uneven[1], 1});
  for (int d = 1; d <= c.size(); ++d) {
    if (c.size() % d != 0) continue;
    dsp::Mesh<2, Comm> m{c, {d, c.size() / d}};
    every_modifier<Axes<Replicated, Sharded<2>>, Axes<Sharded<1>, Sharded<2>>, Axes<dsp::Partial<>, Sharded<2>>>(
        m, uneven);
  }
}

}  // namespace dsp_device_test
