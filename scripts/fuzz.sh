#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds the libFuzzer target tests/fuzz/fuzz_plan.cpp with clang (AddressSanitizer
# + UBSan + libFuzzer) and runs it for DSP_FUZZ_SECONDS (default 60) seconds.
# Needs clang and libclang-rt-14-dev (DSP_WITH_FUZZ=1 bash scripts/deps.sh installs
# them); without them it says so and exits 0. The corpus is kept in
# BUILD_DIR/corpus (default build-fuzz); a crash is saved there as crash-<hash>
# and fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${BUILD_DIR:-build-fuzz}"
cxx="${CLANGXX:-$(command -v clang++ || command -v clang++-14 || true)}"
if [ -z "$cxx" ]; then echo "fuzz.sh: clang++ not found; skipped (DSP_WITH_FUZZ=1 bash scripts/deps.sh)"; exit 0; fi
kokkos_inc=/usr/include/trilinos kokkos_lib=-ltrilinos_kokkoscore
if [ -n "${KOKKOS_ROOT:-}" ]; then
  kokkos_inc="$KOKKOS_ROOT/include" kokkos_lib="-L$KOKKOS_ROOT/lib -Wl,-rpath,$KOKKOS_ROOT/lib -lkokkoscore -ldl"
fi
mkdir -p "$build/corpus"
if ! "$cxx" -std=c++20 -O1 -g1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
      -Iinclude -I"$kokkos_inc" tests/fuzz/fuzz_plan.cpp -o "$build/fuzz_plan" $kokkos_lib 2> "$build/build.log"; then
  if grep -q -e "fuzzer" -e "clang_rt" "$build/build.log"; then
    echo "fuzz.sh: clang's libFuzzer runtime is missing (libclang-rt-14-dev); skipped"; exit 0
  fi
  cat "$build/build.log" >&2; exit 1
fi
cd "$build"
./fuzz_plan -max_total_time="${DSP_FUZZ_SECONDS:-60}" -print_final_stats=1 -seed="${DSP_FUZZ_SEED:-1}" corpus
