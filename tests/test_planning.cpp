// SPDX-License-Identifier: BSD-3-Clause
// Planning::measure and wisdom: measured operations are correct, every rank
// ends with the same decisions (also when they start with different ones),
// later calls do not measure again, wisdom text round-trips, and bad text
// raises and changes nothing.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace dsp_test;

namespace {

using Counting = dsp::CountingCommunicator<dsp::MpiCommunicator>;
Counting& counting_world() {
  static Counting c{world()};
  return c;
}

/// Whether every rank holds the same text.
bool same_on_all_ranks(const std::string& s) {
  const unsigned long long h = dsp::detail::fnv1a(s);
  unsigned long long lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

std::size_t lines(const std::string& s) {
  std::size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

/// `text` with every "choice=..." replaced by "choice=<c>".
std::string with_choice(std::string text, const std::string& c) {
  for (std::size_t at = text.find("choice="); at != std::string::npos; at = text.find("choice=", at + 1)) {
    const std::size_t end = text.find(' ', at);
    text.replace(at, end - at, "choice=" + c);
  }
  return text;
}

/// Restores heuristic planning and an empty table when a case ends.
struct MeasureScope {
  MeasureScope() {
    dsp::forget_wisdom();
    dsp::set_planning(dsp::Planning::measure);
  }
  ~MeasureScope() {
    dsp::set_planning(dsp::Planning::heuristic);
    dsp::forget_wisdom();
  }
};

}  // namespace

TEST_CASE("heuristic planning records nothing") {
  dsp::forget_wisdom();
  dsp::DistTensor<float, 3, dsp::Sharded<0>, dsp::MpiCommunicator> x{world(), {6, 10, 8}};
  fill(x);
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
  CHECK(dsp::export_wisdom() == "dsp-wisdom 1\n");
}

TEST_CASE("measured switches, batches and gathers are correct and decided alike on every rank") {
  MeasureScope scope;
  const int n = world().size();
  dsp::DistTensor<float, 3, dsp::Sharded<0>, dsp::MpiCommunicator> x{world(), {6, 10, 8}};
  dsp::DistTensor<double, 4, dsp::Sharded<1>, dsp::MpiCommunicator> q{world(), {2, 9, 4, 5}}, k{world(), {2, 9, 4, 5}},
      v{world(), {2, 9, 4, 5}};
  fill(x), fill(q), fill(k), fill(v);
  for (int round = 0; round < 2; ++round) {
    CHECK(count_wrong(dsp::dynamic_switch<2>(x)) == 0);
    auto [q2, k2, v2] = dsp::dynamic_switch<3>(dsp::batch(q, k, v));
    CHECK(count_wrong(q2) + count_wrong(k2) + count_wrong(v2) == 0);
    CHECK(count_wrong(dsp::gather(x)) == 0);
    auto [qg, kg] = dsp::redistribute<dsp::Replicated>(dsp::batch(q, k));
    CHECK(count_wrong(qg) + count_wrong(kg) == 0);
    CHECK(count_wrong(x) + count_wrong(q) == 0);  // inputs untouched
  }
  if (n % 2 == 0) {
    using M = dsp::Mesh<2, dsp::MpiCommunicator>;
    M m{world(), {2, n / 2}};
    dsp::DistTensor<int, 3, dsp::Axes<dsp::Sharded<0>, dsp::Sharded<1>>, M> a{m, {4, 6, 2 * n}};
    fill(a);
    auto b = dsp::redistribute<dsp::Axes<dsp::Sharded<1>, dsp::Sharded<2>>>(a);
    CHECK(count_wrong(b) == 0);
  }
  const std::string w = dsp::export_wisdom();
  INFO(w);
  // A plain communicator's steps have one key on every rank, and the mesh's
  // groups here hold equal boxes: the whole text, times included, is equal.
  CHECK(same_on_all_ranks(w));
  if (n == 1) CHECK(lines(w) == 1);  // one rank: nothing to decide
  else {
    CHECK(lines(w) >= 5);
    CHECK(w.find("switch world=") != std::string::npos);
    CHECK(w.find("batch-switch world=") != std::string::npos);
    CHECK(w.find("gather world=") != std::string::npos);
    CHECK(w.find("batch-gather world=") != std::string::npos);
  }
}

TEST_CASE("a measured shape is measured once; later calls run one plan") {
  MeasureScope scope;
  auto& cc = counting_world();
  dsp::DistTensor<float, 3, dsp::Sharded<0>, Counting> x{cc, {6, 10, 8}};
  fill(x);
  cc.reset();
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
  const std::size_t first = cc.counts().collectives();
  cc.reset();
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
  const std::size_t second = cc.counts().collectives();
  cc.reset();
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
  CHECK(cc.counts().collectives() == second);
  if (cc.size() > 1) {
    CHECK(first > 2 * second);  // at least a warm-up and a timed run of each candidate
    CHECK(second <= 1);
  }
  // Imported wisdom is used as measured: no measuring.
  const std::string w = dsp::export_wisdom();
  dsp::forget_wisdom();
  dsp::import_wisdom(w, cc);
  cc.reset();
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
  CHECK(cc.counts().collectives() == second);
}

TEST_CASE("a small switch's measured `automatic` is the eager-pieces plan it then runs") {
  // float [64 n, 2 n, 8] Sharded<0> -> Sharded<1>: 64-byte runs, 4 KiB chunks. The automatic rule sends
  // them point to point in eager pieces (plan/packed.hpp), so `automatic` is a plan of its own, timed
  // beside alltoall and alltoallv (both run: neither repeats it), and a recorded `automatic` runs it.
  MeasureScope scope;
  auto& cc = counting_world();
  const std::size_t n = std::size_t(cc.size());
  dsp::DistTensor<float, 3, dsp::Sharded<0>, Counting> x{cc, {64 * n, 2 * n, 8}};
  fill(x);
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
  const std::string w = dsp::export_wisdom();
  INFO(w);
  if (n == 1) return;
  const std::size_t at = w.find(" measured=");
  REQUIRE(at != std::string::npos);
  const std::string measured = w.substr(at, w.find('\n', at) - at);
  for (const char* c : {"automatic:", "alltoall:", "alltoallv:"}) {
    CAPTURE(c);
    const std::size_t t = measured.find(c);
    REQUIRE(t != std::string::npos);
    CHECK(measured[t + std::string(c).size()] != '-');  // it ran
  }
  dsp::forget_wisdom();
  dsp::import_wisdom(with_choice(w, "automatic"), cc);
  cc.reset();
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
  CHECK(cc.counts().exchange == 1u);
  CHECK(cc.counts().all_to_all == 0u);
}

TEST_CASE("ranks that hold different decisions measure again together") {
  MeasureScope scope;
  const int n = world().size(), me = world().rank();
  dsp::DistTensor<float, 3, dsp::Sharded<0>, dsp::MpiCommunicator> x{world(), {6, 10, 8}};
  fill(x);
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
  const std::string w = dsp::export_wisdom();
  if (n == 1) return;
  SUBCASE("different choices") { dsp::import_wisdom(with_choice(w, me % 2 ? "alltoallv" : "datatypes")); }
  SUBCASE("one rank without a decision") {
    if (me == n - 1) dsp::forget_wisdom();
  }
  SUBCASE("a rank's choice that cannot run for this shape") {
    dsp::import_wisdom(with_choice(w, me == 0 ? "alltoall" : "pairwise"));
  }
  CHECK(!same_on_all_ranks(dsp::export_wisdom()));
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
  CHECK(same_on_all_ranks(dsp::export_wisdom()));
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
}

TEST_CASE("planning modes that differ raise on every rank") {
  if (world().size() == 1) return;
  dsp::forget_wisdom();
  if (world().rank() == 0) dsp::set_planning(dsp::Planning::measure);
  dsp::DistTensor<float, 2, dsp::Sharded<0>, dsp::MpiCommunicator> x{world(), {6, 10}};
  fill(x);
  dsp::DistTensor<float, 2, dsp::Sharded<1>, dsp::MpiCommunicator> y{world(), {6, 10}};
  const std::string e = error_of([&] { dsp::dynamic_switch<1>(x, y); });
  dsp::set_planning(dsp::Planning::heuristic);
  INFO(e);
  CHECK(e.find("planning modes disagree") != std::string::npos);
  CHECK(e.find("rank 0 measure") != std::string::npos);
  CHECK(dsp::export_wisdom() == "dsp-wisdom 1\n");
}

TEST_CASE("wisdom round-trips; bad text raises and changes nothing") {
  MeasureScope scope;
  dsp::DistTensor<float, 3, dsp::Sharded<0>, dsp::MpiCommunicator> x{world(), {6, 10, 8}};
  fill(x);
  CHECK(count_wrong(dsp::dynamic_switch<2>(x)) == 0);
  CHECK(count_wrong(dsp::gather(x)) == 0);
  const std::string w = dsp::export_wisdom();
  dsp::forget_wisdom();
  CHECK(dsp::export_wisdom() == "dsp-wisdom 1\n");
  dsp::import_wisdom(w);
  CHECK(dsp::export_wisdom() == w);
  dsp::import_wisdom("# a comment\n\ndsp-wisdom 1\r\n");  // nothing to add
  CHECK(dsp::export_wisdom() == w);
  const std::string line =
      "switch world=4 axis=2 backend=dsp::MpiCommunicator extents=8x6 dims=0,1 elems=4 wire=exact caps=3 "
      "choice=pairwise";
  dsp::import_wisdom("dsp-wisdom 1\n" + line + "\n");
  CHECK(dsp::export_wisdom().find(line) != std::string::npos);
  const std::string before = dsp::export_wisdom();
  auto bad = [&](const std::string& text, const std::string& why) {
    INFO(text);
    const std::string e = error_of([&] { dsp::import_wisdom(text); });
    CHECK(e.find(why) != std::string::npos);
    CHECK(dsp::export_wisdom() == before);
  };
  bad("", "no \"dsp-wisdom 1\" header");
  bad("dsp-wisdom 2\n", "expected the header");
  bad("dsp-wisdom 1\n" + line + "\nreduce world=2\n", "wisdom line 3: unknown kind");
  bad("dsp-wisdom 1\nswitch world=2 axis=2\n", "missing one of");
  bad("dsp-wisdom 1\n" + line + " colour=red\n", "unknown key \"colour\"");
  bad("dsp-wisdom 1\n" + with_choice(line, "fastest") + "\n", "bad value \"fastest\" for choice");
  bad("dsp-wisdom 1\nswitch world=4 axis=2 backend=b extents=8x6 dims=0,2 elems=4 wire=exact caps=3 choice=alltoall\n",
      "dims name a dim past the extents");
  bad("dsp-wisdom 1\nswitch world=4 world=4 axis=2 backend=b extents=8x6 dims=0,1 elems=4 wire=exact caps=3 "
      "choice=alltoall\n",
      "world given twice");
  bad("dsp-wisdom 1\nswitch world=2 axis=4 backend=b extents=8x6 dims=0,1 elems=4 wire=exact caps=3 choice=alltoall\n",
      "axis is larger than world");
  bad("dsp-wisdom 1\nswitch world=4 axis=2 backend=b extents=8x6 dims=0,1 elems=4,4 wire=exact caps=3 "
      "choice=alltoall\n",
      "one element size");
  bad("dsp-wisdom 1\nswitch world=4 axis=2 backend=b extents=8x6 dims=0,1 elems=4 wire=fp4 caps=3 choice=alltoall\n",
      "bad value \"fp4\" for wire");
  // Against a communicator: every line is kept (its world size and backend
  // are part of its key), and the number that can serve it is returned.
  // Regression: a line of another world size used to refuse the whole text.
  const int n = world().size();
  const std::string mpi(dsp::detail::backend_text(dsp::detail::backend_name<dsp::MpiCommunicator>()));
  const std::string ours = std::string(line).replace(line.find("dsp::MpiCommunicator"), 20, mpi);
  const std::string bigger =
      "dsp-wisdom 1\n" + std::string(ours).replace(ours.find("world=4"), 7, "world=" + std::to_string(n + 1)) + "\n";
  CHECK(dsp::import_wisdom(bigger, world()) == 0);
  CHECK(dsp::export_wisdom().find("world=" + std::to_string(n + 1) + " ") != std::string::npos);
  dsp::forget_wisdom();
  dsp::import_wisdom(before);
  const std::string smaller =
      "dsp-wisdom 1\n" + std::string(ours).replace(ours.find("world=4 axis=2"), 14, "world=1 axis=1") + "\n";
  CHECK(dsp::import_wisdom(smaller, world()) == 1);
  dsp::forget_wisdom();
  dsp::import_wisdom(before);
  // Text for another backend only: the wrong file; refused, nothing changes.
  const std::string e = error_of([&] { dsp::import_wisdom("dsp-wisdom 1\n" + line + "\n", world()); });
  CHECK(e.find("the wisdom was measured for backend dsp::MpiCommunicator, none of it for " + mpi) != std::string::npos);
  CHECK(dsp::export_wisdom() == before);
  // A counting decorator is keyed as the communicator it wraps (regression:
  // its own name made wisdom from an uninstrumented run useless).
  const std::size_t measured = std::size_t(std::count(w.begin(), w.end(), '\n')) - 1;
  CHECK(dsp::import_wisdom(w, counting_world()) == measured);
  CHECK(dsp::import_wisdom(w, world()) == measured);  // its own text fits
}

TEST_CASE("wisdom measured without counting serves a counted run; a mesh means its world") {
  MeasureScope scope;
  dsp::DistTensor<float, 3, dsp::Sharded<0>, dsp::MpiCommunicator> x{world(), {6, 10, 8}};
  fill(x);
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
  const std::string w = dsp::export_wisdom();
  dsp::forget_wisdom();
  auto& cc = counting_world();
  CHECK(dsp::import_wisdom(w, cc) == (world().size() > 1 ? 1u : 0u));
  dsp::DistTensor<float, 3, dsp::Sharded<0>, Counting> xc{cc, {6, 10, 8}};
  fill(xc);
  cc.reset();
  CHECK(count_wrong(dsp::dynamic_switch<1>(xc)) == 0);
  CHECK(cc.counts().collectives() <= 1);  // the imported decision: nothing measured
  // Regression: import_wisdom(w, mesh) refused wisdom measured on that very
  // mesh, naming the backend dsp::Mesh<2, ...>.
  dsp::forget_wisdom();
  dsp::Mesh<2, dsp::MpiCommunicator> mesh{world(), dsp::mesh_shape<2>(world().size())};
  using XP = dsp::Axes<dsp::Sharded<0>, dsp::Sharded<1>>;
  dsp::DistTensor<float, 3, XP, dsp::Mesh<2, dsp::MpiCommunicator>> xm{mesh, {6, 10, 8}};
  fill(xm);
  CHECK(count_wrong(dsp::redistribute<dsp::Axes<dsp::Sharded<2>, dsp::Sharded<1>>>(xm)) == 0);
  const std::string wm = dsp::export_wisdom();
  dsp::forget_wisdom();
  CHECK(dsp::import_wisdom(wm, mesh) == std::size_t(std::count(wm.begin(), wm.end(), '\n')) - 1);
  CHECK(dsp::export_wisdom() == wm);
}

TEST_CASE("DSP_WISDOM is loaded by the first measured operation; a bad one raises on every rank") {
  MeasureScope scope;
  auto& cc = counting_world();
  dsp::DistTensor<float, 3, dsp::Sharded<0>, Counting> x{cc, {6, 10, 8}};
  fill(x);
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
  const std::string w = with_choice(dsp::export_wisdom(), "alltoallv");
  dsp::forget_wisdom();
  const std::string path = "/tmp/dsp_test_wisdom_" + std::to_string(world().rank()) + ".txt";
  setenv("DSP_WISDOM", "/nonexistent/dsp-wisdom.txt", 1);
  dsp::detail::reread_wisdom_env();  // read once per process otherwise
  const std::string e = error_of([&] { dsp::dynamic_switch<1>(x); });
  CHECK(e.find("DSP_WISDOM=/nonexistent/dsp-wisdom.txt: cannot open the file") != std::string::npos);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f);
  std::fputs(w.c_str(), f);
  std::fclose(f);
  CHECK(error_of([&] { dsp::dynamic_switch<1>(x); }) == e);  // and every later measured operation
  setenv("DSP_WISDOM", path.c_str(), 1);
  dsp::detail::reread_wisdom_env();
  cc.reset();
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
  if (cc.size() > 1) {
    CHECK(cc.counts().collectives() == 1);  // the file's decision, nothing measured
    CHECK(dsp::export_wisdom() == w);
  }
  unsetenv("DSP_WISDOM");
  dsp::detail::reread_wisdom_env();
  std::remove(path.c_str());
}

namespace {
std::string write_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}
}  // namespace

TEST_CASE("DSP_WISDOM from a run with a split, or from another world size, serves where it fits") {
  // Regression: wisdom from a program that measured on the world and on a
  // 2-rank split could not be read back through DSP_WISDOM ("measured for a
  // world of 2 ranks, not 4"), and a file from another world size (an
  // elastic restart) made every measured call throw.
  MeasureScope scope;
  const int n = world().size(), me = world().rank();
  dsp::MpiCommunicator half = world().split(me / 2, me);  // groups of 2 (the last one of 1 at odd n)
  dsp::CountingCommunicator<dsp::MpiCommunicator> ch{half};
  dsp::DistTensor<float, 3, dsp::Sharded<0>, dsp::MpiCommunicator> x{world(), {6, 10, 8}};
  dsp::DistTensor<float, 3, dsp::Sharded<0>, Counting> xh{ch, {6, 10, 8}};
  fill(x);
  fill(xh);
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
  CHECK(count_wrong(dsp::dynamic_switch<1>(xh)) == 0);
  const std::string w = dsp::export_wisdom();
  dsp::forget_wisdom();
  const std::string path = write_file("/tmp/dsp_test_wisdom_split_" + std::to_string(me) + ".txt", w);
  setenv("DSP_WISDOM", path.c_str(), 1);
  dsp::detail::reread_wisdom_env();
  CHECK(dsp::export_wisdom() == w);  // loaded by the export, before any call
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
  ch.reset();
  CHECK(count_wrong(dsp::dynamic_switch<1>(xh)) == 0);
  CHECK(ch.counts().collectives() <= 1);  // the file's decision: nothing measured
  CHECK(dsp::export_wisdom() == w);       // nothing measured, nothing changed
  // A file from a larger world only: nothing fits, every call measures, none throws.
  dsp::forget_wisdom();
  std::string larger = w;
  for (std::size_t at = 0; (at = larger.find("world=", at)) != std::string::npos; at += 6)
    larger.replace(at + 6, larger.find(' ', at) - at - 6, std::to_string(n + 3));
  write_file(path, larger);
  dsp::detail::reread_wisdom_env();
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
  CHECK(count_wrong(dsp::dynamic_switch<1>(xh)) == 0);
  unsetenv("DSP_WISDOM");
  dsp::detail::reread_wisdom_env();
  std::remove(path.c_str());
}

TEST_CASE("DSP_WISDOM naming /dev/zero or a directory raises a sentence, never reads without end") {
  // Regression: /dev/zero read until std::bad_alloc; a directory was "empty text".
  MeasureScope scope;
  dsp::DistTensor<float, 3, dsp::Sharded<0>, dsp::MpiCommunicator> x{world(), {6, 10, 8}};
  fill(x);
  setenv("DSP_WISDOM", "/dev/zero", 1);
  dsp::detail::reread_wisdom_env();
  std::string e = error_of([&] { dsp::dynamic_switch<1>(x); });
  CHECK(e.find("DSP_WISDOM=/dev/zero: longer than 16 MiB") != std::string::npos);
  CHECK(error_of([&] { dsp::export_wisdom(); }).find("dsp::export_wisdom: DSP_WISDOM=/dev/zero") != std::string::npos);
  setenv("DSP_WISDOM", "/tmp", 1);
  dsp::detail::reread_wisdom_env();
  e = error_of([&] { dsp::dynamic_switch<1>(x); });
  CHECK(e.find("DSP_WISDOM=/tmp: is a directory, not a wisdom file") != std::string::npos);
  unsetenv("DSP_WISDOM");
  dsp::detail::reread_wisdom_env();
}
