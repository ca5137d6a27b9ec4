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
#include <thread>
#include <utility>
#include <vector>

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
  // Blocks<D>: run-time block sizes (an empty one among them) save and load.
  {
    std::vector<std::size_t> sizes(std::size_t(n), 0);
    sizes[0] = 2, sizes[std::size_t(n) - 1] += 3;  // 5 rows of dim 1 over n ranks, the middle ones empty
    dsp::DistTensor<double, 3, dsp::Blocks<1>, Comm> x{world(), e, sizes};
    dsp::fill(x, [](const E3& g) { return u_of(g) * 3; });
    dsp::hdf5::save(x, file, "blocks/u");
    std::vector<std::size_t> other(std::size_t(n), 0);
    other[std::size_t(n) - 1] = 5;  // everything on the last rank
    dsp::DistTensor<double, 3, dsp::Blocks<1>, Comm> y{world(), e, other};
    dsp::hdf5::load(file, "blocks/u", y);
    CHECK(dsp::count_mismatches(y, [](const E3& g) { return u_of(g) * 3; }) == 0);
  }
  // Zigzag<D>: each block is two chunks of the dataset (chunks r and 2N-1-r; empty ones past 4 ranks
  // for dim 1's 5 rows); saved and loaded against Sharded and Blocks, on dims 0 and 1.
  {
    dsp::DistTensor<double, 3, dsp::Zigzag<1>, Comm> z{world(), e};
    dsp::fill(z, [](const E3& g) { return u_of(g) * 5; });
    dsp::hdf5::save(z, file, "zigzag/u1");
    CHECK(dsp::count_mismatches(z, [](const E3& g) { return u_of(g) * 5; }) == 0);
    dsp::DistTensor<double, 3, Sharded<1>, Comm> a{world(), e};
    dsp::hdf5::load(file, "zigzag/u1", a);
    CHECK(dsp::count_mismatches(a, [](const E3& g) { return u_of(g) * 5; }) == 0);
    dsp::DistTensor<double, 3, dsp::Zigzag<0>, Comm> z0{world(), e};
    dsp::fill(z0, [](const E3&) { return -1.0; });
    dsp::hdf5::load(file, "zigzag/u1", z0);
    CHECK(dsp::count_mismatches(z0, [](const E3& g) { return u_of(g) * 5; }) == 0);
    dsp::hdf5::save(z0, file, "zigzag/u0");
    dsp::DistTensor<double, 3, dsp::Zigzag<1>, Comm> back{world(), e};
    dsp::hdf5::load(file, "zigzag/u0", back);
    CHECK(dsp::count_mismatches(back, [](const E3& g) { return u_of(g) * 5; }) == 0);
    for (int k = 1; k <= n; ++k) {  // on fewer ranks
      auto g = first_ranks(k);
      if (!g) continue;
      dsp::DistTensor<double, 3, dsp::Zigzag<2>, Comm> w{*g, e};
      dsp::hdf5::load(file, "zigzag/u0", w);
      CHECK(dsp::count_mismatches(w, [](const E3& x) { return u_of(x) * 5; }) == 0);
    }
  }
  // Zigzag<1> on a mesh axis with Sharded<1> inside it (USP's causal layout): a rank's part may span
  // both chunks or lie in one; loaded from and saved to the dataset on every 2-axis mesh.
  for (int d = 1; d <= n; ++d) {
    if (n % d != 0) continue;
    using M = dsp::Mesh<2, Comm>;
    M mesh{world(), {d, n / d}};
    dsp::DistTensor<double, 3, dsp::Axes<dsp::Zigzag<1>, Sharded<1>>, M> z{mesh, e};
    dsp::hdf5::load(file, "zigzag/u1", z);
    CHECK(dsp::count_mismatches(z, [](const E3& g) { return u_of(g) * 5; }) == 0);
    dsp::fill(z, [](const E3& g) { return u_of(g) * 7; });
    dsp::hdf5::save(z, file, "mesh/zigzag");
    dsp::DistTensor<double, 3, Sharded<0>, Comm> back{world(), e};
    dsp::hdf5::load(file, "mesh/zigzag", back);
    CHECK(dsp::count_mismatches(back, [](const E3& g) { return u_of(g) * 7; }) == 0);
    // Blocks<1> on axis 0 (run-time sizes, an empty block among them), Zigzag<1> inside: saved, then
    // loaded under other sizes.
    using BZ = dsp::Axes<dsp::Blocks<1>, dsp::Zigzag<1>>;
    std::vector<std::size_t> sizes(std::size_t(d), 0), other(std::size_t(d), 0);
    sizes[std::size_t(d) - 1] = 5, other[0] = 2, other[std::size_t(d) - 1] += 3;
    dsp::DistTensor<double, 3, BZ, M> b{mesh, e, sizes};
    dsp::fill(b, [](const E3& g) { return u_of(g) * 9; });
    dsp::hdf5::save(b, file, "mesh/blocks");
    dsp::DistTensor<double, 3, BZ, M> b2{mesh, e, other};
    dsp::hdf5::load(file, "mesh/blocks", b2);
    CHECK(dsp::count_mismatches(b2, [](const E3& g) { return u_of(g) * 9; }) == 0);
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
  CHECK(why.find("the dataset's element type is float64, not the tensor's float32 (float)") != std::string::npos);
  CHECK(untouched(f));
  CHECK(untouched(y));
  why = error_of([&] { dsp::hdf5::save(other, file, "fields/u"); });
  CHECK(why.find("the dataset exists with extents [7,5,6], not the tensor's [7,5,7]; save under another name") !=
        std::string::npos);
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

namespace {

/// Removes a file of these cases (not DSP_TEST_H5's own) on rank 0, between barriers; returns its name.
std::string remove_now(const std::string& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (world().rank() == 0) std::remove(f.c_str());
  MPI_Barrier(MPI_COMM_WORLD);
  return f;
}

/// Whether rank 0 sees `file`.
bool file_exists(const std::string& file) {
  int there = 0;
  if (world().rank() == 0) there = ::access(file.c_str(), F_OK) == 0;
  MPI_Bcast(&there, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return there != 0;
}

/// The kind of error every rank got: 'M' MismatchError, 'U' UsageError,
/// 'I' InvalidArgument, 'E' another dsp::Error, '-' none.
template <class F>
char kind_of(F&& f, std::string& what) {
  what.clear();
  try {
    f();
  } catch (const dsp::MismatchError& e) {
    what = e.what();
    return 'M';
  } catch (const dsp::UsageError& e) {
    what = e.what();
    return 'U';
  } catch (const dsp::InvalidArgument& e) {
    what = e.what();
    return 'I';
  } catch (const dsp::Error& e) {
    what = e.what();
    return 'E';
  }
  return '-';
}

/// Whether some rank's `ok` is false.
bool any_false(bool ok) {
  int bad = ok ? 0 : 1, any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any != 0;
}

}  // namespace

TEST_CASE("hdf5: ranks that disagree raise MismatchError on every rank, naming the field, and write nothing") {
  // Regression: different file names, save against load, other extents or
  // element types hung (the last two also left a corrupt dataset); different
  // dataset names silently wrote one name's data.
  const int n = world().size(), me = world().rank();
  if (n == 1) return;
  const std::string file = remove_now(file_name() + ".agree");
  remove_now(file + ".b");
  const E3 e{7, 5, 6};
  dsp::DistTensor<double, 3, Sharded<0>, Comm> x{world(), e};
  dsp::fill(x, u_of);
  std::string why;
  // Different file names: neither file is made.
  CHECK(kind_of([&] { dsp::hdf5::save(x, me == 0 ? file : file + ".b", "u"); }, why) == 'M');
  CHECK(why.find("dsp::hdf5::save: file names disagree: rank 0 \"" + file + "\", rank 1 \"" + file + ".b\"") !=
        std::string::npos);
  CHECK(why.find("nothing was written") != std::string::npos);
  CHECK(!file_exists(file));
  CHECK(!file_exists(file + ".b"));
  dsp::hdf5::save(x, file, "u");
  // Different dataset names: no dataset of either name.
  CHECK(kind_of([&] { dsp::hdf5::save(x, file, me == 0 ? "v" : "w"); }, why) == 'M');
  CHECK(why.find("dataset names disagree: rank 0 \"v\", rank 1 \"w\"") != std::string::npos);
  dsp::DistTensor<double, 3, Replicated, Comm> y{world(), e};
  dsp::fill(y, [](const E3&) { return -1.0; });
  auto untouched = [](const auto& t) { return dsp::count_mismatches(t, [](const auto&) { return -1; }) == 0; };
  CHECK(kind_of([&] { dsp::hdf5::load(file, "v", y); }, why) == 'E');
  CHECK(why.find("no such dataset") != std::string::npos);
  CHECK(kind_of([&] { dsp::hdf5::load(file, "w", y); }, why) == 'E');
  // One rank saves while the others load.
  CHECK(kind_of(
            [&] {
    if (me == 0) dsp::hdf5::save(x, file, "u");
    else dsp::hdf5::load(file, "u", y);
            },
            why) == 'M');
  CHECK(why.find("the ranks called different operations: rank 0 dsp::hdf5::save, rank 1 dsp::hdf5::load") !=
        std::string::npos);
  CHECK(untouched(y));
  // Other extents on one rank: the dataset keeps its data.
  dsp::DistTensor<double, 3, Sharded<0>, Comm> z{world(), me == 0 ? e : E3{7, 5, 7}};
  dsp::fill(z, [](const auto&) { return 3.0; });
  CHECK(kind_of([&] { dsp::hdf5::save(z, file, "u"); }, why) == 'M');
  CHECK(why.find("global extents disagree: rank 0 [7, 5, 6], rank 1 [7, 5, 7]") != std::string::npos);
  CHECK(why.find("; nothing was written") != std::string::npos);
  CHECK(kind_of([&] { dsp::hdf5::load(file, "u", z); }, why) == 'M');
  CHECK(why.find("; nothing was read and y is unchanged") != std::string::npos);
  // Another element type on one rank.
  dsp::DistTensor<float, 3, Sharded<0>, Comm> xf{world(), e};
  dsp::fill(xf, [](const E3&) { return 2.0f; });
  CHECK(kind_of(
            [&] {
    if (me == 0) dsp::hdf5::save(x, file, "u");
    else dsp::hdf5::save(xf, file, "u");
            },
            why) == 'M');
  CHECK(why.find("element types disagree") != std::string::npos);
  // Another layout on one rank (the same extents): each rank would write another block.
  dsp::DistTensor<double, 3, Sharded<1>, Comm> x1{world(), e};
  dsp::fill(x1, [](const E3&) { return 5.0; });
  CHECK(kind_of(
            [&] {
    if (me == 0) dsp::hdf5::save(x, file, "u");
    else dsp::hdf5::save(x1, file, "u");
            },
            why) == 'M');
  CHECK(why.find("input layouts disagree: rank 0 Sharded<0>, rank 1 Sharded<1>") != std::string::npos);
  // Through all of it the file kept x, and only "u".
  dsp::hdf5::load(file, "u", y);
  CHECK(dsp::count_mismatches(y, u_of) == 0);
  remove_now(file);
}

TEST_CASE("hdf5: a bad DSP_* setting raises in save and load as in every collective") {
  // Regression: save and load ignored an environment value every other collective refuses.
  const std::string file = remove_now(file_name() + ".setting");
  dsp::DistTensor<double, 3, Sharded<0>, Comm> x{world(), {4, 3, 2}};
  dsp::fill(x, u_of);
  auto& s = dsp::detail::switch_setting();
  const auto saved = s;
  s.error = "DSP_SWITCH_ALGORITHM=bogus is not a value dsp accepts";
  std::string why;
  const char k = kind_of([&] { dsp::hdf5::save(x, file, "u"); }, why);
  const char l = kind_of([&] { dsp::hdf5::load(file, "u", x); }, why);
  s = saved;
  CHECK(k == 'I');
  CHECK(l == 'I');
  CHECK(why.find("DSP_SWITCH_ALGORITHM=bogus") != std::string::npos);
  CHECK(!file_exists(file));
}

TEST_CASE("hdf5: one call at a time per process; a second thread's call raises on every rank, never hangs") {
  // Regression: two threads, each with its own communicator, saving at once
  // crashed or hung inside HDF5 (not thread-safe).
  const int me = world().rank();
  const std::string file = remove_now(file_name() + ".threads");
  dsp::DistTensor<double, 3, Sharded<0>, Comm> x{world(), {4, 3, 2}};
  dsp::fill(x, u_of);
  std::string why;
  // Deterministic: rank 0's flag is taken (as by another thread of its process).
  if (me == 0) dsp::hdf5::detail::io_busy().store(true);
  const char k = kind_of([&] { dsp::hdf5::save(x, file, "u"); }, why);
  if (me == 0) dsp::hdf5::detail::io_busy().store(false);
  CHECK(k == (me == 0 ? 'U' : 'M'));
  CHECK(why.find(me == 0 ? "another thread of this process is inside dsp::hdf5::save or load"
                         : "rank 0 could not take part") != std::string::npos);
  CHECK(!file_exists(file));
  // Two real threads, each on its own communicator (needs MPI_THREAD_MULTIPLE):
  // each call either succeeds or raises, the same on every rank, and
  // whatever was saved loads back.
  int level = 0;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE) {
    MESSAGE("two-thread case skipped: MPI was not initialized with MPI_THREAD_MULTIPLE");
    return;
  }
  for (int round = 0; round < 4; ++round) {
    remove_now(file + ".a");
    remove_now(file + ".b");
    Comm a{MPI_COMM_WORLD}, b{MPI_COMM_WORLD};
    dsp::DistTensor<double, 3, Sharded<0>, Comm> xa{a, {4, 3, 2}}, xb{b, {4, 3, 2}};
    dsp::fill(xa, u_of);
    dsp::fill(xb, u_of);
    char ka = '?', kb = '?';
    std::string wa, wb;
    std::thread ta([&] { ka = kind_of([&] { dsp::hdf5::save(xa, file + ".a", "u"); }, wa); });
    std::thread tb([&] { kb = kind_of([&] { dsp::hdf5::save(xb, file + ".b", "u"); }, wb); });
    ta.join();
    tb.join();
    INFO(wa, " | ", wb);
    CHECK((ka == '-' || ka == 'U' || ka == 'M'));
    CHECK((kb == '-' || kb == 'U' || kb == 'M'));
    CHECK(!any_false(ka == '-') == (ka == '-'));  // the same outcome on every rank
    CHECK(!any_false(kb == '-') == (kb == '-'));
    for (const auto& [k, f] : {std::pair{ka, file + ".a"}, std::pair{kb, file + ".b"}})
      if (k == '-') {
        dsp::DistTensor<double, 3, Replicated, Comm> y{world(), {4, 3, 2}};
        dsp::hdf5::load(f, "u", y);
        CHECK(dsp::count_mismatches(y, u_of) == 0);
        remove_now(f);
      }
  }
}

TEST_CASE("hdf5: zero extents save and load") {
  // Regression: saving a [0, 5, 6] tensor raised "the collective write failed".
  const std::string file = remove_now(file_name() + ".empty");
  dsp::DistTensor<float, 3, Sharded<0>, Comm> x{world(), {0, 5, 6}};
  dsp::hdf5::save(x, file, "empty");
  dsp::hdf5::save(x, file, "empty");  // over itself
  dsp::DistTensor<float, 3, Sharded<1>, Comm> y{world(), {0, 5, 6}};
  dsp::hdf5::load(file, "empty", y);
  dsp::DistTensor<float, 3, Sharded<1>, Comm> w{world(), {1, 5, 6}};
  std::string why;
  CHECK(kind_of([&] { dsp::hdf5::load(file, "empty", w); }, why) == 'E');  // every rank finds it
  CHECK(why.find("[0,5,6] are not the tensor's [1,5,6]") != std::string::npos);
  remove_now(file);
}

TEST_CASE("hdf5: a group, a dangling link and another element type are named as what they are") {
  // Regression: a group path or a dangling soft link was reported as a
  // dataset "with other extents or another element type"; float data loaded
  // into a double tensor did not name the two types.
  const std::string file = remove_now(file_name() + ".names");
  const E3 e{7, 5, 6};
  dsp::DistTensor<double, 3, Sharded<0>, Comm> x{world(), e};
  dsp::fill(x, u_of);
  dsp::hdf5::save(x, file, "grp/u");
  MPI_Barrier(MPI_COMM_WORLD);
  if (world().rank() == 0) {  // serially: a soft link to nowhere
    const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(f >= 0);
    CHECK(H5Lcreate_soft("/nowhere", f, "dangling", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    H5Fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  dsp::DistTensor<double, 3, Sharded<1>, Comm> y{world(), e};
  dsp::fill(y, [](const E3&) { return -1.0; });
  auto untouched = [](const auto& t) { return dsp::count_mismatches(t, [](const auto&) { return -1; }) == 0; };
  std::string why = error_of([&] { dsp::hdf5::load(file, "grp", y); });
  CHECK(why.find("the path names a group, not a dataset") != std::string::npos);
  why = error_of([&] { dsp::hdf5::save(x, file, "grp"); });
  CHECK(why.find("the path names a group, not a dataset; save under another name") != std::string::npos);
  why = error_of([&] { dsp::hdf5::load(file, "dangling", y); });
  CHECK(why.find("soft link to an object that does not exist") != std::string::npos);
  why = error_of([&] { dsp::hdf5::save(x, file, "dangling"); });
  CHECK(why.find("soft link to an object that does not exist") != std::string::npos);
  CHECK(untouched(y));
  dsp::DistTensor<float, 3, Sharded<0>, Comm> f{world(), e};
  dsp::fill(f, [](const E3&) { return 1.5f; });
  dsp::hdf5::save(f, file, "floats");
  why = error_of([&] { dsp::hdf5::load(file, "floats", y); });
  CHECK(why.find("the dataset's element type is float32, not the tensor's float64 (double)") != std::string::npos);
  why = error_of([&] { dsp::hdf5::save(x, file, "floats"); });
  CHECK(why.find("exists with element type float32, not the tensor's float64 (double)") != std::string::npos);
  CHECK(untouched(y));
  dsp::hdf5::load(file, "grp/u", y);
  CHECK(dsp::count_mismatches(y, u_of) == 0);
  remove_now(file);
}

TEST_CASE("hdf5: files h5py wrote (DSP_TEST_H5_FOREIGN): an empty dataset loads, an lzf one is refused by name") {
  // Regression: an lzf dataset (a filter this HDF5 lacks) rewritten by 2+
  // ranks hung (the rank with the partial last chunk failed alone inside the
  // collective write); loading it said "collective read failed (y may be
  // partly written)" with y untouched; h5py's empty (0, 5, 6) dataset failed to load.
  const char* env = std::getenv("DSP_TEST_H5_FOREIGN");
  if (!env || !*env) return;
  const std::string file = env;
  dsp::DistTensor<double, 3, Sharded<0>, Comm> empty{world(), {0, 5, 6}};
  dsp::hdf5::load(file, "empty", empty);
  const E3 e{7, 5, 6};
  dsp::DistTensor<double, 3, Sharded<0>, Comm> x{world(), e};
  dsp::fill(x, u_of);
  std::string why = error_of([&] { dsp::hdf5::save(x, file, "lzf"); });
  CHECK(why.find("HDF5 filter \"lzf\"") != std::string::npos);
  CHECK(why.find("nothing was written") != std::string::npos);
  dsp::DistTensor<double, 3, Sharded<1>, Comm> y{world(), e};
  dsp::fill(y, [](const E3&) { return -1.0; });
  why = error_of([&] { dsp::hdf5::load(file, "lzf", y); });
  CHECK(why.find("HDF5 filter \"lzf\"") != std::string::npos);
  CHECK(why.find("y is unchanged") != std::string::npos);
  CHECK(dsp::count_mismatches(y, [](const auto&) { return -1; }) == 0);
  // The gzip dataset (a filter this HDF5 has) is rewritten and read back.
  dsp::hdf5::save(x, file, "gzip");
  dsp::hdf5::load(file, "gzip", y);
  CHECK(dsp::count_mismatches(y, u_of) == 0);
}

TEST_CASE("hdf5: float16 and bfloat16 tensors save as 16-bit HDF5 floats and load back exactly") {
  const std::string file = remove_now(file_name() + ".half");
  const E3 e{7, 5, 6};
  auto value = [](const E3& g) { return float(int(g[0] * 30 + g[1] * 6 + g[2]) - 100) * 0.25f; };  // exact in both
  dsp::DistTensor<dsp::float16, 3, Sharded<0>, Comm> h{world(), e};
  dsp::DistTensor<dsp::bfloat16, 3, Sharded<1>, Comm> b{world(), e};
  dsp::fill(h, value);
  dsp::fill(b, value);
  dsp::hdf5::save(h, file, "half");
  dsp::hdf5::save(b, file, "bhalf");
  dsp::DistTensor<dsp::float16, 3, Sharded<2>, Comm> h2{world(), e};
  dsp::DistTensor<dsp::bfloat16, 3, Replicated, Comm> b2{world(), e};
  dsp::hdf5::load(file, "half", h2);
  dsp::hdf5::load(file, "bhalf", b2);
  CHECK(dsp::count_mismatches(h2, value) == 0);
  CHECK(dsp::count_mismatches(b2, value) == 0);
  // The two 16-bit types are told apart.
  std::string why = error_of([&] { dsp::hdf5::load(file, "half", b2); });
  CHECK(why.find("the dataset's element type is float16, not the tensor's bfloat16 (dsp::bfloat16)") !=
        std::string::npos);
  why = error_of([&] { dsp::hdf5::load(file, "bhalf", h2); });
  CHECK(why.find("the dataset's element type is bfloat16, not the tensor's float16 (dsp::float16)") !=
        std::string::npos);
  if (std::getenv("DSP_TEST_H5")) dsp::hdf5::save(h, file_name(), "halves/h");  // for h5py (hdf5_check.py)
  remove_now(file);
}
