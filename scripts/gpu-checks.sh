#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The GPU checks of docs/gpu.md in one run of about 3 minutes on a machine with
# one NVIDIA GPU: the device tests, then the timings of the old (baseline) and
# new (tuned) device kernels against cudaMemcpyAsync, then a markdown table of
# them (scripts/gpu-table.py). It runs the binaries of a CUDA build made
# beforehand (scripts/kokkos-cuda.sh; docs/gpu.md says which); it builds nothing.
#
#   bash scripts/gpu-checks.sh <bin-dir> <log-dir>
#   DRY_RUN=1 bash scripts/gpu-checks.sh <bin-dir> <log-dir>   # the plan only: each command, its
#                                                              # timeout and estimate, the totals
#
# <bin-dir> holds test_nccl, dsp_serial_tests, dsp_mpi_tests and dsp-bench
# (each there or under tests/, bench/ or bin/: a build folder or a bundle).
# Every timing step runs once per kernel set, DSP_DEVICE_KERNELS=baseline then
# tuned, back to back, so that old and new interleave through the run.
#
# Environment:
#   BUDGET=S    the whole run's limit in seconds (default 240). Each run gets at
#               most what is left of it; a run that would start with less than
#               10 s left is skipped and recorded as skipped. The summary prints
#               the total.
#   FULL=1      adds 4 GiB to the large sizes, the half-type wires and 1 GiB to
#               the wire and batch steps (estimated 10 minutes; raise BUDGET)
#   ONLY=REGEX  runs only the steps whose names match (e.g. ONLY='^(pack|unpack)')
#   KERNELS     the kernel sets of a timing step, in order (default "baseline tuned"; also
#               segments, the first tuned kernels); a set may carry a tuning after @, given
#               to the run as DSP_DEVICE_TUNING (include/dsp/kernels/tuning.hpp), e.g.
#               "tuned tuned@waves=0,groups=4,convert=hardware"; the table's old column is
#               the first set, its new column the last
#   MPIEXEC     starts the 2-rank test (default mpiexec; as root, scripts/mpi_env.sh,
#               sourced here, lets Open MPI run)
#   DOCS=FILE   given to gpu-table.py: the table also replaces the block between
#               <!-- gpu-checks:begin --> and <!-- gpu-checks:end --> in FILE
#   TABLE=0     no table at the end
#   ARCHIVE=F   packs <log-dir> into the tar.gz file F at the end (the device
#               tool brings back at most 8 files from $OUT: one archive, one table)
#
# Writes <log-dir>/machine.txt (nvidia-smi), <log-dir>/<step>.txt for a test
# and <log-dir>/<step>.<kernels>.txt for a timing, <log-dir>/steps.tsv (one
# line per run: name, kernels, kind, exit code or "skipped", seconds, timeout,
# estimate, log, command), <log-dir>/total.txt and <log-dir>/table.md. A failed
# run does not stop the others. Exit status: 0 all passed, 1 a run failed, 3 none
# failed but some were skipped for the budget.
#
# The estimates (seconds per run, the EST column of DRY_RUN) come from the
# first device run (docs/gpu.md, "First run on a GPU": 155 s for 5 test runs and
# 9 timing runs moving about 80 GiB through host fills and checks): about 1.5 s
# to start a process (MPI singleton, CUDA, Kokkos, NCCL), about 1 s per GiB of
# tensor filled and checked on the host (less for the kernels timed alone, whose
# host loops now run in threads), the timed device work itself a few ms.
set -uo pipefail

[ $# -eq 2 ] || { echo "usage: $0 <bin-dir> <log-dir>  (DRY_RUN=1: print the plan only)" >&2; exit 2; }
bins="$1"
logs="$2"
here="$(cd "$(dirname "$0")" && pwd)"
dry="${DRY_RUN:-0}"
budget="${BUDGET:-240}"
full="${FULL:-0}"
kernel_sets="${KERNELS:-baseline tuned}"
mpiexec="${MPIEXEC:-mpiexec}"
case "$budget" in '' | *[!0-9]*) echo "gpu-checks.sh: BUDGET=$budget is not a whole number of seconds" >&2; exit 2 ;; esac
for k in $kernel_sets; do
  case "${k%%@*}" in baseline | segments | tuned) ;; *) echo "gpu-checks.sh: KERNELS: '$k' is not baseline, segments or tuned (each optionally @TUNING)" >&2; exit 2 ;; esac
done
# The table's columns: old, the first kernel set; new, the last.
old_set=baseline new_set=tuned
read -r -a sets <<< "$kernel_sets"
if [ "${#sets[@]}" -ge 2 ]; then old_set=${sets[0]} new_set=${sets[-1]}; fi
# shellcheck disable=SC1091
[ -f "$here/mpi_env.sh" ] && . "$here/mpi_env.sh"

find_bin() {
  local f
  for f in "$bins/$1" "$bins/tests/$1" "$bins/bench/$1" "$bins/bin/$1"; do
    [ -x "$f" ] && { echo "$f"; return; }
  done
  [ "$dry" = 1 ] || echo "gpu-checks.sh: $1 not found under $bins (its runs will fail)" >&2
  echo "$bins/$1"
}
nccl_test="$(find_bin test_nccl)"
serial_tests="$(find_bin dsp_serial_tests)"
mpi_tests="$(find_bin dsp_mpi_tests)"
bench="$(find_bin dsp-bench)"

tsv="$logs/steps.tsv"
if [ "$dry" != 1 ]; then
  mkdir -p "$logs"
  printf 'name\tkernels\tkind\trc\tseconds\ttimeout\testimate\tlog\tcommand\n' > "$tsv"
  {
    date -u '+%Y-%m-%d %H:%M UTC'
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
    nvcc --version 2>/dev/null | tail -n 2
    echo "cpus: $(nproc)"
  } > "$logs/machine.txt" 2>&1
  cat "$logs/machine.txt"
fi

t0=$SECONDS
runs=0 est_total=0 worst=0 failed=0 skipped=0
# run NAME KERNELS KIND LIMIT EST CMD...: one run, KERNELS "-" for no
# DSP_DEVICE_KERNELS (tests, and the references that launch no dsp kernel).
run() {
  local name="$1" set="$2" kind="$3" limit="$4" est="$5"
  shift 5
  local log="$name.txt"
  [ "$set" != - ] && log="$name.$set.txt"
  runs=$((runs + 1)) est_total=$((est_total + est)) worst=$((worst + limit))
  local envs=()
  [ "$set" != - ] && envs=(env "DSP_DEVICE_KERNELS=${set%%@*}")
  [ "$set" != "${set#*@}" ] && envs+=("DSP_DEVICE_TUNING=${set#*@}")
  if [ "$dry" = 1 ]; then
    printf '%-22s %-8s timeout %3ds  est %3ds  %s\n' "$name" "$set" "$limit" "$est" "${envs[*]:+${envs[*]} }$*"
    return 0
  fi
  local left=$((budget - (SECONDS - t0)))
  if [ "$left" -lt 10 ]; then
    skipped=$((skipped + 1))
    printf '%s\t%s\t%s\tskipped\t0\t%s\t%s\t%s\t%s\n' "$name" "$set" "$kind" "$limit" "$est" "$log" "$*" >> "$tsv"
    printf '%-22s %-8s SKIPPED (%ds of the %ds budget left)\n' "$name" "$set" "$left" "$budget"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local start=$SECONDS
  echo "== $name ($set): ${envs[*]:+${envs[*]} }$*" > "$logs/$log"
  timeout -k 5 "$limit" "${envs[@]}" "$@" >> "$logs/$log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && failed=$((failed + 1))
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$set" "$kind" "$rc" "$((SECONDS - start))" "$limit" "$est" \
    "$log" "$*" >> "$tsv"
  printf '%-22s %-8s rc=%-3d %4ds  (total %ds)\n' "$name" "$set" "$rc" "$((SECONDS - start))" "$((SECONDS - t0))"
  [ $rc -ne 0 ] && tail -n 5 "$logs/$log"
  return 0
}
selected() { [[ "$1" =~ ${ONLY:-.} ]]; }
# test NAME LIMIT EST CMD...: a device test, once.
test_step() {
  selected "$1" || return 0
  run "$1" - test "$2" "$3" "${@:4}"
}
# once NAME LIMIT EST CMD...: a timing that runs no dsp kernel (the cudaMemcpyAsync reference).
once() {
  selected "$1" || return 0
  run "$1" - time "$2" "$3" "${@:4}"
}
# timing NAME LIMIT EST CMD...: once per kernel set, back to back.
timing() {
  selected "$1" || return 0
  local k
  for k in $kernel_sets; do run "$1" "$k" time "$2" "$3" "${@:4}"; done
}

# ---------------------------------------------------------------- tests
# Tests run once, with the default (tuned) kernels; the baseline's device path
# is the one the first run tested, and every timing below checks its output
# under both sets.
test_step test_nccl 120 12 "$nccl_test"
test_step copy_kernel 90 8 "$serial_tests" '--source-file=*test_copy_kernel.cpp'
test_step convert_kernel 90 5 "$serial_tests" '--source-file=*test_convert_kernel.cpp'
test_step cuda_mpi.np1 90 6 "$mpiexec" -np 1 "$mpi_tests" '--source-file=*test_cuda_mpi.cpp'
test_step cuda_mpi.np2 120 8 "$mpiexec" -np 2 "$mpi_tests" '--source-file=*test_cuda_mpi.cpp'

# ---------------------------------------------------------------- timings
# One rank (MPI singleton), NCCL, device memory; every output checked.
b=(-B nccl -c 1 -n 20 -w 5)
large=(-b 256M -e 1G -f 4)
wire_sizes=(-b 256M -e 256M)
if [ "$full" = 1 ]; then
  large=(-b 256M -e 4G -f 4)
  wire_sizes=(-b 256M -e 1G -f 4)
fi
big() { if [ "$full" = 1 ]; then echo $(($1 * 4)); else echo "$1"; fi; } # estimates with 4 GiB

# The reference: a device-to-device cudaMemcpyAsync of the same sizes (float
# [A, B, 32]); every ratio of the table divides by the memcpy of its size.
once memcpy 60 "$(big 4)" "$bench" "${b[@]}" -o memcpy "${large[@]}"

# Pack and unpack kernels alone, rank 0's part of a switch among P peers
# (targets: 0.90 of memcpy for float, bf16 and int8, 2 to 64 peers).
for t in float bf16 int8; do
  case $t in float) est=3 ;; bf16) est=3 ;; int8) est=4 ;; esac
  for p in 8 64; do
    timing "pack_${t}_p$p" 60 "$(big "$est")" "$bench" "${b[@]}" -o pack -d "$t" --dims 0,1 --peers "$p" --inner 128 \
      "${large[@]}"
    timing "unpack_${t}_p$p" 60 "$(big "$est")" "$bench" "${b[@]}" -o unpack -d "$t" --dims 1,0 --peers "$p" \
      --inner 64 "${large[@]}"
  done
done

# A one-rank switch: a copy of the whole block (target: 0.95 of memcpy).
timing switch 60 "$(big 5)" "$bench" "${b[@]}" -o switch "${large[@]}"
# A batch of three (Q, K, V) in one dsp::batch.
timing batch3 60 "$(big 4)" "$bench" "${b[@]}" -o switch --batch 3 "${wire_sizes[@]}"

# Each wire: its pack kernel alone (targets on bytes read plus written: bf16
# and fp16 0.80 of memcpy, fp8_e4m3 0.70) and a one-rank switch on it.
wires="float:bf16 float:fp16 float:fp8_e4m3 double:fp32"
[ "$full" = 1 ] && wires="$wires bf16:fp8_e4m3 fp16:fp8_e4m3 fp16:bf16"
for tw in $wires; do
  timing "wire_${tw%%:*}_${tw#*:}" 60 "$([ "$full" = 1 ] && echo 8 || echo 3)" "$bench" "${b[@]}" -o pack,switch \
    -d "${tw%%:*}" --wire "${tw#*:}" --dims 0,1 --peers 8 --inner 128 "${wire_sizes[@]}"
done

# Small switches (64 KiB, 1 MiB), time per call: the agreement check on, off,
# and under first_call; against ncclAlltoAll and cudaMemcpyAsync of the same bytes.
small=(-B nccl -c 1 -n 100 -w 10 -b 64K -e 1M -f 16)
timing small_agree 30 3 "$bench" "${small[@]}" -a 1 -o switch,nccl-alltoall,memcpy
timing small_noagree 30 3 "$bench" "${small[@]}" -a 0 -o switch,memcpy
timing small_first_call 30 3 "$bench" "${small[@]}" -a first_call -o switch,memcpy
# The same small switch captured once in a CUDA graph and replayed (first_call).
timing small_graph 30 3 "$bench" "${small[@]}" -a first_call --graph -o switch,memcpy

# The reference again: how far the device drifted during the run.
once memcpy_end 60 "$(big 4)" "$bench" "${b[@]}" -o memcpy "${large[@]}"

total=$((SECONDS - t0))
if [ "$dry" = 1 ]; then
  echo "DRY_RUN: $runs runs; estimated ${est_total}s (the first device run's rates, above); worst case (every run" \
    "at its timeout) ${worst}s, cut at the budget of ${budget}s (BUDGET)"
  [ "$est_total" -gt "$budget" ] && echo "DRY_RUN: the estimate is over the budget: later steps would be skipped"
  exit 0
fi
printf '%s\t%s\t%s\n' "$total" "$budget" "$est_total" > "$logs/total.txt"
echo "gpu-checks.sh: total ${total}s of the ${budget}s budget (estimated ${est_total}s); $runs runs, $failed failed," \
  "$skipped skipped"
if [ "${TABLE:-1}" != 0 ]; then
  if command -v python3 >/dev/null; then
    OLD=$old_set NEW=$new_set python3 "$here/gpu-table.py" "$logs" > "$logs/table.md" || echo "gpu-checks.sh: gpu-table.py failed" >&2
    cat "$logs/table.md"
  else
    echo "gpu-checks.sh: no python3 here: run python3 scripts/gpu-table.py $logs where there is one" >&2
  fi
fi
if [ -n "${ARCHIVE:-}" ]; then
  tar -czf "$ARCHIVE" -C "$(dirname "$logs")" "$(basename "$logs")" &&
    echo "gpu-checks.sh: logs packed into $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1))"
fi
[ $failed -gt 0 ] && exit 1
[ $skipped -gt 0 ] && exit 3
exit 0
