// SPDX-License-Identifier: BSD-3-Clause
// Typed pipelines on one rank: composition types, the adjoint derived from the
// types, the constexpr cost model (checked by static_assert against hand
// arithmetic, uneven partitions included), and running a pipeline.
#include <dsp/dsp.hpp>

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <type_traits>

namespace {

using dsp::Replicated;
using dsp::Sharded;
namespace st = dsp::steps;

constexpr auto fig11 = st::split<1> | st::switch_to<2> | st::switch_to<1> | st::gather;

// Composition types.
static_assert(decltype(fig11)::size == 4);
static_assert(std::is_same_v<decltype(fig11)::default_input, Replicated>);
static_assert(std::is_same_v<decltype(fig11)::output_layout<Replicated>, Replicated>);
static_assert(std::is_same_v<decltype(st::split<1> | st::switch_to<2>)::output_layout<Replicated>, Sharded<2>>);
static_assert(std::is_same_v<decltype(st::switch_to<0>)::output_layout<Sharded<2>>, Sharded<0>>);
static_assert(std::is_same_v<decltype(st::switch_to<0>)::default_input, dsp::detail::UnknownLayout>);

// The adjoint: reverse order, switch i->j as j->i, split and gather swapped.
constexpr auto fwd = st::split<1> | st::switch_to<2> | st::switch_to<0>;
static_assert(std::is_same_v<std::remove_const_t<decltype(fwd.adjoint())>,
                             std::remove_const_t<decltype(st::switch_to<2> | st::switch_to<1> | st::gather)>>);
static_assert(std::is_same_v<decltype(fwd.adjoint().adjoint<Sharded<0>>()), std::remove_const_t<decltype(fwd)>>);
static_assert(std::is_same_v<decltype(fig11.inverse()), std::remove_const_t<decltype(fig11)>>);
constexpr auto mid = st::switch_to<3> | st::gather;
static_assert(std::is_same_v<decltype(mid.adjoint<Sharded<1>>()),
                             std::remove_const_t<decltype(st::split<3> | st::switch_to<1>)>>);

// Cost model, even partition: [B, T, S, C] = [2, 8, 12, 4] floats over 4 ranks.
constexpr std::array<std::size_t, 4> ev{2, 8, 12, 4};
constexpr auto c_even = fig11.cost(ev, 4, 4, 1);
static_assert(c_even.steps[0].primitive == dsp::Primitive::split && c_even.steps[0].bytes == 0 &&
              c_even.steps[0].collectives == 0);
// switch T -> S: local [2, 2, 12, 4]; 3 peers get [2, 2, 3, 4] each.
static_assert(c_even.steps[1].collective == dsp::Collective::all_to_all && c_even.steps[1].collectives == 1);
static_assert(c_even.steps[1].bytes == 3 * 2 * 2 * 3 * 4 * 4 && c_even.steps[1].max_bytes == c_even.steps[1].bytes);
static_assert(c_even.steps[2].bytes == c_even.steps[1].bytes);
// gather of [2, 2, 12, 4] per rank to 3 others.
static_assert(c_even.steps[3].collective == dsp::Collective::all_gather &&
              c_even.steps[3].bytes == 3 * 2 * 2 * 12 * 4 * 4);
static_assert(c_even.collectives == 3);
static_assert(c_even.bytes == 2 * 576 + 2304 && c_even.max_bytes == c_even.bytes);

// Uneven: T = 7, S = 5 over 3 ranks: T counts 3, 2, 2; S counts 2, 2, 1.
constexpr std::array<std::size_t, 4> un{1, 7, 5, 2};
constexpr auto sw = st::split<1> | st::switch_to<2>;
static_assert(sw.cost(un, 8, 3, 0).steps[1].bytes == 8 * 1 * 3 * (5 - 2) * 2);  // rank 0: 3 rows of T, 3 of S away
static_assert(sw.cost(un, 8, 3, 2).steps[1].bytes == 8 * 1 * 2 * (5 - 1) * 2);  // rank 2: 2 rows of T, 4 of S away
static_assert(sw.cost(un, 8, 3, 1).bytes == 8 * 1 * 2 * (5 - 2) * 2);           // rank 1: 96 bytes
static_assert(sw.cost(un, 8, 3, 1).steps[1].max_bytes == 144);                  // max over ranks: rank 0
constexpr auto two = st::split<1> | st::switch_to<2> | st::switch_to<1>;

// N = 1 and empty tensors: nothing crosses ranks.
static_assert(fig11.cost(ev, 4, 1, 0).bytes == 0 && fig11.cost(ev, 4, 1, 0).collectives == 0);
static_assert(fig11.cost(std::array<std::size_t, 4>{2, 0, 3, 4}, 4, 4, 0).collectives == 0);
// Identity switch costs nothing.
static_assert((st::split<2> | st::switch_to<2>).cost(ev, 4, 4, 0).bytes == 0);

// A communication budget checked at compile time.
constexpr std::size_t budget = 64 * 1024;
static_assert(fig11.cost(std::array<std::size_t, 4>{1, 16, 64, 8}, 4, 8, 0).max_bytes <= budget);

// Table 3 at the paper's scale, at compile time: the 720M model (hidden 1152,
// 16 heads), a 64-frame video of 4096 spatial tokens, bf16, N = 8. DSP switches
// [B, T, S, C] T -> S -> T; Ulysses moves q, k, v [B, T, S, H, d] T -> heads and
// the output back. M = B*T*S*C*2 bytes; a rank's own share is not sent.
constexpr std::size_t pB = 1, pT = 64, pS = 4096, pC = 1152, pH = 16, pN = 8, pe = 2;
constexpr std::size_t pM = pB * pT * pS * pC * pe;
constexpr std::array<std::size_t, 4> p4{pB, pT, pS, pC};
constexpr std::array<std::size_t, 5> p5{pB, pT, pS, pH, pC / pH};
constexpr auto dsp_cost = (st::switch_to<2> | st::switch_to<1>).cost<Sharded<1>>(p4, pe, pN, 0);
constexpr std::size_t ulysses_bytes = 3 * st::switch_to<3>.cost<Sharded<1>>(p5, pe, pN, 0).max_bytes +
                                      st::switch_to<1>.cost<Sharded<3>>(p5, pe, pN, 0).max_bytes;
static_assert(dsp_cost.collectives == 2 && dsp_cost.max_bytes * pN * pN == 2 * pM * (pN - 1));
static_assert(ulysses_bytes == 2 * dsp_cost.max_bytes);
static_assert(dsp_cost.max_bytes < 200u * 1024 * 1024);  // a budget: under 200 MiB per device per layer

}  // namespace

TEST_CASE("pipeline cost: per-rank totals and the max over ranks, uneven") {
  // Sharded<1> -> Sharded<2> -> Sharded<1> on [1, 7, 5, 2] over 3 ranks, by hand.
  const std::size_t tc[3] = {3, 2, 2}, sc[3] = {2, 2, 1};
  std::size_t maxb = 0;
  for (std::size_t p = 0; p < 3; ++p) {
    const std::size_t there = 8 * 2 * tc[p] * (5 - sc[p]);  // T rows held, S rows sent away
    const std::size_t back = 8 * 2 * sc[p] * (7 - tc[p]);   // S rows held, T rows sent away
    const auto c = two.cost(un, 8, 3, p);
    CHECK(c.steps[1].bytes == there);
    CHECK(c.steps[2].bytes == back);
    CHECK(c.bytes == there + back);
    CHECK(c.collectives == 2);
    maxb = std::max(maxb, there + back);
  }
  CHECK(two.cost(un, 8, 3, 0).max_bytes == maxb);
  CHECK(two.cost(un, 8, 3, 0).steps[1].max_bytes == 8 * 2 * std::max({3 * 3, 2 * 3, 2 * 4}));
}

TEST_CASE("cost model: a rank outside [0, N) or N = 0 is an error") {
  CHECK_THROWS_AS((void)fig11.cost(ev, 4, 4, 4), dsp::InvalidArgument);
  CHECK_THROWS_AS((void)fig11.cost(ev, 4, 0, 0), dsp::InvalidArgument);
  CHECK_THROWS_AS((void)(dsp::transition_cost<Sharded<0>, Sharded<1>>(ev, 4, 2, 2)), dsp::InvalidArgument);
}

// Host memory in every build: these checks read the blocks on the host, and a
// CUDA build's default SelfCommunicator holds device memory.
using HostSelf = dsp::BasicSelfCommunicator<Kokkos::HostSpace>;

TEST_CASE("pipeline runs its steps on one rank, and its adjoint undoes it") {
  using Comm = HostSelf;
  Comm c;
  dsp::DistTensor<std::int32_t, 4, Replicated, Comm> x{c, {2, 3, 5, 4}};
  auto v = x.local();
  for (std::size_t k = 0; k < v.size(); ++k) v.data()[k] = std::int32_t(k * 7 + 1);
  auto y = fwd(x);
  static_assert(std::is_same_v<typename decltype(y)::layout_type, Sharded<0>>);
  auto z = fwd.adjoint()(y);
  static_assert(std::is_same_v<typename decltype(z)::layout_type, Replicated>);
  auto out = fig11(x);
  for (std::size_t k = 0; k < v.size(); ++k) {
    CHECK(y.local().data()[k] == v.data()[k]);
    CHECK(z.local().data()[k] == v.data()[k]);
    CHECK(out.local().data()[k] == v.data()[k]);
  }
  CHECK(z.local().data() != x.local().data());  // a new tensor; the input is untouched
  auto same = dsp::Pipeline<>{}(x);             // the empty pipeline is the identity
  CHECK(same.local().data() == x.local().data());
}

static_assert(dsp::Communicator<dsp::CountingCommunicator<HostSelf>>);

TEST_CASE("counting communicator on one rank: nothing is sent to other ranks") {
  using Comm = dsp::CountingCommunicator<HostSelf>;
  Comm c{HostSelf{}};
  dsp::DistTensor<double, 3, Replicated, Comm> x{c, {3, 4, 5}};
  auto v = x.local();
  for (std::size_t k = 0; k < v.size(); ++k) v.data()[k] = double(k) * 0.5;
  auto y = (st::split<2> | st::switch_to<0> | st::gather)(x);
  for (std::size_t k = 0; k < v.size(); ++k) CHECK(y.local().data()[k] == v.data()[k]);
  CHECK(c.counts().bytes_sent == 0);
  if (dsp::agreement_checks()) CHECK(c.counts().control > 0);  // the checks went through the decorator
  CHECK(c.counts().control_bytes == 0);
  double b = 1;
  c.broadcast(&b, 1, sizeof(double), 0);
  CHECK(c.counts().broadcast == 1);
  CHECK(c.counts().bytes_sent == 0);
}

TEST_CASE("the cost model refuses byte counts past size_t instead of wrapping") {
  // Regression: float [2^22]^3 gave 0 bytes, so a static_assert budget passed.
  // In a constant expression this is a compile error (compile_fail/fail_cost_overflow.cpp).
  const std::array<std::size_t, 3> e{std::size_t(1) << 22, std::size_t(1) << 22, std::size_t(1) << 22};
  CHECK_THROWS_AS((dsp::transition_cost<dsp::Sharded<0>, dsp::Sharded<1>>(e, sizeof(float), 2, 0)),
                  dsp::InvalidArgument);
  CHECK_THROWS_AS((dsp::transition_cost<dsp::Sharded<0>, dsp::Replicated>(e, sizeof(float), 2, 0)),
                  dsp::InvalidArgument);
  constexpr auto p = dsp::steps::split<0> | dsp::steps::switch_to<1>;
  CHECK_THROWS_AS(p.cost(e, sizeof(float), 2, 0), dsp::InvalidArgument);
  // just below the limit it is exact: 2^21 * 2^21 * 2^20 floats over 2 ranks
  const std::array<std::size_t, 3> big{std::size_t(1) << 21, std::size_t(1) << 21, std::size_t(1) << 20};
  const auto c = dsp::transition_cost<dsp::Sharded<0>, dsp::Sharded<1>>(big, sizeof(float), 2, 0);
  CHECK(c.bytes == (std::size_t(1) << 62));  // 4 bytes * 2^20 (dim 2) * 2^20 (own rows) * 2^20 (the peer's columns)
}

namespace mesh_pipelines {
using dsp::Axes;
using dsp::Partial;
using dsp::Replicated;
using dsp::Sharded;
namespace st = dsp::steps;

// A reduce-scatter on axis 0 of a 2-D mesh, then a switch on axis 1.
using In = Axes<Partial<>, Sharded<1>>;
constexpr auto fwd = st::to<Axes<Sharded<0>, Sharded<1>>> | st::to<Axes<Sharded<0>, Sharded<2>>>;
static_assert(std::is_same_v<decltype(fwd)::output_layout<In>, Axes<Sharded<0>, Sharded<2>>>);
using RS = dsp::redistribute_plan<In, Axes<Sharded<0>, Sharded<1>>, 3>;
static_assert(RS::size() == 1 && RS::step(0).kind == dsp::StepKind::reduce_scatter && RS::step(0).axis == 0);

// The adjoint: the gradient moves back, and Partial reads as Replicated, so
// the adjoint of the reduce-scatter is an all-gather on the same axis.
constexpr auto back = fwd.adjoint<In>();
static_assert(std::is_same_v<decltype(back), const dsp::Pipeline<dsp::detail::ToStep<Axes<Sharded<0>, Sharded<1>>>,
                                                                 dsp::detail::ToStep<Axes<Replicated, Sharded<1>>>>>);
using AG = dsp::redistribute_plan<Axes<Sharded<0>, Sharded<1>>, Axes<Replicated, Sharded<1>>, 3>;
static_assert(AG::size() == 1 && AG::step(0).kind == dsp::StepKind::gather && AG::step(0).axis == 0);

// Mesh cost: the steps' exact costs, and the pipeline's is their sum.
constexpr std::array<std::size_t, 3> e{6, 10, 4};
constexpr std::array<int, 2> shape{2, 3}, at{1, 2};
constexpr auto c = fwd.cost<In>(e, 8, shape, at);
static_assert(c.steps[0].bytes == RS::cost(e, 8, shape, at).bytes);
static_assert(c.bytes == c.steps[0].bytes + c.steps[1].bytes && c.collectives == 2);
// rank (1, 2) of 2 x 3 holds dims 1 block [7, 10): the reduce-scatter sends
// 8 bytes * (6 * 3 * 4 - 3 * 3 * 4) of its 6 x 3 x 4 block
static_assert(c.steps[0].bytes == 8 * (6 * 3 * 4 - 3 * 3 * 4));
static_assert(c.max_bytes >= c.bytes);

// On a plain communicator: Partial -> Sharded<1> is one reduce-scatter; the
// to<> step costs what the plan says.
constexpr auto rs1 = st::to<Sharded<1>>;
static_assert(rs1.cost<Partial<>>(e, 4, 4, 0).bytes == 4 * (6 * 10 * 4 - 6 * 3 * 4));
static_assert(rs1.cost<Partial<>>(e, 4, 4, 0).steps[0].primitive == dsp::Primitive::redistribute);
// ... and to<Sharded<D>> between Sharded layouts costs what switch_to does
static_assert(st::to<Sharded<0>>.cost<Sharded<1>>(e, 4, 3, 1).bytes ==
              st::switch_to<0>.cost<Sharded<1>>(e, 4, 3, 1).bytes);
}  // namespace mesh_pipelines

TEST_CASE("pipelines of mesh steps: cost and adjoint are checked at compile time") {
  CHECK(mesh_pipelines::c.collectives == 2);
}
