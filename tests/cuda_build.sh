#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The test test_cuda_build (tests/CMakeLists.txt, host builds only): configures
# and builds dsp's tests, examples and benchmarks against a CUDA-enabled Kokkos
# with nvcc and the NCCL backend, warnings as errors (the host compiler's
# -Werror and nvcc's own -Werror all-warnings), then runs that build's
# compile-fail tests (every one, under nvcc, the CUDA-only one included) and
# package tests (consumers built with nvcc; their runs are skipped without a
# GPU). Nothing here needs a GPU.
# It is scripts/kokkos-cuda.sh with an existing Kokkos install, so that script
# is tested too.
#
#   bash tests/cuda_build.sh <build-dir> [<kokkos-prefix>]
#
# The Kokkos install is <kokkos-prefix> (the CMake cache variable
# DSP_CUDA_KOKKOS_ROOT), else $KOKKOS_CUDA_PREFIX, else kokkos-cuda.sh's default
# prefix ${XDG_CACHE_HOME:-$HOME/.cache}/dsp/kokkos-cuda. Exits 77 (CTest:
# Skipped) with the reason when none of these holds a Kokkos install or no
# nvcc is found; a prefix named explicitly that holds no CUDA-enabled Kokkos
# is an error. JOBS sets the parallel build jobs (default: nproc).
set -euo pipefail

skip() { echo "SKIPPED: $*"; exit 77; }
die() { echo "cuda_build.sh: error: $*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: $0 <build-dir> [<kokkos-prefix>]"
build="$1"
repo="$(realpath "$(dirname "$0")/..")"

explicit=1
prefix="${2:-}"
if [ -z "$prefix" ]; then
  prefix="${KOKKOS_CUDA_PREFIX:-}"
  if [ -z "$prefix" ]; then
    explicit=0
    prefix="${XDG_CACHE_HOME:-$HOME/.cache}/dsp/kokkos-cuda"
  fi
fi

if [ ! -x "$prefix/bin/nvcc_wrapper" ] || ! grep -qs '^set(Kokkos_DEVICES .*CUDA' "$prefix"/lib*/cmake/Kokkos/*.cmake; then
  why="$prefix holds no CUDA-enabled Kokkos install (bin/nvcc_wrapper and lib*/cmake/Kokkos with CUDA in Kokkos_DEVICES)"
  if [ "$explicit" = 1 ]; then
    die "$why"
  fi
  skip "no CUDA-enabled Kokkos found: $why. Build one with scripts/kokkos-cuda.sh, or name one with" \
       "-DDSP_CUDA_KOKKOS_ROOT=<prefix> or KOKKOS_CUDA_PREFIX=<prefix> (docs/gpu.md)"
fi
if ! command -v "${CUDA_ROOT:+$CUDA_ROOT/bin/}nvcc" >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  skip "a CUDA-enabled Kokkos is installed in $prefix, but no nvcc was found (PATH, CUDA_ROOT, /usr/local/cuda)"
fi

echo "cuda_build.sh: building dsp against the CUDA-enabled Kokkos in $prefix, in $build"
KOKKOS_SRC='' KOKKOS_CUDA_PREFIX="$prefix" BUILD_DIR="$build" DSP_CUDA_WERROR=1 CTEST_ARGS="-R ^(compile|package)\." \
  exec bash "$repo/scripts/kokkos-cuda.sh"
