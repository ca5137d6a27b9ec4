// SPDX-License-Identifier: BSD-3-Clause
// dsp outside the Kokkos and MPI scopes: a dsp::UsageError that says what to
// do, instead of an abort inside Kokkos or MPI. Its own main: the scopes are
// what is under test. Exit code: the number of failed checks on this rank.
#include <dsp/mpi.hpp>

#include <cstdio>
#include <optional>
#include <string>

namespace {
int failures = 0;

template <class F>
void expect_usage_error(const char* what, F&& f, const char* needle) {
  std::string msg;
  try {
    f();
  } catch (const dsp::UsageError& e) {
    msg = e.what();
  } catch (const std::exception& e) {
    msg = std::string("(not a UsageError) ") + e.what();
  }
  if (msg.find(needle) == std::string::npos) {
    std::fprintf(stderr, "test_lifecycle: %s: expected a dsp::UsageError containing \"%s\", got \"%s\"\n", what, needle,
                 msg.c_str());
    ++failures;
  }
}

using X = dsp::DistTensor<float, 2, dsp::Sharded<0>, dsp::MpiCommunicator>;
using Unmanaged = Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    dsp::MpiCommunicator c{MPI_COMM_WORLD};  // needs MPI only
    // Regression: before Kokkos::initialize, Kokkos aborted the process.
    expect_usage_error(
        "a tensor before Kokkos::initialize",
        [&] {
      X x(c, {4, 4});
        },
        "Kokkos is not initialized");
    Kokkos::initialize(argc, argv);
    std::optional<X> x;
    float storage[4 * 4] = {};
    const auto e = dsp::detail::local_extents<dsp::Sharded<0>>(std::array<std::size_t, 2>{4, 4}, c.rank(), c.size());
    x.emplace(c, dsp::Extents<2>{4, 4}, Unmanaged(storage, e[0], e[1]));  // memory Kokkos does not own
    // A staged communicator that outlives Kokkos: its host staging buffers are
    // released at Kokkos::finalize with the other caches (regression: they
    // were not, and destroying it afterwards aborted inside Kokkos).
    dsp::StagedCommunicator<dsp::MpiCommunicator, Kokkos::HostSpace> staged{c};
    {
      dsp::DistTensor<float, 2, dsp::Sharded<0>, decltype(staged)> s(staged, {4, 4});
      auto t = dsp::dynamic_switch<1>(s);
      if (staged.staging_bytes() == 0 && c.size() > 1) ++failures;
    }
    {
      auto y = dsp::dynamic_switch<1>(*x);  // works inside the scope
      if (y.global_extents() != std::array<std::size_t, 2>{4, 4}) ++failures;
    }
    Kokkos::finalize();
    // Regression: after Kokkos::finalize, the allocation inside aborted the process.
    expect_usage_error(
        "a switch after Kokkos::finalize", [&] { dsp::dynamic_switch<1>(*x); },
        "Kokkos is not initialized (or already finalized)");
    expect_usage_error(
        "a tensor after Kokkos::finalize",
        [&] {
      X z(c, {4, 4});
        },
        "before Kokkos::finalize");
    x.reset();
    MPI_Finalize();
    // Regression: after MPI_Finalize, MPI aborted the process.
    int v = 0;
    expect_usage_error(
        "a broadcast after MPI_Finalize", [&] { c.broadcast(&v, 1, sizeof v, 0); }, "MPI is finalized");
    expect_usage_error(
        "a communicator after MPI_Finalize", [&] { dsp::MpiCommunicator d{MPI_COMM_WORLD}; },
        "MPI is not initialized (or already finalized)");
  }
  if (failures == 0) std::printf("test_lifecycle: all checks passed\n");
  return failures;
}
