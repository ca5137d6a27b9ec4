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

// dsp::fill, dsp::for_each and dsp::count_mismatches: by global index, on any
// layout of a plain communicator and of every 2-axis mesh, empty blocks included.
namespace {
double at(const std::array<std::size_t, 3>& g) { return double(g[0] * 10000 + g[1] * 100 + g[2]); }

template <class X>
void check_global_index_helpers(const X& x) {
  dsp::fill(x, at);
  // the block against the partition's own arithmetic (local_offsets), element by element
  const auto lo = x.local_offsets(), le = x.local_extents();
  const double* p = x.local().data();
  std::size_t wrong = 0, k = 0;
  for (std::size_t i = 0; i < le[0]; ++i)
    for (std::size_t j = 0; j < le[1]; ++j)
      for (std::size_t l = 0; l < le[2]; ++l, ++k) wrong += p[k] != at({lo[0] + i, lo[1] + j, lo[2] + l});
  CHECK(wrong == 0);
  // for_each: every element once, in row-major order, inside the block
  std::size_t visits = 0, out_of_order = 0;
  dsp::for_each(x, [&](const std::array<std::size_t, 3>& g, double v) {
    for (std::size_t d = 0; d < 3; ++d) out_of_order += g[d] < lo[d] || g[d] >= lo[d] + le[d];
    out_of_order += v != p[visits];
    ++visits;
  });
  CHECK(visits == x.local_size());
  CHECK(out_of_order == 0);
  CHECK(dsp::count_mismatches(x, at) == 0);
  if (x.local_size() > 0) {  // one element changed: counted once, on this rank only
    x.local().data()[x.local_size() - 1] += 1;
    CHECK(dsp::count_mismatches(x, at) == 1);
    x.local().data()[x.local_size() - 1] -= 1;
  }
}
}  // namespace

TEST_CASE("fill, for_each and count_mismatches by global index, on a communicator and on meshes") {
  const std::size_t n = std::size_t(world().size());
  for (std::size_t e : {std::size_t(0), std::size_t(1), n + 1, 2 * n + 3}) {
    const std::array<std::size_t, 3> ext{e, 3, n + 2};
    check_global_index_helpers(dsp::DistTensor<double, 3, dsp::Sharded<0>, dsp::MpiCommunicator>{world(), ext});
    check_global_index_helpers(dsp::DistTensor<double, 3, dsp::Sharded<2>, dsp::MpiCommunicator>{world(), ext});
    check_global_index_helpers(dsp::DistTensor<double, 3, dsp::Replicated, dsp::MpiCommunicator>{world(), ext});
    // the same global tensor in another layout: a switch keeps the global indices
    dsp::DistTensor<double, 3, dsp::Sharded<2>, dsp::MpiCommunicator> x{world(), ext};
    dsp::fill(x, at);
    CHECK(dsp::count_mismatches(dsp::dynamic_switch<0>(x), at) == 0);
    for (int d = 1; d <= world().size(); ++d) {
      if (world().size() % d != 0) continue;
      using M = dsp::Mesh<2, dsp::MpiCommunicator>;
      M mesh{world(), {d, world().size() / d}};
      using From = dsp::Axes<dsp::Sharded<0>, dsp::Sharded<2>>;
      dsp::DistTensor<double, 3, From, M> y{mesh, ext};
      check_global_index_helpers(y);
      dsp::fill(y, at);
      CHECK(dsp::count_mismatches(dsp::redistribute<dsp::Axes<dsp::Replicated, dsp::Sharded<1>>>(y), at) == 0);
    }
  }
}
