// SPDX-License-Identifier: BSD-3-Clause
// dsp::hdf5: a tensor saved by all ranks loads on every smaller group of
// them, under other layouts and meshes; Replicated and mesh tensors save
// each element once; errors raise on every rank and leave y untouched. With
// DSP_TEST_H5 set, the file stays there for h5py (tests/hdf5_check.py).
#include "helpers.hpp"

#include <dsp/hdf5.hpp>

#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

using namespace dsp_test;

namespace {

using Comm = dsp::MpiCommunicator;
using dsp::Replicated;
using dsp::Sharded;
using E3 = std::array<std::size_t, 3>;

double u_of(const E3& g) { return double(g[0] * 10000 + g[1] * 100 + g[2]) + 0.5; }
std::int32_t v_of(const std::array<std::size_t, 2>& g) { return std::int32_t(g[0] * 100 + g[1]) - 50; }

/// The file of this run: DSP_TEST_H5, else a name rank 0 makes in /tmp.
std::string file_name() {
  if (const char* e = std::getenv("DSP_TEST_H5"); e && *e) return e;
  long id = long(::getpid());
  MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  return "/tmp/dsp_test_hdf5_" + std::to_string(id) + ".h5";
}
void remove_file(const std::string& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (world().rank() == 0 && !std::getenv("DSP_TEST_H5")) std::remove(f.c_str());
}

std::optional<Comm> first_ranks(int k) {
  const int me = world().rank();
  Comm c = world().split(me < k ? 0 : 1, me);
  if (me >= k) return std::nullopt;
  return c;
}

}  // namespace

TEST_CASE("hdf5: saved by all ranks, loaded on 1 to n ranks under other layouts and meshes") {
  const int n = world().size();
  const std::string file = file_name();
  const E3 e{7, 5, 6};
  {
    dsp::DistTensor<double, 3, Sharded<0>, Comm> x{world(), e};
    dsp::fill(x, u_of);
    dsp::hdf5::save(x, file, "fields/u");
    CHECK(dsp::count_mismatches(x, u_of) == 0);
    dsp::DistTensor<std::int32_t, 2, Sharded<1>, Comm> v{world(), {9, 4}};
    dsp::fill(v, v_of);
    dsp::hdf5::save(v, file, "/ints/v");  // a second dataset in the same file, its own group
  }
  for (int k = 1; k <= n; ++k) {
    auto g = first_ranks(k);
    if (!g) continue;
    dsp::DistTensor<double, 3, Sharded<1>, Comm> a{*g, e};
    dsp::fill(a, [](const E3&) { return -1.0; });
    dsp::hdf5::load(file, "fields/u", a);
    CHECK(dsp::count_mismatches(a, u_of) == 0);
    dsp::DistTensor<double, 3, Replicated, Comm> b{*g, e};
    dsp::hdf5::load(file, "/fields/u", b);
    CHECK(dsp::count_mismatches(b, u_of) == 0);
    dsp::DistTensor<std::int32_t, 2, Sharded<0>, Comm> c{*g, {9, 4}};
    dsp::hdf5::load(file, "ints/v", c);
    CHECK(dsp::count_mismatches(c, v_of) == 0);
  }
  if (n % 2 == 0) {
    using M = dsp::Mesh<2, Comm>;
    M mesh{world(), {2, n / 2}};
    dsp::DistTensor<double, 3, dsp::Axes<Sharded<2>, Sharded<0>>, M> m{mesh, e};
    dsp::hdf5::load(file, "fields/u", m);
    CHECK(dsp::count_mismatches(m, u_of) == 0);
    // A mesh tensor with a replicated axis saves each element once.
    dsp::DistTensor<double, 3, dsp::Axes<Replicated, Sharded<1>>, M> r{mesh, e};
    dsp::fill(r, [](const E3& g) { return u_of(g) * 2; });
    dsp::hdf5::save(r, file, "mesh/twice");
    dsp::DistTensor<double, 3, Sharded<2>, Comm> back{world(), e};
    dsp::hdf5::load(file, "mesh/twice", back);
    CHECK(dsp::count_mismatches(back, [](const E3& g) { return u_of(g) * 2; }) == 0);
  }
  // Saving again into a dataset of the same extents and type replaces it.
  {
    dsp::DistTensor<double, 3, Replicated, Comm> x{world(), e};
    dsp::fill(x, u_of);
    dsp::hdf5::save(x, file, "fields/u");
    dsp::DistTensor<double, 3, Sharded<0>, Comm> y{world(), e};
    dsp::hdf5::load(file, "fields/u", y);
    CHECK(dsp::count_mismatches(y, u_of) == 0);
  }
  remove_file(file);
}

TEST_CASE("hdf5: errors raise on every rank and leave y untouched") {
  const std::string file = file_name() + ".errors";
  const E3 e{7, 5, 6};
  dsp::DistTensor<double, 3, Sharded<0>, Comm> x{world(), e};
  dsp::fill(x, u_of);
  dsp::hdf5::save(x, file, "fields/u");
  auto untouched = [](const auto& y) { return dsp::count_mismatches(y, [](const auto&) { return -1; }) == 0; };
  dsp::DistTensor<double, 3, Sharded<1>, Comm> y{world(), e};
  dsp::fill(y, [](const E3&) { return -1.0; });
  std::string why = error_of([&] { dsp::hdf5::load(file + ".missing", "fields/u", y); });
  CHECK(why.find("no such file") != std::string::npos);
  why = error_of([&] { dsp::hdf5::load(file, "fields/w", y); });
  CHECK(why.find("no such dataset") != std::string::npos);
  why = error_of([&] { dsp::hdf5::load(file, "nothere/u", y); });
  CHECK(why.find("no such dataset") != std::string::npos);
  dsp::DistTensor<double, 3, Sharded<1>, Comm> other{world(), {7, 5, 7}};
  dsp::fill(other, [](const E3&) { return -1.0; });
  why = error_of([&] { dsp::hdf5::load(file, "fields/u", other); });
  CHECK(why.find("the dataset's extents [7,5,6] are not the tensor's [7,5,7]") != std::string::npos);
  CHECK(untouched(other));
  dsp::DistTensor<float, 3, Sharded<1>, Comm> f{world(), e};
  dsp::fill(f, [](const E3&) { return -1.0f; });
  why = error_of([&] { dsp::hdf5::load(file, "fields/u", f); });
  CHECK(why.find("element type is not the tensor's") != std::string::npos);
  CHECK(untouched(f));
  CHECK(untouched(y));
  why = error_of([&] { dsp::hdf5::save(other, file, "fields/u"); });
  CHECK(why.find("exists with other extents") != std::string::npos);
  why = error_of([&] { dsp::hdf5::save(x, "/nonexistent-dir/x.h5", "u"); });
  CHECK(why.find("cannot create the file") != std::string::npos);
  why = error_of([&] { dsp::hdf5::save(x, file, "fields/u/deeper"); });
  CHECK(!why.empty());
  // The file is still good.
  dsp::hdf5::load(file, "fields/u", y);
  CHECK(dsp::count_mismatches(y, u_of) == 0);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world().rank() == 0) std::remove(file.c_str());
}
