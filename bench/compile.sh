#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The compile cost of dsp to a user: CPU time (user + sys) to compile
#   bench/compile/user_tu.cpp      a typical mix of dsp calls (switches, a gather,
#                                  a batch, a wire, a split-phase switch, a mesh
#                                  redistribute), header-only (dsp::mpi)
#   the same with -DDSP_COMPILED   as a file that links dsp::compiled
#   bench/compile/baseline_tu.cpp  its Kokkos + MPI part alone
# each REPS times (default 3), interleaved; prints every run, the medians and
# the ratios to the baseline. Flags as a user's Release build: g++ -std=c++20
# -O3 -DNDEBUG, Debian's Kokkos and Open MPI. (The library itself,
# src/compiled.cpp, is compiled once per build of dsp, not per user file.)
set -euo pipefail
cd "$(dirname "$0")/.."
reps="${REPS:-3}"
cxx="${CXX:-g++}"
read -r -a mpi_flags <<< "$(mpicxx --showme:compile)"
flags=(-std=c++20 -O3 -DNDEBUG -Iinclude -isystem /usr/include/trilinos "${mpi_flags[@]}" -c -o /dev/null)
cpu() {  # CPU seconds of one compile
  local TIMEFORMAT='%U %S' t
  t=$( { time "$cxx" "${flags[@]}" "$@" >/dev/null 2>&1; } 2>&1 )
  awk -v t="$t" 'BEGIN {split(t, a, " "); printf "%.2f\n", a[1] + a[2]}'
}
median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}'; }
h=(); c=(); b=()
echo "load before: $(uptime | sed 's/.*load average: //')"
for ((i = 0; i < reps; ++i)); do
  h+=("$(cpu bench/compile/user_tu.cpp)")
  c+=("$(cpu -DDSP_COMPILED bench/compile/user_tu.cpp)")
  b+=("$(cpu bench/compile/baseline_tu.cpp)")
  echo "run $i: header-only ${h[-1]} s, compiled ${c[-1]} s, baseline ${b[-1]} s"
done
echo "load after: $(uptime | sed 's/.*load average: //')"
mh=$(printf '%s\n' "${h[@]}" | median)
mc=$(printf '%s\n' "${c[@]}" | median)
mb=$(printf '%s\n' "${b[@]}" | median)
awk -v h="$mh" -v c="$mc" -v b="$mb" 'BEGIN {
  printf "median: header-only %.2f s (%.2fx), compiled %.2f s (%.2fx), baseline %.2f s\n", h, h / b, c, c / b, b }'
