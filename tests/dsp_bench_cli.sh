#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# dsp-bench's command line: the sizes it steps through (always growing, at most
# 1000 per op), and its refusals, each before anything runs, with a message
# that names the option and the value: step factors that do not grow the size
# or are absurd, too many sizes, --peers past its bound, an --output file that
# cannot be written (on one rank and on two), a wire that does not carry the
# element type, --graph where it cannot run, a bad DSP_* environment value.
# Then short checked runs (0 wrong) of the half types, every wire with every
# type it carries (switch, batch, and its pack and unpack kernels) and
# -a first_call, on one rank and on two.
# Usage: dsp_bench_cli.sh DSP_BENCH WORKDIR [MPIEXEC ARGS...]
# DSP_BENCH runs as one process (MPI's singleton start); MPIEXEC ARGS, when
# given, start it on 2 ranks for the checks that need several (e.g.
# mpiexec -n 2).
set -u
bench=$1
work=$2
shift 2
mkdir -p "$work"
fails=0

# check WANT_RC REGEX MODE ARGS...: dsp-bench ARGS exits with WANT_RC ("nonzero":
# any but 0) and, MODE "has", a line of its output (stdout and stderr) matches
# REGEX; MODE "not", none does; MODE "lines=N", exactly N lines do.
check() {
  want_rc=$1
  regex=$2
  mode=$3
  shift 3
  out=$("$@" 2>&1)
  rc=$?
  n=$(printf '%s\n' "$out" | grep -Ec -- "$regex")
  rc_ok=1
  if [ "$want_rc" = nonzero ]; then
    [ "$rc" -ne 0 ] || rc_ok=0
  else
    [ "$rc" -eq "$want_rc" ] || rc_ok=0
  fi
  case $mode in
    has) [ "$n" -gt 0 ] && out_ok=1 || out_ok=0 ;;
    not) [ "$n" -eq 0 ] && out_ok=1 || out_ok=0 ;;
    lines=*) [ "$n" -eq "${mode#lines=}" ] && out_ok=1 || out_ok=0 ;;
    *) echo "dsp_bench_cli.sh: unknown mode $mode" >&2; exit 2 ;;
  esac
  if [ "$rc_ok" -eq 0 ]; then
    echo "FAIL: $*: exit code $rc, expected $want_rc"
    printf '%s\n' "$out" | head -5
    fails=$((fails + 1))
  elif [ "$out_ok" -eq 0 ]; then
    echo "FAIL: $*: $n line(s) match /$regex/, expected $mode:"
    printf '%s\n' "$out" | head -5
    fails=$((fails + 1))
  else
    echo "ok: $* -> $rc, $mode /$regex/"
  fi
}
expect() { # RC REGEX ARGS...: one rank, the output matches
  rc=$1
  regex=$2
  shift 2
  check "$rc" "$regex" has "$bench" "$@"
}
quick="-n 1 -w 0 -F csv"

# The sizes: -b, then times -f (at least one byte more each step) or plus -i, up to -e.
# shellcheck disable=SC2086
check 0 '^switch 0->1,1,mpi,' lines=3 "$bench" -b 1 -e 1M -f 1000 $quick             # 1, 1000, 1000000
# shellcheck disable=SC2086
check 0 '^switch 0->1,1,mpi,' lines=9 "$bench" -b 32 -e 40 -f 1.03125 $quick -d int8 # 32, 33, ..., 40
# shellcheck disable=SC2086
check 0 '^switch 0->1,1,mpi,' lines=1 "$bench" -b 32 -e 1K -f 4294967296 $quick      # the largest factor
# shellcheck disable=SC2086
check 0 '^switch 0->1,1,mpi,' lines=1000 "$bench" -b 1 -e 1000 -i 1 $quick -c 0     # the most sizes

# Refusals, exit code 2, before anything runs.
expect 2 '^dsp-bench: --stepfactor: 1e\+20 is too large \(at most 2\^32 = 4294967296\)' -f 1e20
expect 2 '^dsp-bench: --stepfactor: 1\.01 grows --minbytes 32 by less than one byte per step: give at least 1\.03125 \(1 \+ 1/32\)' -f 1.01
expect 2 '^dsp-bench: --stepfactor: 1\.3 grows --minbytes 3 by less than one byte per step: give at least 1\.33333' -b 3 -e 8 -f 1.3
expect 2 '^dsp-bench: --stepfactor: inf is not a finite factor above 1' -f inf
expect 2 '^dsp-bench: --stepfactor: 1\.001 from --minbytes 1024 to --maxbytes 1073741824 makes more than 1000 sizes' -b 1K -e 1G -f 1.001
expect 2 '^dsp-bench: --stepbytes: 1 from --minbytes 1 to --maxbytes 1001 makes more than 1000 sizes' -b 1 -e 1001 -i 1
expect 2 '^dsp-bench: --stepbytes: 1 from --minbytes 1 to --maxbytes 1048576 makes more than 1000 sizes' -b 1 -e 1M -i 1
expect 2 '^dsp-bench: --peers: must be at most 65536, not 1000000000' -o pack --peers 1000000000
expect 0 'at most 65536' --help
# An --output that cannot be written: refused before the run (with -F csv and
# -O, the average line goes to stdout after the run: it must not appear).
expect 2 "^dsp-bench: --output: cannot write '/nonexistent-dir/x\.csv'" -b 1K -e 1K -F csv -O /nonexistent-dir/x.csv
check 2 '^# Avg bus bandwidth' not "$bench" -b 1K -e 1K -F csv -O /nonexistent-dir/x.csv
expect 2 "^dsp-bench: --output: cannot write '$work': Is a directory" -b 1K -e 1K -O "$work"
rm -f "$work/out.csv"
expect 0 '^# Avg bus bandwidth' -b 1K -e 4K -n 1 -w 0 -F csv -O "$work/out.csv"
check 0 '^switch 0->1,1,mpi,' lines=3 cat "$work/out.csv"
if [ -w /dev/full ]; then
  expect 1 "^dsp-bench: --output: writing '/dev/full' failed" -b 1K -e 1K -n 1 -w 0 -O /dev/full
fi
# pack and unpack: a block far past the size asked for (many peers, a wide --inner).
expect 1 "rank 0.s block would be 262144 MiB .*lower --peers or --inner" -o unpack --dims 1,0 --peers 65536 --inner 1M -b 1G -e 1G

# Wires, agreement modes, CUDA graphs: refused before anything runs.
expect 2 '^dsp-bench: --wire: fp32 does not carry -d float \(dsp::wire_carries\): -d float travels on bf16, fp16 or fp8_e4m3$' -d float --wire fp32
expect 2 '^dsp-bench: --wire: bf16 does not carry -d int8 \(dsp::wire_carries\): -d int8 travels exact only$' -d int8 --wire bf16
expect 2 '^dsp-bench: --wire: bf16 does not carry -d bf16 \(dsp::wire_carries\): -d bf16 travels on fp8_e4m3$' -d bf16 --wire bf16
expect 2 '^dsp-bench: --wire: fp16 does not carry -d fp16 \(dsp::wire_carries\): -d fp16 travels on fp8_e4m3 or bf16$' -d fp16 --wire fp16
expect 2 '^dsp-bench: --wire: bf16 does not carry -d double \(dsp::wire_carries\): -d double travels on fp32$' -d double --wire bf16
expect 2 '^dsp-bench: --wire: fp8_e4m3 applies to -o switch, pack and unpack, not to -o alltoall,memcpy$' -o alltoall,memcpy --wire fp8_e4m3
expect 2 '^dsp-bench: --wire: fp4 not in \{exact,bf16,fp16,fp8_e4m3,fp32\}$' --wire fp4
expect 2 '^dsp-bench: --datatype: half not in \{float,double,int32,int64,int8,uint8,bf16,fp16\}$' -d half
expect 2 "^dsp-bench: --agreement: 'first' is not 0, 1 or first_call$" -a first
# --graph: needs -B nccl (in a build without it, says so), -a first_call, and an op it can capture.
expect 2 '^dsp-bench: --graph: CUDA graphs need -B nccl' --graph -a first_call
expect 2 '^dsp-bench: --graph: (needs -a first_call, not -a 1|CUDA graphs need -B nccl, and this dsp-bench is built without it)' -B nccl --graph
expect 2 '^dsp-bench: --graph: (-o pack is not captured|CUDA graphs need -B nccl, and this dsp-bench is built without it)' -B nccl -a first_call --graph -o switch,pack
# A DSP_* value dsp does not accept: refused at once, also for the kernels timed alone.
check 2 '^dsp-bench: DSP_DEVICE_KERNELS=fast is not a value dsp accepts; accepted: tuned, segments, baseline$' has env DSP_DEVICE_KERNELS=fast "$bench" -o pack --peers 2
check 2 '^dsp-bench: DSP_AGREEMENT_MODE=once is not a value dsp accepts' has env DSP_AGREEMENT_MODE=once "$bench"

# On 2 ranks: every rank stops, rank 0 says why once.
if [ $# -gt 0 ]; then
  check nonzero "^dsp-bench: --output: cannot write '/nonexistent-dir/x\.csv'" lines=1 "$@" "$bench" -b 1K -e 1K -O /nonexistent-dir/x.csv
  check nonzero '^dsp-bench: --stepfactor: 1e\+20 is too large' lines=1 "$@" "$bench" -f 1e20
  check nonzero '^dsp-bench: --wire: fp32 does not carry -d float' lines=1 "$@" "$bench" --wire fp32
fi

# checked N ARGS...: `ARGS -F csv` (a dsp-bench command line, perhaps under
# mpiexec) exits 0 and prints N rows that were checked and found right (#wrong
# 0) and no row with a wrong element: the checks ran, and passed.
checked() {
  want=$1
  shift
  out=$("$@" -F csv 2>&1)
  rc=$?
  right=$(printf '%s\n' "$out" | grep -Ec ',0,([0-9]+x[0-9]+x[0-9]+|-)$')
  wrong=$(printf '%s\n' "$out" | grep -Ec ',[1-9][0-9]*,([0-9]+x[0-9]+x[0-9]+|-)$')
  if [ "$rc" -ne 0 ] || [ "$right" -ne "$want" ] || [ "$wrong" -ne 0 ]; then
    echo "FAIL: $*: exit code $rc, $right rows checked right (expected $want), $wrong with wrong elements"
    printf '%s\n' "$out" | head -8
    fails=$((fails + 1))
  else
    echo "ok: $* -> $right rows checked, 0 wrong"
  fi
}
# runs LAUNCH...: every run, under LAUNCH (nothing: one process, MPI's
# singleton start). Two sizes each (1K, 16K), so N is twice the checked ops
# (memcpy is never checked).
small="-b 1K -e 16K -f 16 -n 1 -w 1 -c 1"
runs() {
  for t in bf16 fp16; do
    # shellcheck disable=SC2086
    checked 8 "$@" "$bench" -d "$t" -o switch,alltoall,allgather,pack,memcpy --peers 3 $small
    # shellcheck disable=SC2086
    checked 4 "$@" "$bench" -d "$t" -o switch,unpack --dims 1,0 --batch 3 -a first_call --peers 3 $small
  done
  # Every pair dsp::wire_carries accepts: one tensor on the wire and the
  # wire's pack kernel; a batch of three under first_call and the unpack kernel.
  for tw in float:bf16 float:fp16 float:fp8_e4m3 bf16:fp8_e4m3 fp16:fp8_e4m3 fp16:bf16 double:fp32; do
    # shellcheck disable=SC2086
    checked 4 "$@" "$bench" -d "${tw%%:*}" --wire "${tw#*:}" -o switch,pack --dims 0,2 --peers 3 $small
    # shellcheck disable=SC2086
    checked 4 "$@" "$bench" -d "${tw%%:*}" --wire "${tw#*:}" -o switch,unpack --dims 1,0 --batch 3 -a first_call \
      --peers 3 $small
  done
  # first_call alone, one tensor, exact.
  # shellcheck disable=SC2086
  checked 2 "$@" "$bench" -a first_call -o switch $small
}
runs
if [ $# -gt 0 ]; then runs "$@"; fi

if [ "$fails" -ne 0 ]; then
  echo "$fails dsp-bench check(s) failed"
  exit 1
fi
echo "all dsp-bench checks passed"
