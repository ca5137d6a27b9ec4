#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The GPU checks of docs/gpu.md, in one run, on a machine with an NVIDIA GPU:
# the tests that need the device, then the pack/unpack, switch, batch and wire
# timings against a device-to-device copy. It runs the binaries of a CUDA build
# (scripts/kokkos-cuda.sh); it builds nothing.
#
#   bash scripts/gpu-checks.sh <cuda-build-dir> <log-dir>
#
# <cuda-build-dir> holds tests/test_nccl, tests/dsp_mpi_tests,
# tests/dsp_serial_tests and bench/dsp-bench (or all four in one folder).
# Each step writes <log-dir>/<step>.txt and a line to <log-dir>/summary.txt;
# a failed step does not stop the others, and the exit status says whether any
# failed. MPIEXEC (default mpiexec) starts the ranks, which share GPU 0.
# QUICK=1 runs each timing up to 1 GiB only; ONLY=<regex> runs only the
# steps whose names match (e.g. ONLY='^(pack|unpack|switch)').
set -uo pipefail

[ $# -eq 2 ] || { echo "usage: $0 <cuda-build-dir> <log-dir>" >&2; exit 2; }
build="$1"
logs="$2"
mkdir -p "$logs"
find_bin() {
  local f
  for f in "$build/$1" "$build/tests/$1" "$build/bench/$1"; do
    [ -x "$f" ] && { echo "$f"; return; }
  done
  echo "gpu-checks.sh: $1 not found under $build" >&2
  echo "/nonexistent/$1"
}
nccl_test="$(find_bin test_nccl)"
mpi_tests="$(find_bin dsp_mpi_tests)"
serial_tests="$(find_bin dsp_serial_tests)"
bench="$(find_bin dsp-bench)"
mpiexec="${MPIEXEC:-mpiexec}"
max=4G
[ "${QUICK:-0}" = 1 ] && max=1G

failed=0
# step NAME TIMEOUT COMMAND...: runs it, keeps its output, records the outcome.
step() {
  local name="$1" limit="$2"
  shift 2
  [[ "$name" =~ ${ONLY:-.} ]] || return 0
  local start=$SECONDS
  echo "== $name: $*" | tee "$logs/$name.txt"
  timeout "$limit" "$@" >> "$logs/$name.txt" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && failed=1
  printf '%-28s rc=%-3d %4ds  %s\n' "$name" "$rc" "$((SECONDS - start))" "$*" | tee -a "$logs/summary.txt"
  tail -n 3 "$logs/$name.txt"
}

{
  date -u
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  nvcc --version 2>/dev/null | tail -n 2
  nproc
} > "$logs/machine.txt" 2>&1
cat "$logs/machine.txt"

# Tests on the device.
step test_nccl 300 "$nccl_test"
step copy_kernel 300 "$serial_tests" '--source-file=*test_copy_kernel.cpp'

# Timings: one rank (MPI singleton), NCCL, device memory (docs/gpu.md, "What remains").
b=(-B nccl -c 1 -n 20 -w 5)
step pack_f32 300 "$bench" "${b[@]}" -o pack,memcpy --dims 0,1 --peers 8 --inner 128 -b 256M -e "$max"
step unpack_f32 300 "$bench" "${b[@]}" -o unpack,memcpy --dims 1,0 --peers 8 --inner 64 -b 256M -e "$max"
step pack_i8_p64 300 "$bench" "${b[@]}" -o pack,memcpy -d int8 --dims 0,1 --peers 64 --inner 128 -b 256M -e "$max"
step unpack_i8_p64 300 "$bench" "${b[@]}" -o unpack,memcpy -d int8 --dims 1,0 --peers 64 --inner 64 -b 256M -e "$max"
step switch 300 "$bench" "${b[@]}" -o switch,nccl-alltoall,memcpy -b 1M -e "$max" -f 4
step switch_noagree 300 "$bench" "${b[@]}" -a 0 -o switch,memcpy -b 1M -e "$max" -f 4
step switch_batch3 300 "$bench" "${b[@]}" -o switch --batch 3 -b 1M -e 1G -f 4
step switch_bf16 300 "$bench" "${b[@]}" -o switch --wire bf16 -b 1M -e 1G -f 4
step switch_batch3_bf16 300 "$bench" "${b[@]}" -o switch --batch 3 --wire bf16 -b 1M -e 1G -f 4

# Several ranks sharing the GPU (MPI): device tensors through StagedCommunicator, then the
# host suite in a CUDA build (Kokkos' CUDA backend initialised), the soak and the FFT left out.
for n in 1 2 4; do
  step "cuda_mpi.np$n" 180 "$mpiexec" -np "$n" "$mpi_tests" '--source-file=*test_cuda_mpi.cpp'
done
step mpi_suite.np2 300 "$mpiexec" -np 2 "$mpi_tests" '--source-file-exclude=*test_soak.cpp,*test_fft3d.cpp,*test_cuda_mpi.cpp'
exit $failed
