// Misuse across ranks: every rank gets a dsp::Error (no hang: each run has a
// CTest timeout), the input is unchanged, and the communicator works after.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace dsp_test;

namespace {

int rank() { return world().rank(); }
int size() { return world().size(); }

using X0 = dsp::DistTensor<float, 3, dsp::Sharded<0>, dsp::MpiCommunicator>;
using X1 = dsp::DistTensor<float, 3, dsp::Sharded<1>, dsp::MpiCommunicator>;
using X2 = dsp::DistTensor<float, 3, dsp::Sharded<2>, dsp::MpiCommunicator>;

const std::array<std::size_t, 3> g{7, 5, 4};

/// A switch that everybody agrees on still works, and its result is right.
void communicator_still_works() {
  X0 x{world(), g};
  fill(x);
  auto y = dsp::dynamic_switch<1>(x);
  CHECK(count_wrong(y) == 0);
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const dsp::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("global extents that disagree raise on every rank") {
  X0 x{world(), {7 + std::size_t(rank() == size() - 1), 5, 4}};
  fill(x);
  if (size() == 1) {
    CHECK(count_wrong(dsp::dynamic_switch<1>(x)) == 0);
    return;
  }
  const std::string e = error_of([&] { dsp::dynamic_switch<1>(x); });
  CHECK(e.find("global extents disagree") != std::string::npos);
  CHECK(e.find("[8, 5, 4]") != std::string::npos);
  CHECK(count_wrong(x) == 0);
  CHECK(error_of([&] { dsp::gather(x); }).find("global extents disagree") != std::string::npos);
  communicator_still_works();
}

TEST_CASE("input layouts that disagree raise on every rank") {
  if (size() == 1) return;
  std::string e;
  if (rank() == 0) {
    X0 x{world(), g};
    fill(x);
    e = error_of([&] { dsp::dynamic_switch<1>(x); });
    CHECK(count_wrong(x) == 0);
  } else {
    X2 x{world(), g};
    fill(x);
    e = error_of([&] { dsp::dynamic_switch<1>(x); });
    CHECK(count_wrong(x) == 0);
  }
  CHECK(e.find("input layouts disagree") != std::string::npos);
  CHECK(e.find("Sharded<2>") != std::string::npos);
  communicator_still_works();
}

TEST_CASE("target layouts that disagree raise on every rank, identity switch included") {
  if (size() == 1) return;
  X1 x{world(), g};
  fill(x);
  std::string e = rank() == 0 ? error_of([&] { dsp::dynamic_switch<1>(x); })   // identity here
                              : error_of([&] { dsp::dynamic_switch<2>(x); });  // a real switch elsewhere
  CHECK(e.find("target layouts disagree") != std::string::npos);
  CHECK(count_wrong(x) == 0);
  communicator_still_works();
}

TEST_CASE("element types that disagree raise on every rank") {
  if (size() == 1) return;
  std::string e;
  if (rank() == 0) {
    dsp::DistTensor<double, 3, dsp::Sharded<0>, dsp::MpiCommunicator> x{world(), g};
    fill(x);
    e = error_of([&] { dsp::dynamic_switch<1>(x); });
    CHECK(count_wrong(x) == 0);
  } else {
    X0 x{world(), g};
    fill(x);
    e = error_of([&] { dsp::dynamic_switch<1>(x); });
    CHECK(count_wrong(x) == 0);
  }
  CHECK(e.find("element types disagree") != std::string::npos);
  CHECK(e.find("double") != std::string::npos);
  communicator_still_works();
}

TEST_CASE("ranks that call different primitives raise on every rank") {
  if (size() == 1) return;
  X0 x{world(), g};
  fill(x);
  std::string e = rank() == 0 ? error_of([&] { dsp::gather(x); }) : error_of([&] { dsp::dynamic_switch<1>(x); });
  CHECK(e.find("different operations") != std::string::npos);
  communicator_still_works();
}

TEST_CASE("an output of the wrong shape on one rank raises on every rank") {
  X0 x{world(), g};
  fill(x);
  const bool bad = rank() == size() - 1;
  X1 y{world(), {7, 5, bad ? 3u : 4u}};
  const std::string e = error_of([&] { dsp::dynamic_switch<1>(x, y); });
  CHECK(!e.empty());
  if (bad) CHECK(e.find("the output has global extents [7, 5, 3]") != std::string::npos);
  else CHECK(e.find("rank " + std::to_string(size() - 1) + " could not take part") != std::string::npos);
  CHECK(count_wrong(x) == 0);
  communicator_still_works();
}

TEST_CASE("an output that aliases the input is refused") {
  X0 x{world(), g};
  fill(x);
  X0 same = x;  // a shallow copy shares the block
  const std::string e = error_of([&] { dsp::dynamic_switch<0>(x, same); });
  CHECK(e.find("shares memory with the input") != std::string::npos);
  CHECK(count_wrong(x) == 0);
}

TEST_CASE("an output on another communicator is refused") {
  dsp::MpiCommunicator other = world().split(0, rank());  // same ranks, a different communicator
  X0 x{world(), g};
  fill(x);
  X1 y{other, g};
  const std::string e = error_of([&] { dsp::dynamic_switch<1>(x, y); });
  CHECK(e.find("different communicator") != std::string::npos);
  CHECK(count_wrong(x) == 0);
}

TEST_CASE("a rank that fails to allocate before the collective makes every rank raise") {
  X0 x{world(), g};
  fill(x);
  if (rank() == size() - 1) dsp::detail::injected_faults() = 1;
  std::string e = error_of([&] { dsp::dynamic_switch<1>(x); });
  CHECK(!e.empty());
  if (rank() != size() - 1) CHECK(e.find("could not allocate memory") != std::string::npos);
  CHECK(count_wrong(x) == 0);
  if (rank() == size() - 1) dsp::detail::injected_faults() = 1;
  e = error_of([&] { dsp::gather(x); });
  CHECK(!e.empty());
  CHECK(dsp::detail::injected_faults() == 0);
  communicator_still_works();
}

TEST_CASE("a local view that does not fit the partition raises on every rank") {
  using V = X0::view_type;
  const auto want = dsp::detail::local_extents<dsp::Sharded<0>>(g, rank(), size());
  const bool bad = rank() == 0;
  V v("v", want[0] + (bad ? 1 : 0), want[1], want[2]);
  const std::string e = error_of([&] { X0 x(world(), g, v); });
  CHECK(!e.empty());
  if (bad) CHECK(e.find("the local view has extents") != std::string::npos);
  else CHECK(e.find("rank 0 could not take part") != std::string::npos);
}

TEST_CASE("a strided (non-contiguous) local view is refused on every rank") {
  const auto want = dsp::detail::local_extents<dsp::Sharded<0>>(g, rank(), size());
  Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> big("big", want[0], want[1], want[2], 2);
  auto strided = Kokkos::subview(big, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, 0);
  static_assert(std::is_same_v<decltype(strided)::array_layout, Kokkos::LayoutStride>);
  const std::string e = error_of([&] { X0 x(world(), g, strided); });
  CHECK(e.find("not contiguous row-major") != std::string::npos);  // every block is non-empty here
}

TEST_CASE("a contiguous view of the right shape is accepted and used in place") {
  const auto want = dsp::detail::local_extents<dsp::Sharded<0>>(g, rank(), size());
  X0::view_type v("v", want[0], want[1], want[2]);
  X0 x(world(), g, v);
  CHECK(x.local().data() == v.data());
  fill(x);
  CHECK(count_wrong(dsp::dynamic_switch<2>(x)) == 0);
}

TEST_CASE("negative extents are refused") {
  int bad = -3;
  CHECK_THROWS_AS(X0(world(), {bad, 2, 2}), dsp::InvalidArgument);
}

TEST_CASE("MPI failures raise dsp::BackendError with MPI's own text") {
  auto c = world();
  int v = 0;
  try {
    c.broadcast(&v, 1, sizeof v, size() + 5);  // no such root
    FAIL("an invalid root was accepted");
  } catch (const dsp::BackendError& e) {
    const std::string w = e.what();
    CHECK(w.find("MPI_Bcast") != std::string::npos);
    CHECK(w.find("root") != std::string::npos);
  }
  communicator_still_works();
}

TEST_CASE("with agreement checks off, agreeing ranks still get correct results") {
  dsp::set_agreement_checks(false);
  X0 x{world(), g};
  fill(x);
  auto y = dsp::dynamic_switch<2>(x);
  CHECK(count_wrong(y) == 0);
  dsp::set_agreement_checks(true);
  CHECK(dsp::agreement_checks());
}
