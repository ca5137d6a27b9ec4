#!/usr/bin/env bash
# Quick start 2/2: install what is missing, build everything, run all tests.
# BUILD_DIR (default build-test) and CTEST_ARGS may be set by the caller.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
source scripts/mpi_env.sh
build="${BUILD_DIR:-build-test}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)"
cd "$build"
ctest --output-on-failure -j"$(nproc)" ${CTEST_ARGS:-}
