// SPDX-License-Identifier: BSD-3-Clause
// doctest main for tests without MPI: Kokkos is initialized around the run.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <Kokkos_Core.hpp>

int main(int argc, char** argv) {
  Kokkos::initialize(argc, argv);
  int rc = 0;
  {
    doctest::Context ctx(argc, argv);
    rc = ctx.run();
  }
  Kokkos::finalize();
  return rc;
}
