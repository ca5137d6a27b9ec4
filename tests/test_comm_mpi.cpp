// SPDX-License-Identifier: BSD-3-Clause
// The MPI communicator: each collective, and the large-count path that splits
// exchanges into messages below MPI's int limit (forced here with a low limit).
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <numeric>
#include <vector>

using namespace dsp_test;

namespace {
struct LowCountLimit {  // every count above 3 elements takes the point-to-point path
  std::size_t saved = dsp::detail::mpi_count_limit();
  LowCountLimit() { dsp::detail::mpi_count_limit() = 3; }
  ~LowCountLimit() { dsp::detail::mpi_count_limit() = saved; }
};

void check_collectives() {
  auto c = world();
  const std::size_t n = std::size_t(c.size()), p = std::size_t(c.rank());
  // all_to_all: element k of the chunk for peer q is 1000 * p + 10 * q + k
  const std::size_t m = 5;
  std::vector<double> s(n * m), r(n * m, -1);
  for (std::size_t q = 0; q < n; ++q)
    for (std::size_t k = 0; k < m; ++k) s[q * m + k] = 1000.0 * p + 10.0 * q + k;
  c.all_to_all(s.data(), r.data(), m, sizeof(double));
  for (std::size_t q = 0; q < n; ++q)
    for (std::size_t k = 0; k < m; ++k) CHECK(r[q * m + k] == 1000.0 * q + 10.0 * p + k);

  // all_to_all_v: peer q gets q + p + 1 elements
  std::vector<std::size_t> sc(n), sd(n), rc(n), rd(n);
  for (std::size_t q = 0; q < n; ++q) {
    sc[q] = q + p + 1;
    rc[q] = p + q + 1;
  }
  std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), std::size_t(0));
  std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), std::size_t(0));
  std::vector<std::int32_t> sv(sd.back() + sc.back()), rv(rd.back() + rc.back(), -1);
  for (std::size_t q = 0; q < n; ++q)
    for (std::size_t k = 0; k < sc[q]; ++k) sv[sd[q] + k] = std::int32_t(100 * p + q + 7 * k);
  const std::size_t bound = n * (n - 1) / 2 + n * n;  // rank n-1's total: the same on every rank
  c.all_to_all_v(sv.data(), sc, sd, rv.data(), rc, rd, sizeof(std::int32_t), bound);
  for (std::size_t q = 0; q < n; ++q)
    for (std::size_t k = 0; k < rc[q]; ++k) CHECK(rv[rd[q] + k] == std::int32_t(100 * q + p + 7 * k));

  // all_gather and all_gather_v
  std::vector<float> mine(4, float(p)), all(4 * n, -1);
  c.all_gather(mine.data(), all.data(), 4, sizeof(float));
  for (std::size_t q = 0; q < n; ++q) CHECK(all[4 * q + 3] == float(q));
  std::vector<std::size_t> gc(n), gd(n);
  for (std::size_t q = 0; q < n; ++q) gc[q] = 2 * q + 1;
  std::exclusive_scan(gc.begin(), gc.end(), gd.begin(), std::size_t(0));
  std::vector<float> own(gc[p], float(p) + 0.5f), cat(gd.back() + gc.back(), -1);
  c.all_gather_v(own.data(), own.size(), cat.data(), gc, gd, sizeof(float));
  for (std::size_t q = 0; q < n; ++q)
    for (std::size_t k = 0; k < gc[q]; ++k) CHECK(cat[gd[q] + k] == float(q) + 0.5f);

  // broadcast from the last rank
  std::vector<std::int64_t> b(11, std::int64_t(p));
  c.broadcast(b.data(), b.size(), sizeof(std::int64_t), int(n - 1));
  for (auto v : b) CHECK(v == std::int64_t(n - 1));
}
}  // namespace

TEST_CASE("MpiCommunicator collectives") { check_collectives(); }

TEST_CASE("MpiCommunicator collectives beyond the count limit") {
  LowCountLimit low;
  check_collectives();
}

TEST_CASE("switch and gather beyond the count limit stay exact") {
  LowCountLimit low;
  const std::size_t n = std::size_t(world().size());
  dsp::DistTensor<double, 3, dsp::Sharded<0>, dsp::MpiCommunicator> x{world(), {2 * n + 1, 3 * n + 2, 3}};
  fill(x);
  auto y = dsp::dynamic_switch<1>(x);
  CHECK(count_wrong(y) == 0);
  auto z = dsp::dynamic_switch<2>(y);
  CHECK(count_wrong(z) == 0);
  auto r = dsp::gather(z);
  CHECK(count_wrong(r) == 0);
}

TEST_CASE("copies of a communicator share one group; a split is another") {
  dsp::MpiCommunicator a = world();
  CHECK(a.id() == world().id());
  CHECK(a == world());
  dsp::MpiCommunicator b{MPI_COMM_WORLD};  // another wrapper of the same MPI communicator
  CHECK(b == world());
  dsp::MpiCommunicator same = world().split(0, world().rank());  // the same ranks in the same order
  CHECK(same == world());
  CHECK(same.id() != world().id());
  dsp::MpiCommunicator reversed = world().split(0, world().size() - world().rank());
  CHECK(reversed.size() == world().size());
  CHECK((reversed == world()) == (world().size() == 1));  // another order: another group
}

TEST_CASE("workspace is reused: a warm switch into an existing output allocates nothing") {
  const std::size_t n = std::size_t(world().size());
  dsp::DistTensor<float, 3, dsp::Sharded<1>, dsp::MpiCommunicator> x{world(), {3 * n, 2 * n + 1, 4}};
  dsp::DistTensor<float, 3, dsp::Sharded<2>, dsp::MpiCommunicator> y{world(), {3 * n, 2 * n + 1, 4}};
  fill(x);
  dsp::dynamic_switch<2>(x, y);
  const std::size_t warm = dsp::workspace_bytes(world());
  const float* before = y.local().data();
  for (int k = 0; k < 5; ++k) dsp::dynamic_switch<2>(x, y);
  CHECK(dsp::workspace_bytes(world()) == warm);
  CHECK(y.local().data() == before);
  CHECK(count_wrong(y) == 0);
}

TEST_CASE("a communicator destroyed before MPI_Finalize releases its MPI objects once") {
  int before = 0;
  {
    dsp::MpiCommunicator c{MPI_COMM_WORLD};
    auto s = c.split(0, c.rank());
    CHECK(s.size() == c.size());
    MPI_Comm dup = c.native();
    int res = MPI_UNEQUAL;
    CHECK(MPI_Comm_compare(dup, MPI_COMM_WORLD, &res) == MPI_SUCCESS);
    CHECK(res == MPI_CONGRUENT);
    before = 1;
  }  // both destroyed here: their finalize watches are removed, nothing is freed twice
  CHECK(before == 1);
  auto y = dsp::dynamic_switch<1>(
      dsp::DistTensor<float, 2, dsp::Sharded<0>, dsp::MpiCommunicator>{dsp_test::world(), {4, 4}});
  CHECK(y.global_extents() == std::array<std::size_t, 2>{4, 4});
}
