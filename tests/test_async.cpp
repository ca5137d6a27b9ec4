// SPDX-License-Identifier: BSD-3-Clause
// Split-phase switches and gathers, and computing on each block as it lands:
// the data against the reference for random uneven and empty shapes, every
// output element reported exactly once with its global offsets, errors of the
// agreement at start and failures in flight at wait on every rank, handles
// destroyed unwaited, other collectives between start and wait, counted bytes.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <dsp/comm/counting.hpp>

#include <random>
#include <string>
#include <vector>

using namespace dsp_test;

namespace {
using X0 = dsp::DistTensor<std::int32_t, 3, dsp::Sharded<0>, dsp::MpiCommunicator>;
using X1 = dsp::DistTensor<std::int32_t, 3, dsp::Sharded<1>, dsp::MpiCommunicator>;
using X2 = dsp::DistTensor<std::int32_t, 3, dsp::Sharded<2>, dsp::MpiCommunicator>;
using R3 = dsp::DistTensor<std::int32_t, 3, dsp::Replicated, dsp::MpiCommunicator>;

/// Runs f, and counts how often each output element is covered by a reported
/// block whose values already equal the reference; checks the offsets.
template <class Y>
struct Coverage {
  const Y& y;
  std::vector<int> seen;
  std::vector<int> peers;
  std::size_t wrong_when_reported = 0;
  explicit Coverage(const Y& out) : y(out), seen(out.local_size(), 0) {}
  template <class B, class O>
  void operator()(const B& block, const O& offsets, int peer) {
    peers.push_back(peer);
    const auto lo = y.local_offsets(), le = y.local_extents();
    for (std::size_t i = 0; i < block.extent(0); ++i)
      for (std::size_t j = 0; j < block.extent(1); ++j)
        for (std::size_t k = 0; k < block.extent(2); ++k) {
          const std::array<std::size_t, 3> g{offsets[0] + i, offsets[1] + j, offsets[2] + k};
          const std::size_t local = ((g[0] - lo[0]) * le[1] + (g[1] - lo[1])) * le[2] + (g[2] - lo[2]);
          ++seen[local];
          if (block(i, j, k) != value_at<std::int32_t>(linear(g, y.global_extents()))) ++wrong_when_reported;
          if (&block(i, j, k) != y.local().data() + local) ++wrong_when_reported;  // the block is in the output
        }
  }
  bool exactly_once() const {
    for (int c : seen)
      if (c != 1) return false;
    return true;
  }
};
}  // namespace

TEST_CASE("start_switch and wait: the data, for random shapes") {
  std::mt19937 rng(61);
  for (int c = 0; c < 12; ++c) {
    const auto g = random_extents<3>(rng);
    X0 x{world(), g};
    fill(x);
    X2 y{world(), g};
    auto h = dsp::start_switch<2>(x, y);
    while (!h.test()) {
    }
    h.wait();
    h.wait();  // idempotent
    CHECK(h.waited());
    CHECK(count_wrong(y) == 0);
    CHECK(count_wrong(x) == 0);
  }
}

TEST_CASE("switch_each and gather_each report every block once, own first, as it lands") {
  std::mt19937 rng(62);
  for (int c = 0; c < 10; ++c) {
    const auto g = random_extents<3>(rng);
    X1 x{world(), g};
    fill(x);
    X0 y{world(), g};
    Coverage<X0> cov(y);
    dsp::switch_each<0>(x, y, cov);
    CHECK(cov.exactly_once());
    CHECK(cov.wrong_when_reported == 0);
    if (!cov.peers.empty() && x.local_size() > 0) CHECK(cov.peers.front() == world().rank());
    CHECK(count_wrong(y) == 0);
    R3 r{world(), g};
    Coverage<R3> all(r);
    dsp::gather_each(x, r, all);
    CHECK(all.exactly_once());
    CHECK(all.wrong_when_reported == 0);
    CHECK(count_wrong(r) == 0);
  }
}

TEST_CASE("an agreement error raises at start on every rank, before anything is posted") {
  X0 x{world(), {7, 5, 4}};
  fill(x);
  const bool bad = world().rank() == world().size() - 1;
  X1 y{world(), {7, bad ? 6u : 5u, 4}};
  fill(y);
  const std::string e = error_of([&] { auto h = dsp::start_switch<1>(x, y); });
  CHECK(!e.empty());
  if (bad) CHECK(e.find("the output has global extents [7, 6, 4]") != std::string::npos);
  CHECK(count_wrong(x) == 0);
  CHECK(count_wrong(y) == 0);  // nothing was posted: the output is untouched
  X1 ok{world(), {7, 5, 4}};
  dsp::start_switch<1>(x, ok).wait();
  CHECK(count_wrong(ok) == 0);
}

TEST_CASE("a rank that fails in flight makes every rank raise at wait") {
  if (world().size() == 1) return;
  X0 x{world(), {9, 8, 3}};
  fill(x);
  X1 y{world(), {9, 8, 3}};
  auto h = dsp::start_switch<1>(x, y);
  bool failed = false, mismatch = false;
  try {
    h.wait([&](auto&&, auto&&, int) {
      if (world().rank() == 1) throw std::runtime_error("the attention kernel failed");
    });
  } catch (const dsp::MismatchError& e) {
    mismatch = std::string(e.what()).find(
                   "rank 1 could not take part because it failed while the operation was in "
                   "flight") != std::string::npos;
  } catch (const std::runtime_error& e) {  // the throwing rank gets its own exception back
    failed = std::string(e.what()).find("the attention kernel failed") != std::string::npos;
  }
  CHECK(failed == (world().rank() == 1));
  CHECK(mismatch == (world().rank() != 1));
  CHECK(count_wrong(y) == 0);  // the messages completed anyway
  X1 again{world(), {9, 8, 3}};
  dsp::dynamic_switch<1>(x, again);  // the communicator still works
  CHECK(count_wrong(again) == 0);
}

TEST_CASE("a handle destroyed unwaited waits; other collectives may run between start and wait") {
  X0 x{world(), {11, 6, 5}};
  fill(x);
  X2 y{world(), {11, 6, 5}};
  { auto h = dsp::start_switch<2>(x, y); }  // destroyed: it waits
  CHECK(count_wrong(y) == 0);
  X1 a{world(), {11, 6, 5}}, b{world(), {11, 6, 5}};
  X2 z{world(), {11, 6, 5}};
  auto h1 = dsp::start_switch<1>(x, a);
  auto h2 = dsp::start_switch<2>(x, z);  // two in flight on one communicator
  dsp::dynamic_switch<1>(x, b);          // and a blocking one between
  h1.wait();
  h2.wait();
  CHECK(count_wrong(a) == 0);
  CHECK(count_wrong(b) == 0);
  CHECK(count_wrong(z) == 0);
}

TEST_CASE("split-phase operations through a counting communicator count what the model says") {
  using Counted = dsp::CountingCommunicator<dsp::MpiCommunicator>;
  static_assert(dsp::AsyncPeerExchange<Counted>);
  Counted cc{world()};
  std::mt19937 rng(63);
  for (int c = 0; c < 6; ++c) {
    const auto g = random_extents<3>(rng);
    dsp::DistTensor<std::int32_t, 3, dsp::Sharded<0>, Counted> x{cc, g};
    fill(x);
    dsp::DistTensor<std::int32_t, 3, dsp::Sharded<2>, Counted> y{cc, g};
    cc.reset();
    dsp::start_switch<2>(x, y).wait();
    const auto model =
        dsp::transition_cost<dsp::Sharded<0>, dsp::Sharded<2>>(g, 4, std::size_t(cc.size()), std::size_t(cc.rank()));
    CHECK(cc.counts().bytes_sent == model.bytes);
    CHECK(count_wrong(y) == 0);
  }
}

TEST_CASE("a split-phase switch of short runs posts one packed message per peer, of long runs one per run") {
  // Sharded<1> -> Sharded<2> of [64, 8, 64]: each peer's block is 64 x (8 / P) runs (more than
  // kMaxPostedRuns = 16), so the posted exchange packs it (one message per peer) instead of sending
  // every run. Sharded<0> -> Sharded<1> of [8, 64, 64]: at most ceil(8 / P) runs, sent as they are.
  using Counted = dsp::CountingCommunicator<dsp::MpiCommunicator>;
  Counted cc{world()};
  const std::size_t p = std::size_t(cc.size()), peers = p - 1;
  {
    dsp::DistTensor<std::int32_t, 3, dsp::Sharded<1>, Counted> x{cc, {64, 8, 64}};
    fill(x);
    dsp::DistTensor<std::int32_t, 3, dsp::Sharded<2>, Counted> y{cc, {64, 8, 64}};
    cc.reset();
    dsp::start_switch<2>(x, y).wait();
    CHECK(count_wrong(y) == 0);
    if (x.local_size() > 0) CHECK(cc.counts().messages == peers);  // 8 / P rows: every rank has a block at P <= 8
  }
  {
    dsp::DistTensor<std::int32_t, 3, dsp::Sharded<0>, Counted> x{cc, {8, 64, 64}};
    fill(x);
    dsp::DistTensor<std::int32_t, 3, dsp::Sharded<1>, Counted> y{cc, {8, 64, 64}};
    cc.reset();
    dsp::start_switch<1>(x, y).wait();
    CHECK(count_wrong(y) == 0);
    CHECK(cc.counts().messages == x.local_extents()[0] * peers);  // one run of this rank's rows per peer
  }
}

TEST_CASE("a backend without split-phase exchange switches at start, and wait reports every block") {
  using Staged = dsp::StagedCommunicator<dsp::MpiCommunicator, Kokkos::HostSpace>;
  static_assert(!dsp::AsyncPeerExchange<Staged>);
  Staged s{world()};
  dsp::DistTensor<std::int32_t, 3, dsp::Sharded<0>, Staged> x{s, {7, 9, 2}};
  fill(x);
  dsp::DistTensor<std::int32_t, 3, dsp::Sharded<1>, Staged> y{s, {7, 9, 2}};
  auto h = dsp::start_switch<1>(x, y);
  CHECK(count_wrong(y) == 0);  // already there
  Coverage<decltype(y)> cov(y);
  h.wait(cov);
  CHECK(cov.exactly_once());
}

TEST_CASE("switch_each reports no empty block, the own one included") {
  // Dim 1 has one element: at two or more ranks some ranks' output blocks are empty.
  const std::array<std::size_t, 3> g{4, 1, 3};
  X0 x{world(), g};
  fill(x);
  X1 y{world(), g};
  std::size_t empty = 0, reported = 0;
  dsp::switch_each<1>(x, y, [&](const auto& block, const auto&, int) {
    ++reported;
    if (block.size() == 0) ++empty;
  });
  CHECK(empty == 0);
  CHECK(count_wrong(y) == 0);
  if (y.local_size() == 0) CHECK(reported == 0);
}

TEST_CASE("a block function that throws something not derived from std::exception: every rank raises") {
  // Issue 21: the other ranks hung in the end-of-wait agreement.
  const int n = world().size(), me = world().rank();
  for (int who = 0; who < n; ++who) {
    for (int where = 0; where < 3; ++where) {  // switch_each, gather_each, wait(on_block)
      X0 x{world(), {9, 8, 3}};
      fill(x);
      X1 y{world(), {9, 8, 3}};
      R3 r{world(), {9, 8, 3}};
      auto f = [&](auto&&, auto&&, int) {
        if (me == who) throw 42;
      };
      int own = 0;
      std::string other;
      try {
        if (where == 0) dsp::switch_each<1>(x, y, f);
        else if (where == 1) dsp::gather_each(x, r, f);
        else dsp::start_switch<1>(x, y).wait(f);
      } catch (int v) {
        own = v;
      } catch (const dsp::MismatchError& e) {
        other = e.what();
      }
      CHECK(own == (me == who ? 42 : 0));
      if (me != who)
        CHECK(other.find("rank " + std::to_string(who) + " could not take part because it failed while") !=
              std::string::npos);
      CHECK(count_wrong(x) == 0);
    }
  }
  X1 again{world(), {9, 8, 3}};
  X0 x{world(), {9, 8, 3}};
  fill(x);
  dsp::dynamic_switch<1>(x, again);  // the communicator still works
  CHECK(count_wrong(again) == 0);
}

TEST_CASE("a handle whose wait failed never reports success: wait and test raise again") {
  // Issue 21: a second wait() returned normally with the output incomplete.
  X0 x{world(), {9, 8, 3}};
  fill(x);
  X1 y{world(), {9, 8, 3}};
  auto h = dsp::start_switch<1>(x, y);
  auto f = [&](auto&&, auto&&, int) { throw std::runtime_error("failed in a block function"); };
  CHECK_THROWS(h.wait(f));
  CHECK(h.waited());
  CHECK_THROWS(h.wait());
  CHECK_THROWS(h.wait());
  CHECK_THROWS(h.test());
  if (world().size() == 1) return;
  // A communicator that timed out while the operation was in flight: wait raises every time.
  const int n = world().size(), r = world().rank();
  dsp::MpiCommunicator c{MPI_COMM_WORLD};  // given up below
  dsp::DistTensor<std::int32_t, 3, dsp::Sharded<0>, dsp::MpiCommunicator> a{c, {64, 64, 8}};
  fill(a);
  dsp::DistTensor<std::int32_t, 3, dsp::Sharded<1>, dsp::MpiCommunicator> b{c, {64, 64, 8}};
  auto g = dsp::start_switch<1>(a, b);
  dsp::set_collective_deadline(std::chrono::milliseconds(200));
  if (r != n - 1) CHECK_THROWS_AS(dsp::gather(a), dsp::TimeoutError);
  MPI_Barrier(MPI_COMM_WORLD);
  if (r == n - 1) CHECK_THROWS_AS(dsp::gather(a), dsp::TimeoutError);
  dsp::set_collective_deadline(std::chrono::milliseconds(0));
  CHECK_THROWS_AS(g.wait(), dsp::UsageError);
  CHECK_THROWS_AS(g.wait(), dsp::UsageError);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("reading an output in flight raises UsageError naming the start (DSP_CHECK_IN_FLIGHT)") {
  // Regression: the guard was compiled out with NDEBUG (CMake's Release, what
  // users build), and a read before wait() gave stale data silently.
  static_assert(DSP_CHECK_IN_FLIGHT,
                "the in-flight guard is on by default, NDEBUG or not (tests/CMakeLists.txt "
                "defines nothing)");
#ifdef NDEBUG
  MESSAGE("built with NDEBUG: the guard is on there too");
#endif
  X0 x{world(), {9, 8, 3}};
  fill(x);
  X1 y{world(), {9, 8, 3}};
  X1 alias = y;  // a copy shares the block
  auto h = dsp::start_switch<1>(x, y);
  const int line = __LINE__ - 1;
  const bool in_flight = world().size() > 1 && y.local_size() > 0;  // one rank: complete at start
  if (in_flight) {
    std::string e;
    try {
      (void)alias.local();
    } catch (const dsp::UsageError& u) {
      e = u.what();
    }
    CHECK(e.find("the output of a split-phase operation still in flight (dsp::start_switch called at ") !=
          std::string::npos);
    CHECK(e.find("test_async.cpp:" + std::to_string(line)) != std::string::npos);
    CHECK_THROWS_AS((void)h.output().local(), dsp::UsageError);
  }
  (void)x.local();  // the input may be read
  auto moved = std::move(h);
  if (in_flight) CHECK_THROWS_AS((void)y.local(), dsp::UsageError);
  moved.wait();
  CHECK(count_wrong(y) == 0);  // reads y.local(): allowed after wait
  {
    R3 r{world(), {9, 8, 3}};
    auto k = dsp::start_gather(x, r);
  }  // destroyed: it waited, and the mark is gone
  R3 r2{world(), {9, 8, 3}};
  dsp::gather_each(x, r2, [&](const auto& block, auto&&, int) { CHECK(block.size() > 0); });
  CHECK(count_wrong(r2) == 0);
}
