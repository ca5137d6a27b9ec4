// SPDX-License-Identifier: BSD-3-Clause
// doctest main for MPI tests: every rank runs every test case (they are
// collective); rank 0 reports in full, the others only their failures. The
// exit code is non-zero on every rank when any rank failed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <Kokkos_Core.hpp>
#include <mpi.h>

int main(int argc, char** argv) {
  // Threads: dsp's model is one communicator per thread, which MPI allows
  // with MPI_THREAD_MULTIPLE (the tests that use threads skip without it).
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  Kokkos::initialize(argc, argv);
  int rank = 0, failed = 0, any_failed = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  {
    doctest::Context ctx(argc, argv);
    if (rank != 0) ctx.setOption("minimal", true);
    failed = ctx.run() != 0 ? 1 : 0;
  }
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  Kokkos::finalize();
  MPI_Finalize();
  return any_failed;
}
