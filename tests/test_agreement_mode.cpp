// SPDX-License-Identifier: BSD-3-Clause
// AgreementMode::first_call: the first call of each call description on a
// communicator is checked in full, identical later calls run with no control
// collective (counted: 0), a new description (another shape, site, wire,
// setting) is checked in full again, ranks in different modes raise on every
// rank (every time: nothing is ever cached then), the operations outside the
// data path (construction from a view, meshes) are checked every time, and
// release_workspaces() on some ranks only changes nothing.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <dsp/dsp.hpp>

#include <string>

using namespace dsp_test;

namespace {
using C = dsp::CountingCommunicator<dsp::MpiCommunicator>;
struct FirstCall {
  FirstCall() { dsp::set_agreement_mode(dsp::AgreementMode::first_call); }
  ~FirstCall() { dsp::set_agreement_mode(dsp::AgreementMode::every_call); }
};
}  // namespace

TEST_CASE("first_call: a warm switch, gather, batch, split-phase switch and mesh step make no control collective") {
  FirstCall mode;
  C comm{dsp::MpiCommunicator{MPI_COMM_WORLD}};  // a communicator of its own: its set of agreed calls starts empty
  const std::array<std::size_t, 3> g{7, 6, 5};
  dsp::DistTensor<float, 3, dsp::Sharded<0>, C> x{comm, g}, k{comm, g}, v{comm, g};
  dsp::DistTensor<float, 3, dsp::Sharded<1>, C> y{comm, g}, k1{comm, g}, v1{comm, g};
  dsp::DistTensor<float, 3, dsp::Replicated, C> r{comm, g};
  fill(x), fill(k), fill(v);
  auto calls = [&](int round) {
    dsp::dynamic_switch<1>(x, y);
    dsp::gather(x, r);
    dsp::dynamic_switch<1>(dsp::batch(x, k, v), dsp::batch(y, k1, v1));
    auto h = dsp::start_switch<1>(x, y);
    h.wait();
    dsp::dynamic_switch<1>(x, y, dsp::Wire::bf16);
    (void)round;
  };
  comm.reset();
  calls(0);
  const std::size_t first = comm.counts().control;
  CHECK(first >= 5);  // each call checked once in full (a split-phase wait's settle included or not)
  for (int round = 1; round < 4; ++round) {
    comm.reset();
    calls(round);
    CHECK(comm.counts().control == 0);
  }
  CHECK(count_wrong(y) == 0);
  CHECK(count_wrong(r) == 0);
  CHECK(count_wrong(k1) + count_wrong(v1) == 0);
  // Another shape is another description: checked in full once, then not.
  dsp::DistTensor<float, 3, dsp::Sharded<0>, C> x2{comm, {9, 6, 5}};
  dsp::DistTensor<float, 3, dsp::Sharded<1>, C> y2{comm, {9, 6, 5}};
  fill(x2);
  auto again = [&] { dsp::dynamic_switch<1>(x2, y2); };  // one call site
  comm.reset();
  again();
  CHECK(comm.counts().control == 1);
  comm.reset();
  again();
  CHECK(comm.counts().control == 0);
  CHECK(count_wrong(y2) == 0);
  // Outside the data path: a tensor from a view agrees every time.
  comm.reset();
  dsp::DistTensor<float, 3, dsp::Sharded<0>, C> w1{comm, g, x.local()};
  dsp::DistTensor<float, 3, dsp::Sharded<0>, C> w2{comm, g, x.local()};
  CHECK(comm.counts().control == 2);
}

TEST_CASE("first_call: a call that differs on one rank the first time raises on every rank") {
  FirstCall mode;
  dsp::MpiCommunicator comm{MPI_COMM_WORLD};
  const int me = comm.rank(), n = comm.size();
  if (n == 1) return;
  dsp::DistTensor<float, 2, dsp::Sharded<0>, dsp::MpiCommunicator> x{comm, {6, me == n - 1 ? 7u : 6u}};
  fill(x);
  for (int k = 0; k < 3; ++k) {  // never cached: every call checks, every call raises
    const std::string e = error_of([&] { (void)dsp::dynamic_switch<1>(x); });
    CHECK(e.find("global extents disagree") != std::string::npos);
  }
  CHECK(count_wrong(x) == 0);
}

TEST_CASE("ranks in different agreement modes raise on every rank, every call") {
  dsp::MpiCommunicator comm{MPI_COMM_WORLD};
  const int me = comm.rank(), n = comm.size();
  if (n == 1) return;
  dsp::DistTensor<float, 2, dsp::Sharded<0>, dsp::MpiCommunicator> x{comm, {6, 5}};
  fill(x);
  if (me == 0) dsp::set_agreement_mode(dsp::AgreementMode::first_call);
  for (int k = 0; k < 3; ++k) {
    const std::string e = error_of([&] { (void)dsp::dynamic_switch<1>(x); });
    CHECK(e.find("agreement modes disagree (dsp::set_agreement_mode or DSP_AGREEMENT_MODE): rank 0 first_call, "
                 "rank 1 every_call") != std::string::npos);
  }
  dsp::set_agreement_mode(dsp::AgreementMode::every_call);
  CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
}

TEST_CASE("first_call: release_workspaces on one rank only keeps the ranks in step") {
  FirstCall mode;
  C comm{dsp::MpiCommunicator{MPI_COMM_WORLD}};
  dsp::DistTensor<float, 3, dsp::Sharded<0>, C> x{comm, {8, 6, 4}};
  dsp::DistTensor<float, 3, dsp::Sharded<2>, C> y{comm, {8, 6, 4}};
  fill(x);
  auto call = [&] { dsp::dynamic_switch<2>(x, y); };  // one call site
  call();
  if (comm.rank() == 0) dsp::release_workspaces();
  comm.reset();
  call();  // every rank still skips: none waits for another
  CHECK(comm.counts().control == 0);
  CHECK(count_wrong(y) == 0);
}
