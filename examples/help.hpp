// SPDX-License-Identifier: BSD-3-Clause
// The examples' --help (and -h): rank 0 prints the usage, every rank exits 0.
// Call it right after MPI_Init, before Kokkos::initialize (which prints its
// own options for a plain --help and carries on).
#pragma once

#include <mpi.h>

#include <cstdio>
#include <cstring>

namespace example {

/// True, after rank 0 printed `usage` and a line on Kokkos' options, when an
/// argument is --help or -h; the caller then finalizes MPI and returns 0.
inline bool asked_for_help(int argc, char** argv, const char* usage) {
  bool asked = false;
  for (int k = 1; k < argc; ++k) asked = asked || !std::strcmp(argv[k], "--help") || !std::strcmp(argv[k], "-h");
  if (!asked) return false;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) std::printf("%s\nKokkos' own options (--kokkos-threads=N, ...): --kokkos-help\n", usage);
  return true;
}

}  // namespace example
