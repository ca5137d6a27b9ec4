#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs bench_spatial_temporal at N = 1, 2, 4, 8 (8 oversubscribed on small
# machines) for two sequence sizes and one uneven shape; prints Markdown with
# the machine load before each run. Usage: run_bench.sh [build dir]
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
