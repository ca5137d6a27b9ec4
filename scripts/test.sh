#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Quick start 2/2: install what is missing, build everything, run all tests.
# BUILD_DIR (default build-test) and CTEST_ARGS may be set by the caller.
# DSP_SANITIZE=address,undefined (or DSP_SANITIZE=1, the same) builds and runs
# the suite under AddressSanitizer + UndefinedBehaviorSanitizer instead, in
# BUILD_DIR (default build-sanitize); see docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
source scripts/mpi_env.sh
san="${DSP_SANITIZE:-}"
[ "$san" = 1 ] && san=address,undefined
if [ -n "$san" ]; then
  # Assertions on. The tests at -O0: with the sanitizers their files take 2.5x
  # less time to build than at -O1 (their exhaustive instantiations are most of
  # the build); dsp::compiled, where the engine's hot loops are, at -O1
  # (tests/CMakeLists.txt).
  build="${BUILD_DIR:-build-sanitize}"
  args=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DDSP_SANITIZE="$san" -DDSP_BUILD_EXAMPLES=OFF)
else
  build="${BUILD_DIR:-build-test}"
  args=(-DCMAKE_BUILD_TYPE=Release -DDSP_SANITIZE=)
fi
cmake -S . -B "$build" "${args[@]}" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)"
cd "$build"
ctest --output-on-failure -j"$(nproc)" ${CTEST_ARGS:-}
