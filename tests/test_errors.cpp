// SPDX-License-Identifier: BSD-3-Clause
// Misuse across ranks: every rank gets a dsp::Error (no hang: each run has a
// CTest timeout), the input is unchanged, and the communicator works after.
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

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
  communicator_still_works();
}

TEST_CASE("an output on another communicator is refused") {
  if (size() == 1) return;                                         // every one-rank communicator is the same group
  dsp::MpiCommunicator other = world().split(0, size() - rank());  // the same ranks in another order
  X0 x{world(), g};
  fill(x);
  X1 y{other, g};
  const std::string e = error_of([&] { dsp::dynamic_switch<1>(x, y); });
  CHECK(e.find("different communicator") != std::string::npos);
  CHECK(count_wrong(x) == 0);
  communicator_still_works();
}

TEST_CASE("an output on another communicator on one rank makes every rank raise") {
  if (size() == 1) return;
  dsp::MpiCommunicator other = world().split(0, size() - rank());
  const bool bad = rank() == 0;
  X0 x{world(), g};
  fill(x);
  dsp::DistTensor<float, 3, dsp::Replicated, dsp::MpiCommunicator> y{bad ? other : world(), g};
  const std::string e = error_of([&] { dsp::gather(x, y); });
  if (bad) CHECK(e.find("the output lives on a different communicator") != std::string::npos);
  else CHECK(e.find("rank 0 could not take part because its output tensor is invalid") != std::string::npos);
  CHECK(count_wrong(x) == 0);
  communicator_still_works();
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
  if (rank() != size() - 1)
    CHECK(e.find("dsp::gather: rank " + std::to_string(size() - 1) +
                 " could not take part because it could not allocate memory") != std::string::npos);
  else CHECK(e.find("dsp::gather (rank " + std::to_string(rank()) + "): std::bad_alloc") != std::string::npos);
  CHECK(dsp::detail::injected_faults() == 0);
  CHECK(count_wrong(x) == 0);
  communicator_still_works();
}

TEST_CASE("local failures on several ranks at once, into an existing output, raise on every rank") {
  X0 x{world(), g};
  X2 y{world(), g};
  fill(x);
  fill(y);
  if (rank() % 2 == 0) dsp::detail::injected_faults() = 1;  // rank 0, 2, ...
  const std::string e = error_of([&] { dsp::dynamic_switch<2>(x, y); });
  CHECK(!e.empty());
  if (rank() % 2 == 1) CHECK(e.find("rank 0 could not take part") != std::string::npos);
  CHECK(dsp::detail::injected_faults() == 0);
  CHECK(count_wrong(x) == 0);
  CHECK(count_wrong(y) == 0);  // the output is untouched too: nothing was copied
  communicator_still_works();
}

TEST_CASE("a rank that cannot allocate raises ResourceError, the others MismatchError") {
  if (size() == 1) return;
  X0 x{world(), g};
  fill(x);
  if (rank() == 1) dsp::detail::injected_faults() = 1;
  bool resource = false, mismatch = false;
  try {
    dsp::dynamic_switch<1>(x);
  } catch (const dsp::ResourceError&) {
    resource = true;
  } catch (const dsp::MismatchError&) {
    mismatch = true;
  }
  CHECK(resource == (rank() == 1));
  CHECK(mismatch == (rank() != 1));
  communicator_still_works();
}

TEST_CASE("a rank with a bad argument raises InvalidArgument, the others MismatchError") {
  if (size() == 1) return;
  X0 x{world(), g};
  fill(x);
  X1 y{world(), {7, 5, rank() == 1 ? 3u : 4u}};
  bool invalid = false, mismatch = false;
  try {
    dsp::dynamic_switch<1>(x, y);
  } catch (const dsp::InvalidArgument&) {
    invalid = true;
  } catch (const dsp::MismatchError&) {
    mismatch = true;
  }
  CHECK(invalid == (rank() == 1));
  CHECK(mismatch == (rank() != 1));
  communicator_still_works();
}

TEST_CASE("element types of the same size that disagree raise on every rank") {
  if (size() == 1) return;
  std::string e;
  if (rank() == size() - 1) {
    dsp::DistTensor<std::int32_t, 3, dsp::Sharded<0>, dsp::MpiCommunicator> x{world(), g};
    fill(x);
    e = error_of([&] { dsp::gather(x); });
    CHECK(count_wrong(x) == 0);
  } else {
    X0 x{world(), g};
    fill(x);
    e = error_of([&] { dsp::gather(x); });
    CHECK(count_wrong(x) == 0);
  }
  CHECK(e.find("element types disagree") != std::string::npos);
  CHECK(e.find("int") != std::string::npos);
  CHECK(e.find("float (4 bytes)") != std::string::npos);
  communicator_still_works();
}

TEST_CASE("global extents that disagree in an unsharded dim raise on every rank") {
  if (size() == 1) return;
  X1 x{world(), {7, 5, 4 + std::size_t(rank() == 0)}};
  fill(x);
  std::string e = error_of([&] { dsp::dynamic_switch<0>(x); });
  CHECK(e.find("global extents disagree: rank 0 [7, 5, 5], rank 1 [7, 5, 4]") != std::string::npos);
  CHECK(count_wrong(x) == 0);
  e = error_of([&] { dsp::gather(x); });
  CHECK(e.find("global extents disagree") != std::string::npos);
  CHECK(count_wrong(x) == 0);
  communicator_still_works();
}

namespace {
struct LowCountLimit {  // every count or displacement above 5 elements is "beyond int"
  std::size_t saved = dsp::detail::mpi_count_limit();
  LowCountLimit() { dsp::detail::mpi_count_limit() = 5; }
  ~LowCountLimit() { dsp::detail::mpi_count_limit() = saved; }
};
}  // namespace

TEST_CASE("per-peer counts beyond MPI's int range are split into messages, never wrapped") {
  // With the limit lowered, every per-peer count here exceeds it: the exchange
  // must take the point-to-point path and stay exact, on every layout path
  // (sent from the input / packed, received into the output / unpacked).
  LowCountLimit low;
  const std::size_t n = std::size_t(size());
  X0 x{world(), {3 * n + 1, 4 * n + 3, 6}};
  fill(x);
  auto y = dsp::dynamic_switch<1>(x);  // packed, received straight into the output
  CHECK(count_wrong(y) == 0);
  auto z = dsp::dynamic_switch<0>(y);  // sent straight from the input, unpacked
  CHECK(count_wrong(z) == 0);
  auto w = dsp::dynamic_switch<2>(y);  // packed and unpacked
  CHECK(count_wrong(w) == 0);
  CHECK(count_wrong(dsp::gather(w)) == 0);  // uneven all-gather beyond the limit
  CHECK(count_wrong(dsp::gather(x)) == 0);
  CHECK(count_wrong(x) == 0);
}

TEST_CASE("per-peer counts beyond INT_MAX: the plan's bound sends every rank down the large-count path") {
  // The real sizes, as arithmetic only (no 2^31-element buffers): a switch
  // whose per-peer chunks exceed INT_MAX elements has a bound beyond the
  // limit, equal on every rank, so all ranks leave MPI_Alltoallv for the
  // point-to-point path together; and when the bound fits, every count and
  // displacement of every rank fits in an int.
  for (std::size_t n : {2u, 3u, 4u, 7u, 64u}) {
    const std::size_t big = (std::size_t(1) << 31) * n + 3;  // dim 0: more than INT_MAX per peer
    for (const std::array<std::size_t, 3> ext :
         {std::array<std::size_t, 3>{big, n, 1}, std::array<std::size_t, 3>{n, big, 1},
          std::array<std::size_t, 3>{46341 * n, 46341, n}}) {
      std::size_t largest = 0;
      for (auto [i, j] : {std::pair<std::size_t, std::size_t>{0, 1}, {1, 0}, {0, 2}, {2, 1}}) {
        std::size_t bound = 0;
        bool below = true, same = true;
        for (std::size_t p = 0; p < n; ++p) {
          const auto plan = dsp::detail::plan_alltoallv(ext, i, j, int(p), int(n));
          if (p == 0) bound = plan.bound;
          same = same && plan.bound == bound;  // the same on every rank: every rank takes the same branch
          for (std::size_t q = 0; q < n; ++q)
            for (std::size_t v : {plan.send_counts[q], plan.send_displs[q], plan.recv_counts[q], plan.recv_displs[q]}) {
              below = below && v <= bound;  // so a bound that fits means every int conversion is exact
              largest = std::max(largest, v);
            }
        }
        CHECK(same);
        CHECK(below);
        CHECK(!dsp::detail::fits_mpi(bound));
      }
      CHECK(largest > std::size_t(INT_MAX));
    }
  }
}

TEST_CASE("a local view that does not fit the partition raises on every rank") {
  using V = X0::view_type;
  const auto want = dsp::detail::local_extents<dsp::Sharded<0>>(g, rank(), size());
  const bool bad = rank() == 0;
  V v("v", want[0] + (bad ? 1 : 0), want[1], want[2]);
  for (std::size_t k = 0; k < v.size(); ++k) v.data()[k] = float(k) + 0.5f;
  const std::string e = error_of([&] { X0 x(world(), g, v); });
  CHECK(!e.empty());
  if (bad) CHECK(e.find("the local view has extents") != std::string::npos);
  else CHECK(e.find("rank 0 could not take part") != std::string::npos);
  std::size_t changed = 0;
  for (std::size_t k = 0; k < v.size(); ++k) changed += v.data()[k] != float(k) + 0.5f;
  CHECK(changed == 0);
  communicator_still_works();
}

TEST_CASE("a strided (non-contiguous) local view is refused on every rank") {
  const auto want = dsp::detail::local_extents<dsp::Sharded<0>>(g, rank(), size());
  Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> big("big", want[0], want[1], want[2], 2);
  auto strided = Kokkos::subview(big, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, 0);
  static_assert(std::is_same_v<decltype(strided)::array_layout, Kokkos::LayoutStride>);
  const std::string e = error_of([&] { X0 x(world(), g, strided); });
  CHECK(e.find("not contiguous row-major") != std::string::npos);  // every block is non-empty here
  communicator_still_works();
}

TEST_CASE("a strided local view on one rank makes every rank raise") {
  const auto want = dsp::detail::local_extents<dsp::Sharded<0>>(g, rank(), size());
  const bool bad = rank() == size() - 1;
  Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace> big("big", want[0], want[1], want[2], 2);
  using SV = decltype(Kokkos::subview(big, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, 1));
  X0::view_type ok("ok", want[0], want[1], want[2]);
  const SV v = bad ? SV(Kokkos::subview(big, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, 1)) : SV(ok);
  const std::string e = error_of([&] { X0 x(world(), g, v); });
  if (bad) CHECK(e.find("not contiguous row-major (dim 2 has stride 2, expected 1)") != std::string::npos);
  else
    CHECK(e.find("rank " + std::to_string(size() - 1) + " could not take part because its local view") !=
          std::string::npos);
  communicator_still_works();
}

TEST_CASE("a contiguous view of the right shape is accepted and used in place") {
  const auto want = dsp::detail::local_extents<dsp::Sharded<0>>(g, rank(), size());
  X0::view_type v("v", want[0], want[1], want[2]);
  X0 x(world(), g, v);
  CHECK(x.local().data() == v.data());
  fill(x);
  CHECK(count_wrong(dsp::dynamic_switch<2>(x)) == 0);
}

TEST_CASE("extents whose size in bytes wraps around are refused on every rank") {
  // Regression: [2^32, 2^31, 4] floats is 2^67 bytes; the sizes wrapped to 0,
  // Kokkos allocated an empty block with those extents, and writing it went
  // out of bounds.
  const std::array<std::size_t, 3> huge{std::size_t(1) << 32, std::size_t(1) << 31, 4};
  std::string e = error_of([&] { X0 x(world(), huge); });
  CHECK(e.find("exceed 2^63 bytes") != std::string::npos);
  CHECK(e.find("[4294967296, 2147483648, 4]") != std::string::npos);
  X0::view_type v("v", 1, 1, 1);
  e = error_of([&] { X0 x(world(), huge, v); });  // the wrapping constructor: collective, so every rank
  CHECK(e.find("exceed 2^63 bytes") != std::string::npos);
  // an empty tensor with large extents is fine: nothing wraps
  X0 empty{world(), {std::size_t(1) << 40, std::size_t(1) << 30, 0}};
  CHECK(empty.local_size() == 0);
  communicator_still_works();
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

namespace {
using View3 = Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::HostSpace>;
View3 source_on(int root) {  // the whole tensor g on the root, an empty view elsewhere
  if (rank() != root) return View3();
  View3 v("source", g[0], g[1], g[2]);
  for (std::size_t k = 0; k < v.size(); ++k) v.data()[k] = dsp_test::value_at<float>(k);
  return v;
}
}  // namespace

TEST_CASE("distribute: a root out of range on one rank makes every rank raise") {
  // Regression: the range check threw on the ranks that saw a bad root before
  // the agreement check, so the other ranks waited in it forever.
  if (size() == 1) return;
  const int root = rank() == 0 ? size() : 1;  // rank 0 names a rank that does not exist
  const View3 src = source_on(1);
  const std::string e = error_of([&] { dsp::distribute<dsp::Sharded<0>>(world(), src, root); });
  if (rank() == 0)
    CHECK(e.find("root " + std::to_string(size()) + " is not a rank of a communicator of") != std::string::npos);
  else CHECK(e.find("dsp::distribute: rank 0 could not take part") != std::string::npos);
  if (rank() == 1) {
    std::size_t changed = 0;
    for (std::size_t k = 0; k < src.size(); ++k) changed += src.data()[k] != dsp_test::value_at<float>(k);
    CHECK(changed == 0);
  }
  communicator_still_works();
}

TEST_CASE("distribute: roots that disagree raise on every rank") {
  if (size() == 1) return;
  const int root = rank() == 0 ? 0 : 1;
  const View3 src = source_on(rank() <= 1 ? rank() : -1);  // ranks 0 and 1 each think they are the root
  const std::string e = error_of([&] { dsp::distribute<dsp::Replicated>(world(), src, root); });
  CHECK(e.find("root ranks disagree") != std::string::npos);
  communicator_still_works();
}

TEST_CASE("ranks that force different switch algorithms raise on every rank instead of hanging") {
  if (size() == 1) return;
  X0 x{world(), {64, 64, 4}};  // 64 KiB: long enough runs that every algorithm applies
  fill(x);
  const auto saved = dsp::switch_algorithm();
  dsp::set_switch_algorithm(rank() == 0 ? dsp::SwitchAlgorithm::alltoallv : dsp::SwitchAlgorithm::pairwise);
  const std::string e = error_of([&] { dsp::dynamic_switch<1>(x); });
  dsp::set_switch_algorithm(saved);
  CHECK(e.find("different communication algorithms") != std::string::npos);
  CHECK(count_wrong(x) == 0);
  communicator_still_works();
}

// ---- defects found by an outside probe: each case failed before its fix ----

TEST_CASE("an output on a communicator whose freed MPI handle was reused is still refused") {
  // Regression: dsp compared the handles the caller passed in. Once the caller
  // freed them (allowed: dsp duplicates), Open MPI handed the same handle out
  // again, so communicators of different rank orders compared equal and the
  // switch wrote past y's block.
  if (size() == 1) return;
  MPI_Comm a = MPI_COMM_NULL, b = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, 0, rank(), &a);
  dsp::MpiCommunicator ca{a};
  MPI_Comm_free(&a);
  MPI_Comm_split(MPI_COMM_WORLD, 0, size() - rank(), &b);  // the reverse order
  dsp::MpiCommunicator cb{b};
  MPI_Comm_free(&b);
  CHECK(!(ca == cb));
  X0 x{ca, g};
  fill(x);
  X1 y{cb, g};
  const std::string e = error_of([&] { dsp::dynamic_switch<1>(x, y); });
  CHECK(e.find("different communicator") != std::string::npos);
  CHECK(count_wrong(x) == 0);
  communicator_still_works();
}

TEST_CASE("a rank that skipped a collective meets the next call of the same shape: every rank raises") {
  // Regression: two calls of one shape had the same signature, so the ranks
  // that were one call ahead silently exchanged the wrong tensor.
  if (size() == 1) return;
  X0 x{world(), g};
  fill(x);
  std::string e;
  if (rank() != 0) e = error_of([&] { dsp::dynamic_switch<1>(x); });  // the call rank 0 skipped
  else e = error_of([&] { dsp::dynamic_switch<1>(x); });              // rank 0's next call
  CHECK(e.find("different call sites") != std::string::npos);
  CHECK(e.find("test_errors.cpp:") != std::string::npos);
  CHECK(count_wrong(x) == 0);
  // The opt-out: codes that reach one collective from different places on purpose.
  dsp::set_call_site_checks(false);
  std::size_t wrong = 0;
  if (rank() != 0) wrong = count_wrong(dsp::dynamic_switch<1>(x));
  else wrong = count_wrong(dsp::dynamic_switch<1>(x));
  dsp::set_call_site_checks(true);
  CHECK(wrong == 0);
  communicator_still_works();
}

TEST_CASE("a LayoutStride view with odd strides on extent-1 dims is refused on every rank, not aborted") {
  // Regression: dsp's check skipped dims of extent 1, Kokkos' assignment does
  // not: the process aborted inside Kokkos after the other ranks had returned.
  const std::array<std::size_t, 3> g1{7, 1, 4};
  const auto want = dsp::detail::local_extents<dsp::Sharded<0>>(g1, rank(), size());
  const bool bad = rank() == 0;
  X0::view_type storage("storage", want[0], 1, 4);
  using Strided = Kokkos::View<float***, Kokkos::LayoutStride, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
  const Kokkos::LayoutStride odd(want[0], 4, 1, bad ? 99 : 4, 4, 1);  // dim 1: extent 1, stride 99
  Strided v(storage.data(), odd);
  const std::string e = error_of([&] { X0 x(world(), g1, v); });
  if (bad) CHECK(e.find("not contiguous row-major (dim 1 has stride 99, expected 4)") != std::string::npos);
  else CHECK(e.find("rank 0 could not take part because its local view") != std::string::npos);
  // exactly row-major strides are accepted
  const Kokkos::LayoutStride right(want[0], 4, 1, 4, 4, 1);
  X0 ok(world(), g1, Strided(storage.data(), right));
  CHECK(ok.local().data() == storage.data());
  communicator_still_works();
}

TEST_CASE("an intercommunicator is refused with dsp::InvalidArgument on every rank") {
  // Regression: accepted; the agreement all-gather then overflowed its buffer
  // (3 ranks) or hung (5 ranks).
  if (size() < 2) return;
  const int color = rank() % 2;
  MPI_Comm half = MPI_COMM_NULL, inter = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, color, rank(), &half);
  MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, color == 0 ? 1 : 0, 77, &inter);
  const std::string e = error_of([&] { dsp::MpiCommunicator c{inter}; });
  CHECK(e.find("intercommunicator") != std::string::npos);
  MPI_Comm_free(&inter);
  MPI_Comm_free(&half);
  communicator_still_works();
}

TEST_CASE("an extent of SIZE_MAX is refused, not passed to Kokkos") {
  // Regression: Kokkos reads SIZE_MAX as "no extent" and aborted the process.
  const std::size_t m = std::numeric_limits<std::size_t>::max();
  std::string e = error_of([&] { X0 x(world(), {m, 1, 1}); });
  CHECK(e.find("an extent of 2^63 or more") != std::string::npos);
  X0::view_type v("v", 1, 1, 1);
  e = error_of([&] { X0 x(world(), {std::size_t(1), m, std::size_t(1)}, v); });  // collective: every rank
  CHECK(e.find("an extent of 2^63 or more") != std::string::npos);
  communicator_still_works();
}

TEST_CASE("messages name algorithms by name, and tensor ranks apart from extents") {
  if (size() == 1) return;
  X0 x{world(), {64, 64, 4}};
  fill(x);
  const auto saved = dsp::switch_algorithm();
  dsp::set_switch_algorithm(rank() == 0 ? dsp::SwitchAlgorithm::alltoallv : dsp::SwitchAlgorithm::datatypes);
  std::string e = error_of([&] { dsp::dynamic_switch<1>(x); });
  dsp::set_switch_algorithm(saved);
  CHECK(e.find("rank 0 alltoallv, rank 1 datatypes") != std::string::npos);
  // distribute of views of different ranks: "tensor ranks disagree", not extents
  Kokkos::View<float***, Kokkos::HostSpace> v3("v3", 2, 2, 2);
  Kokkos::View<float**, Kokkos::HostSpace> v2("v2", 2, 2);
  if (rank() == 0) e = error_of([&] { dsp::distribute<dsp::Replicated>(world(), v3); });
  else e = error_of([&] { dsp::distribute<dsp::Replicated>(world(), v2); });
  CHECK(e.find("tensor ranks disagree: rank 0 3, rank 1 2") != std::string::npos);
  communicator_still_works();
}

TEST_CASE("a communicator in use by another collective is detected, not corrupted") {
  // Two threads on one communicator interleaved messages (MPI_ERR_TRUNCATE,
  // then a hang). dsp runs one collective at a time per communicator; the
  // flag another thread would hold is held here, on every rank at once.
  X0 x{world(), g};
  fill(x);
  REQUIRE(world().resources().try_acquire());
  const std::string e = error_of([&] { dsp::dynamic_switch<1>(x); });
  world().resources().release();
  CHECK(e.find("another thread is running a dsp collective on this communicator") != std::string::npos);
  communicator_still_works();
}
