#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs bench_spatial_temporal at N = 1, 2, 4, 8 (8 oversubscribed on small
# machines) for two sequence sizes and one uneven shape, then the data parallel
# x sequence parallel layer on every 2-D mesh of 4 and 6 ranks; prints
# Markdown with the machine load before each run. Usage: run_bench.sh [build dir]
set -euo pipefail
BUILD=${1:-build}
BIN=$BUILD/examples/bench_spatial_temporal
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
echo "machine: $(nproc) cores, $(uname -sr); $(date -u)"
for shape in "1 16 64 64 4 256 7" "1 32 256 64 4 256 5" "1 12 100 64 4 256 7"; do
  for n in 1 2 4 8; do
    echo
    echo "load: $(uptime | sed 's/.*load average: //') (1, 5, 15 min)"
    mpiexec -n "$n" "$BIN" $shape
  done
done
# DP x SP: B = 6 splits evenly over DP = 1, 2, 3 and 6 (4 x 1 is uneven).
for run in "4 1x4" "4 2x2" "4 4x1" "6 1x6" "6 2x3" "6 3x2" "6 6x1"; do
  set -- $run
  echo
  echo "load: $(uptime | sed 's/.*load average: //') (1, 5, 15 min)"
  mpiexec -n "$1" "$BIN" 6 16 32 64 4 256 5 "$2"
done
