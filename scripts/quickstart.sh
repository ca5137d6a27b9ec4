#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Quick start 1/2: install what is missing, build the quickstart, run it on 4 local MPI ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
source scripts/mpi_env.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target quickstart -j"$(nproc)"
mpiexec -n 4 build/examples/quickstart
