// SPDX-License-Identifier: BSD-3-Clause
// Sequence-parallel x data-parallel groups, and distribute (the paper's
// dsp_dataloader): every rank of a sequence-parallel group gets the same input.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace dsp_test;

namespace {
using View3 = Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::HostSpace>;

/// The global tensor of extents g, filled with the reference values.
View3 reference(const std::array<std::size_t, 3>& g) {
  View3 v("reference", g[0], g[1], g[2]);
  for (std::size_t k = 0; k < v.size(); ++k) v.data()[k] = value_at<float>(k);
  return v;
}
}  // namespace

TEST_CASE("make_parallel_groups splits the world into sequence and data groups") {
  const int n = world().size(), r = world().rank();
  for (int sp = 1; sp <= n; ++sp) {
    if (n % sp != 0) {
      CHECK_THROWS_AS(dsp::make_parallel_groups(world(), sp), dsp::InvalidArgument);
      continue;
    }
    auto groups = dsp::make_parallel_groups(world(), sp);
    CHECK(groups.sequence.size() == sp);
    CHECK(groups.data.size() == n / sp);
    CHECK(groups.sequence.rank() == r % sp);
    CHECK(groups.data.rank() == r / sp);
    CHECK(groups.sequence_group == r / sp);
    CHECK(groups.data_group == r % sp);
  }
  CHECK_THROWS_AS(dsp::make_parallel_groups(world(), 0), dsp::InvalidArgument);
}

TEST_CASE("make_parallel_groups: sizes that differ across ranks raise on every rank before any split") {
  // Regression: no cross-rank check; different sizes hung in MPI_Comm_split
  // or gave silently inconsistent groups.
  const int n = world().size();
  if (n == 1) return;
  const int sp = world().rank() == 0 ? 1 : n;  // both valid locally, but different
  std::string e;
  try {
    dsp::make_parallel_groups(world(), sp);
  } catch (const dsp::MismatchError& x) {
    e = x.what();
  }
  CHECK(e.find("sequence-parallel sizes disagree: rank 0 1, rank 1 " + std::to_string(n)) != std::string::npos);
  // an invalid size on one rank only: that rank InvalidArgument, the others MismatchError
  const int bad = world().rank() == n - 1 ? 0 : 1;
  bool invalid = false, mismatch = false;
  try {
    dsp::make_parallel_groups(world(), bad);
  } catch (const dsp::InvalidArgument&) {
    invalid = true;
  } catch (const dsp::MismatchError&) {
    mismatch = true;
  }
  CHECK(invalid == (world().rank() == n - 1));
  CHECK(mismatch == (world().rank() != n - 1));
  auto ok = dsp::make_parallel_groups(world(), 1);  // still usable afterwards
  CHECK(ok.sequence.size() == 1);
}

TEST_CASE("distribute hands every rank of a sequence group the same sample") {
  const int n = world().size();
  const int sp = n % 2 == 0 ? 2 : 1;
  auto groups = dsp::make_parallel_groups(world(), sp);
  const int root = groups.sequence.size() - 1;  // the sample comes from the group's last rank
  const std::array<std::size_t, 3> g{5, 3 + std::size_t(groups.sequence_group), 2};  // each group its own sample
  const bool is_root = groups.sequence.rank() == root;
  View3 src = is_root ? reference(g) : View3();

  auto rep = dsp::distribute<dsp::Replicated>(groups.sequence, src, root);
  CHECK(rep.global_extents() == g);
  CHECK(count_wrong(rep) == 0);

  auto sh = dsp::distribute<dsp::Sharded<0>>(groups.sequence, src, root);
  CHECK(sh.global_extents() == g);
  CHECK(count_wrong(sh) == 0);
  auto sh2 = dsp::distribute<dsp::Sharded<2>>(groups.sequence, src, root);
  CHECK(count_wrong(sh2) == 0);
  // and the sample moves on through the group like any other tensor
  CHECK(count_wrong(dsp::dynamic_switch<1>(sh)) == 0);
}

TEST_CASE("distribute on the whole world, every root") {
  const std::array<std::size_t, 3> g{3, 4, 2};
  for (int root = 0; root < world().size(); ++root) {
    View3 src = world().rank() == root ? reference(g) : View3();
    CHECK(count_wrong(dsp::distribute<dsp::Sharded<1>>(world(), src, root)) == 0);
    CHECK(count_wrong(dsp::distribute<dsp::Replicated>(world(), src, root)) == 0);
  }
  View3 none;
  CHECK_THROWS_AS(dsp::distribute<dsp::Replicated>(world(), none, world().size()), dsp::InvalidArgument);
}

TEST_CASE("distribute: ranks that disagree on the root raise on every rank") {
  if (world().size() == 1) return;
  View3 src = reference({2, 2, 2});
  CHECK_THROWS_AS(dsp::distribute<dsp::Replicated>(world(), src, world().rank() == 0 ? 1 : 0), dsp::Error);
}
