#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds a CUDA-enabled Kokkos from a source tree you already have, installs it
# outside this repository, then builds dsp's tests, examples and benchmarks
# against it with nvcc and runs them.
#
# Usage:
#   KOKKOS_SRC=/path/to/kokkos bash scripts/kokkos-cuda.sh
#   KOKKOS_CUDA_PREFIX=/path/to/installed/kokkos bash scripts/kokkos-cuda.sh
#
# This script downloads nothing. KOKKOS_SRC must be a Kokkos 4.x source tree.
# With CUDA 13 it must be a release that supports CUDA 13 (Kokkos 4.7.01 or
# later), or an older copy you have patched for CUDA 13 yourself:
#   1. bin/nvcc_wrapper: default_arch sm_70 -> sm_90 (CUDA 13 dropped sm_70);
#   2. core/src/Cuda/Kokkos_Cuda_Instance.hpp: cudaGraphAddDependencies takes an
#      edge-data argument before the count (pass nullptr);
#   3. same file: cudaMemPrefetchAsync takes a cudaMemLocation
#      {cudaMemLocationTypeDevice, device} and a flags argument (0).
# Without KOKKOS_SRC, KOKKOS_CUDA_PREFIX must hold a CUDA-enabled Kokkos
# install (bin/nvcc_wrapper, lib*/cmake/Kokkos), which is used as it is.
# See docs/gpu.md.
#
# Environment (all optional except KOKKOS_SRC or an installed prefix):
#   KOKKOS_SRC          Kokkos source tree
#   KOKKOS_CUDA_PREFIX  Kokkos install prefix
#                       (default ${XDG_CACHE_HOME:-$HOME/.cache}/dsp/kokkos-cuda)
#   KOKKOS_CUDA_BUILD   Kokkos build directory (default <prefix>.build)
#   KOKKOS_ARCH         Kokkos GPU architecture, as in Kokkos_ARCH_<name>
#                       (default HOPPER90: H100/H200)
#   KOKKOS_CMAKE_ARGS   extra arguments for Kokkos' cmake configure
#   KOKKOS_REBUILD=1    rebuild Kokkos even if the prefix holds a matching install
#   BUILD_DIR           dsp build directory, relative to the repository root or
#                       absolute (default build-cuda)
#   CMAKE_ARGS          extra arguments for dsp's cmake configure
#   DSP_CUDA_WERROR=1   warnings are errors in all of dsp's targets: the host
#                       compiler's (-Werror) and nvcc's own (-Werror
#                       all-warnings), through CMAKE_CXX_FLAGS
#   DSP_CUDA_BENCH      1: build the benchmarks, 0: don't, auto (default): build
#                       them when Google Benchmark and single-precision FFTW-MPI
#                       are found
#   DSP_CUDA_NO_TEST=1  build only, do not run ctest
#   DSP_CUDA_TARGETS    build only these targets (a list of words, e.g. the four
#                       scripts/gpu-checks.sh runs: "test_nccl dsp_serial_tests
#                       dsp_mpi_tests dsp-bench"); implies DSP_CUDA_NO_TEST=1
#   CTEST_ARGS          extra arguments for ctest
#   JOBS                parallel build jobs (default: nproc)
#   CUDA_ROOT           the CUDA toolkit, when nvcc is not on PATH
#                       (default /usr/local/cuda when it has bin/nvcc)
#   NCCL_ROOT           where NCCL is, when not next to the CUDA toolkit
#
# Kokkos is rebuilt only when the prefix lacks an install made from the same
# source contents and options (recorded in <prefix>/dsp-kokkos.stamp), so a
# second run only rebuilds dsp.
#
# ctest: a binary linked against CUDA Kokkos needs the driver's libcuda.so.1
# to load at all. Where the driver does not load or sees no GPU, every test
# that runs such a binary prints why and exits 77 (tests/cuda_launcher.cpp),
# which CTest reports as Skipped; the compile-fail and packaging tests, which
# only compile, still run.
set -euo pipefail

die() { echo "kokkos-cuda.sh: error: $*" >&2; exit 1; }
say() { echo "kokkos-cuda.sh: $*"; }

repo="$(realpath "$(dirname "$0")/..")"

prefix="$(realpath -m "${KOKKOS_CUDA_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/dsp/kokkos-cuda}")"
# A CUDA-enabled Kokkos install: nvcc_wrapper and a package config whose
# Kokkos_DEVICES include CUDA.
cuda_kokkos_installed() {
  [ -x "$1/bin/nvcc_wrapper" ] && grep -qs '^set(Kokkos_DEVICES .*CUDA' "$1"/lib*/cmake/Kokkos/*.cmake
}
if [ -z "${KOKKOS_SRC:-}" ]; then
  cuda_kokkos_installed "$prefix" \
    || die "set KOKKOS_SRC to a Kokkos source tree, or KOKKOS_CUDA_PREFIX to a CUDA-enabled Kokkos install ($prefix is none; see the usage at the top of $0)"
elif [ ! -f "$KOKKOS_SRC/CMakeLists.txt" ] || [ ! -f "$KOKKOS_SRC/bin/nvcc_wrapper" ]; then
  die "KOKKOS_SRC=$KOKKOS_SRC is not a Kokkos source tree (no CMakeLists.txt or bin/nvcc_wrapper)"
else
  KOKKOS_SRC="$(cd "$KOKKOS_SRC" && pwd)"
fi
kbuild="$(realpath -m "${KOKKOS_CUDA_BUILD:-$prefix.build}")"
arch="${KOKKOS_ARCH:-HOPPER90}"
jobs="${JOBS:-$(nproc)}"
build="${BUILD_DIR:-build-cuda}"
case "$build" in /*) ;; *) build="$repo/$build" ;; esac
build="$(realpath -m "$build")"
case "$prefix/" in "$repo"/*) die "KOKKOS_CUDA_PREFIX must be outside the repository ($repo)" ;; esac
case "$kbuild/" in "$repo"/*) die "KOKKOS_CUDA_BUILD must be outside the repository ($repo)" ;; esac

command -v cmake >/dev/null || die "cmake not found"
nvcc="${CUDA_ROOT:+$CUDA_ROOT/bin/}nvcc"
if ! command -v "$nvcc" >/dev/null; then
  nvcc=/usr/local/cuda/bin/nvcc
  [ -x "$nvcc" ] || die "nvcc not found: put the CUDA toolkit's bin/ on PATH or set CUDA_ROOT"
  export CUDA_ROOT=/usr/local/cuda  # nvcc_wrapper runs $CUDA_ROOT/bin/nvcc, else nvcc from PATH
fi
nvcc_version="$("$nvcc" --version | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p')"
host_cxx="${NVCC_WRAPPER_DEFAULT_COMPILER:-g++}"
host_cxx_version="$("$host_cxx" --version | head -n 1)"

# The extra-argument variables are lists of words (no quoting inside them).
read -ra extra_kokkos <<< "${KOKKOS_CMAKE_ARGS:-}"
read -ra extra_dsp <<< "${CMAKE_ARGS:-}"
read -ra extra_ctest <<< "${CTEST_ARGS:-}"
read -ra targets <<< "${DSP_CUDA_TARGETS:-}"

if [ -z "${KOKKOS_SRC:-}" ]; then
  say "KOKKOS_SRC not set: using the CUDA-enabled Kokkos installed in $prefix as it is; nvcc $nvcc_version"
else
  # Kokkos version from its CMakeLists.txt (x.y.99 is a development snapshot).
  kv() { sed -n "s/^set(Kokkos_VERSION_$1 \([0-9]*\)).*/\1/p" "$KOKKOS_SRC/CMakeLists.txt"; }
  kmaj="$(kv MAJOR)"; kmin="$(kv MINOR)"; kpat="$(kv PATCH)"
  if [ -z "$kmaj" ] || [ -z "$kmin" ] || [ -z "$kpat" ]; then
    die "cannot read the Kokkos version from $KOKKOS_SRC/CMakeLists.txt"
  fi
  say "Kokkos $kmaj.$kmin.$kpat from $KOKKOS_SRC; nvcc $nvcc_version; host compiler $host_cxx_version"
  [ "$kmaj" -ge 4 ] || die "Kokkos $kmaj.$kmin.$kpat: dsp's CUDA build needs Kokkos 4.x"
  # CUDA 13 support arrived in Kokkos 4.7.1; an older tree must carry the three fixes above.
  if [ "${nvcc_version%%.*}" -ge 13 ] && [ $((kmaj * 10000 + kmin * 100 + kpat)) -lt 40701 ]; then
    inst="$KOKKOS_SRC/core/src/Cuda/Kokkos_Cuda_Instance.hpp"
    if grep -Eq '^default_arch="sm_([3-6][0-9]|7[0-2])"' "$KOKKOS_SRC/bin/nvcc_wrapper" \
       || ! grep -q cudaMemLocation "$inst"; then
      die "CUDA $nvcc_version needs Kokkos 4.7.1 or later, or a copy patched for CUDA 13 (see the usage at the top of $0); $KOKKOS_SRC is Kokkos $kmaj.$kmin.$kpat and looks unpatched"
    fi
    say "Kokkos $kmaj.$kmin.$kpat predates CUDA 13 support; it looks patched, going on"
  fi

  mkdir -p "$prefix"
  kokkos_args=(
    -DCMAKE_CXX_COMPILER="$KOKKOS_SRC/bin/nvcc_wrapper"
    -DCMAKE_CXX_STANDARD=20
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=ON
    -DCMAKE_INSTALL_PREFIX="$prefix"
    -DKokkos_ENABLE_CUDA=ON
    -DKokkos_ENABLE_SERIAL=ON
    "-DKokkos_ARCH_$arch=ON"
    -DKokkos_ENABLE_TESTS=OFF
    -DKokkos_ENABLE_EXAMPLES=OFF
  )
  kokkos_args+=("${extra_kokkos[@]}")

  # The stamp: the source tree's contents (so a patched copy counts as different),
  # its git commit when it has one, the toolchain and the configure arguments.
  src_hash="$(cd "$KOKKOS_SRC" && find . -type f ! -path './.git/*' ! -path './build*' -print0 \
              | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
  src_commit="$(git -C "$KOKKOS_SRC" rev-parse HEAD 2>/dev/null || echo none)"
  stamp_file="$prefix/dsp-kokkos.stamp"
  stamp="$(printf '%s\n' "kokkos $kmaj.$kmin.$kpat" "commit $src_commit" "contents $src_hash" \
           "nvcc $nvcc_version" "host $host_cxx_version" "${kokkos_args[@]}")"

  if [ "${KOKKOS_REBUILD:-0}" != 1 ] && [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp" ] \
     && [ -x "$prefix/bin/nvcc_wrapper" ]; then
    say "Kokkos already installed in $prefix from the same source and options: not rebuilding"
  else
    say "building Kokkos ($arch) in $kbuild, installing to $prefix"
    rm -f "$stamp_file"
    start=$SECONDS
    cmake -S "$KOKKOS_SRC" -B "$kbuild" "${kokkos_args[@]}"
    cmake --build "$kbuild" -j"$jobs"
    cmake --install "$kbuild"
    [ -x "$prefix/bin/nvcc_wrapper" ] || die "the Kokkos install in $prefix has no bin/nvcc_wrapper"
    printf '%s\n' "$stamp" > "$stamp_file"
    say "Kokkos built and installed in $((SECONDS - start)) s"
  fi
fi

# Benchmarks: on request, or when Google Benchmark and FFTW (single, MPI) are found.
bench="${DSP_CUDA_BENCH:-auto}"
if [ "$bench" = auto ]; then
  probe="$(mktemp -d)"
  trap 'rm -rf "$probe"' EXIT
  cat > "$probe/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.20)
project(probe CXX)
find_package(benchmark QUIET)
find_library(F fftw3f)
find_library(FM fftw3f_mpi)
if(NOT benchmark_FOUND OR NOT F OR NOT FM)
  message(FATAL_ERROR "missing")
endif()
EOF
  if cmake -S "$probe" -B "$probe/b" "${extra_dsp[@]}" >/dev/null 2>&1; then
    bench=1
  else
    bench=0
    say "Google Benchmark or FFTW (fftw3f, fftw3f_mpi) not found: not building the benchmarks" \
        "(Debian: apt-get install libbenchmark-dev libfftw3-dev libfftw3-mpi-dev)"
  fi
fi
bench_flag=OFF
[ "$bench" = 1 ] && bench_flag=ON

werror=()
[ "${DSP_CUDA_WERROR:-0}" = 1 ] && werror=("-DCMAKE_CXX_FLAGS=-Werror -Werror=all-warnings")

say "configuring dsp in $build"
cmake -S "$repo" -B "$build" \
  -DCMAKE_CXX_COMPILER="$prefix/bin/nvcc_wrapper" \
  -DKokkos_ROOT="$prefix" \
  -DCMAKE_BUILD_TYPE=Release \
  -DDSP_ENABLE_MPI=ON \
  -DDSP_ENABLE_NCCL=ON \
  -DDSP_BUILD_EXAMPLES=ON \
  -DDSP_BUILD_BENCHMARKS="$bench_flag" \
  "${werror[@]}" \
  "${extra_dsp[@]}"
start=$SECONDS
if [ ${#targets[@]} -gt 0 ]; then
  say "building dsp's targets ${targets[*]}"
  cmake --build "$build" -j"$jobs" --target "${targets[@]}"
  say "built in $((SECONDS - start)) s in $build; DSP_CUDA_TARGETS: not running the tests"
  exit 0
fi
say "building dsp"
cmake --build "$build" -j"$jobs"
say "dsp built in $((SECONDS - start)) s"

if [ "${DSP_CUDA_NO_TEST:-0}" = 1 ]; then
  say "built in $build; DSP_CUDA_NO_TEST=1: not running the tests"
  exit 0
fi

# shellcheck source=scripts/mpi_env.sh
source "$repo/scripts/mpi_env.sh"
cd "$build"
ctest --output-on-failure -j"$jobs" "${extra_ctest[@]}"
