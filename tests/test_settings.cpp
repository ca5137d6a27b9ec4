// SPDX-License-Identifier: BSD-3-Clause
// Settings and their environment variables: unknown values raise on every
// rank, naming the accepted ones, instead of being ignored. Also run (see
// tests/CMakeLists.txt) with DSP_SWITCH_ALGORITHM=pairwize, DSP_AGREEMENT_CHECKS
// =false and =nope, DSP_PLANNING=measur and =measure in the environment.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

using namespace dsp_test;

namespace {
std::string env(const char* name) {
  const char* e = std::getenv(name);
  return e ? e : "";
}
}  // namespace

TEST_CASE("an unknown environment value raises on every rank and names the accepted values") {
  dsp::DistTensor<float, 2, dsp::Sharded<0>, dsp::MpiCommunicator> x{world(), {6, 5}};
  fill(x);
  const std::string e = error_of([&] { dsp::dynamic_switch<1>(x); });
  if (env("DSP_SWITCH_ALGORITHM") == "pairwize") {
    // Regression: the value was ignored and the switch ran with `automatic`.
    CHECK(e.find("DSP_SWITCH_ALGORITHM=pairwize is not a value dsp accepts") != std::string::npos);
    CHECK(e.find("automatic, alltoall, alltoallv, pairwise, datatypes") != std::string::npos);
    dsp::set_switch_algorithm(dsp::SwitchAlgorithm::pairwise);  // a call replaces the bad value
  } else if (env("DSP_AGREEMENT_CHECKS") == "false") {
    // `false` is accepted now; before, anything but 0 or off left checks on.
    CHECK(e.empty());
    CHECK(!dsp::agreement_checks());
    dsp::set_agreement_checks(true);  // the cases below need the check
  } else if (env("DSP_AGREEMENT_CHECKS") == "nope") {
    CHECK(e.find("DSP_AGREEMENT_CHECKS=nope is not a value dsp accepts; accepted: 1, on, true, yes, 0, off") !=
          std::string::npos);
    dsp::set_agreement_checks(true);
  } else if (env("DSP_PLANNING") == "measur") {
    CHECK(e.find("DSP_PLANNING=measur is not a value dsp accepts; accepted: heuristic, measure") != std::string::npos);
    dsp::set_planning(dsp::Planning::heuristic);
  } else if (env("DSP_PLANNING") == "measure") {
    CHECK(e.empty());
    CHECK(dsp::planning() == dsp::Planning::measure);
    if (world().size() > 1) CHECK(dsp::export_wisdom().find("\nswitch world=") != std::string::npos);
  } else {
    CHECK(e.empty());
  }
  CHECK(error_of([&] { CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0); }).empty());
}

TEST_CASE("boolean environment values") {
  setenv("DSP_TEST_FLAG", "off", 1);
  CHECK(dsp::detail::env_bool("DSP_TEST_FLAG", true).value == false);
  setenv("DSP_TEST_FLAG", "yes", 1);
  CHECK(dsp::detail::env_bool("DSP_TEST_FLAG", false).value == true);
  setenv("DSP_TEST_FLAG", "maybe", 1);
  const auto s = dsp::detail::env_bool("DSP_TEST_FLAG", true);
  CHECK(s.value == true);
  CHECK(s.error.find("DSP_TEST_FLAG=maybe") != std::string::npos);
  unsetenv("DSP_TEST_FLAG");
}

TEST_CASE("a bad setting on one rank only: that rank InvalidArgument, the others MismatchError") {
  if (world().size() == 1) return;
  dsp::DistTensor<float, 2, dsp::Sharded<0>, dsp::MpiCommunicator> x{world(), {6, 5}};
  fill(x);
  auto& s = dsp::detail::switch_setting();
  const auto saved = s;
  if (world().rank() == 1) s.error = "DSP_SWITCH_ALGORITHM=x is not a value dsp accepts";
  bool invalid = false, mismatch = false;
  try {
    dsp::dynamic_switch<1>(x);
  } catch (const dsp::InvalidArgument&) {
    invalid = true;
  } catch (const dsp::MismatchError& e) {
    mismatch = std::string(e.what()).find("a dsp setting from its environment is invalid") != std::string::npos;
  }
  s = saved;
  CHECK(invalid == (world().rank() == 1));
  CHECK(mismatch == (world().rank() != 1));
}

TEST_CASE("a rank that never arrives: with a deadline the others raise TimeoutError naming it") {
  // Regression: the waiting ranks waited forever with nothing said.
  const int n = world().size(), r = world().rank();
  if (n == 1) return;
  dsp::MpiCommunicator c{MPI_COMM_WORLD};  // this communicator is given up below
  dsp::DistTensor<float, 2, dsp::Sharded<0>, dsp::MpiCommunicator> x{c, {6, 5}};
  dsp::set_collective_deadline(std::chrono::milliseconds(300));
  std::string e;
  if (r != n - 1) {
    e = error_of([&] { dsp::dynamic_switch<1>(x); });
    INFO(e);
    CHECK(e.find("dsp::dynamic_switch: rank(s) " + std::to_string(n - 1) + " of " + std::to_string(n) +
                 " did not reach this collective within 300 ms") != std::string::npos);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the last rank arrives only after the others gave up
  if (r == n - 1) {
    e = error_of([&] { dsp::dynamic_switch<1>(x); });
    CHECK(e.find("gave up waiting for rank " + std::to_string(r)) != std::string::npos);
  }
  // The communicator is unusable from now on, on every rank.
  CHECK(error_of([&] { dsp::gather(x); }).find("timed out in an earlier collective") != std::string::npos);
  dsp::set_collective_deadline(std::chrono::milliseconds(0));
  // The ranks go on with another communicator; deadlines still let agreeing ranks through.
  dsp::set_collective_deadline(std::chrono::milliseconds(10000));
  dsp::DistTensor<float, 2, dsp::Sharded<0>, dsp::MpiCommunicator> y{world(), {6, 5}};
  fill(y);
  CHECK(count_wrong(dsp::dynamic_switch<1>(y)) == 0);
  dsp::set_collective_deadline(std::chrono::milliseconds(0));
}

TEST_CASE("a rank that arrived in time but outlived another's deadline raises instead of hanging") {
  // Regression (two hangs, needing 3 ranks): rank 0 gives up at 1 s, before
  // the last rank comes at 1.3 s; the ranks between, there at 0.6 s, then get
  // every rank's bytes within their own deadline. They went on alone: into
  // the data exchange when the calls matched, into a second, untimed
  // exchange of the whole signatures when they did not.
  const int n = world().size(), r = world().rank();
  if (n < 3 || !dsp::agreement_checks()) return;
  for (const bool same_call : {true, false}) {
    CAPTURE(same_call);
    dsp::MpiCommunicator c{MPI_COMM_WORLD};  // given up below
    const std::size_t rows = same_call || r != 1 ? 6 : 9;
    dsp::DistTensor<float, 2, dsp::Sharded<0>, dsp::MpiCommunicator> x{c, {rows, 5}};
    dsp::set_collective_deadline(std::chrono::milliseconds(1000));
    MPI_Barrier(MPI_COMM_WORLD);
    if (r != 0) std::this_thread::sleep_for(std::chrono::milliseconds(r == n - 1 ? 1300 : 600));
    const std::string e = error_of([&] { dsp::dynamic_switch<1>(x); });
    INFO(e);
    if (r == 0)
      CHECK(e.find("rank(s) " + std::to_string(n - 1) + " of " + std::to_string(n) + " did not reach") !=
            std::string::npos);
    else if (r == n - 1) CHECK(e.find("rank(s) 0 gave up waiting for rank " + std::to_string(r)) != std::string::npos);
    else CHECK(e.find("rank(s) 0 gave up waiting for other ranks at this collective") != std::string::npos);
    CHECK(error_of([&] { dsp::gather(x); }).find("timed out in an earlier collective") != std::string::npos);
    dsp::set_collective_deadline(std::chrono::milliseconds(0));
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST_CASE("a very large deadline means far away: collectives go through, none times out at once") {
  // Issue 21: steady_clock::now() + deadline overflowed, the deadline lay in the past and every
  // collective raised TimeoutError at once (and gave up its communicator).
  for (auto d : {std::chrono::milliseconds(std::chrono::hours(24 * 365 * 1000)), std::chrono::milliseconds::max(),
                 std::chrono::milliseconds(std::chrono::hours(24 * 365 * 300))}) {
    dsp::MpiCommunicator c{MPI_COMM_WORLD};
    dsp::DistTensor<float, 2, dsp::Sharded<0>, dsp::MpiCommunicator> x{c, {6, 5}};
    fill(x);
    dsp::set_collective_deadline(d);
    std::string e = error_of([&] { CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0); });
    CHECK(e.empty());
    e = error_of([&] { CHECK(count_wrong(dsp::gather(x)) == 0); });
    CHECK(e.empty());
    dsp::set_collective_deadline(std::chrono::milliseconds(0));
  }
  // The saturation itself: never earlier than now.
  const auto now = std::chrono::steady_clock::now();
  CHECK(dsp::detail::deadline_after(std::chrono::milliseconds::max()) == std::chrono::steady_clock::time_point::max());
  CHECK(dsp::detail::deadline_after(std::chrono::milliseconds(5)) >= now);
}

TEST_CASE("a refused DSP_DEADLINE_SECONDS names the whole accepted range") {
  const char* saved = std::getenv("DSP_DEADLINE_SECONDS");
  const std::string keep = saved ? saved : "";
  auto& s = dsp::detail::deadline_setting();
  const auto before = s;
  for (const char* v : {"1e10", "-1", "ten"}) {
    setenv("DSP_DEADLINE_SECONDS", v, 1);
    s = dsp::detail::read_deadline_env();  // the variable is read once; read it again as dsp does
    INFO(s.error);
    CHECK(s.error.find(std::string("DSP_DEADLINE_SECONDS=") + v + " is not a value dsp accepts") != std::string::npos);
    CHECK(s.error.find("from 0 to 1e9") != std::string::npos);
  }
  s = before;
  if (saved) setenv("DSP_DEADLINE_SECONDS", keep.c_str(), 1);
  else unsetenv("DSP_DEADLINE_SECONDS");
}
