#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The compile cost of dsp to a user: CPU time (user + sys) to compile
# bench/compile/user_tu.cpp (a typical mix of dsp calls) and
# bench/compile/baseline_tu.cpp (its Kokkos + MPI part alone), each REPS times
# (default 3), interleaved; prints each run, the medians and their ratio.
# Flags as a user's Release build: g++ -std=c++20 -O3 -DNDEBUG, Debian's
# Kokkos and Open MPI. EXTRA_FLAGS is added to the dsp file only (e.g.
# -DDSP_COMPILED to measure the compiled mode's header side).
set -euo pipefail
cd "$(dirname "$0")/.."
reps="${REPS:-3}"
cxx="${CXX:-g++}"
flags=(-std=c++20 -O3 -DNDEBUG -Iinclude -isystem /usr/include/trilinos $(mpicxx --showme:compile) -c -o /dev/null)
cpu() {  # CPU seconds of one compile
  :
  /usr/bin/time -f "%U %S" -o /tmp/dsp-compile-time.$$ "$cxx" "${flags[@]}" "$@"
  awk '{printf "%.2f\n", $1+$2}' /tmp/dsp-compile-time.$$
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
u=(); b=()
for ((i = 0; i < reps; ++i)); do
  u+=("$(cpu ${EXTRA_FLAGS:-} bench/compile/user_tu.cpp)")
  b+=("$(cpu bench/compile/baseline_tu.cpp)")
  echo "run $i: user_tu ${u[-1]} s, baseline_tu ${b[-1]} s"
done
mu=$(printf '%s\n' "${u[@]}" | median)
mb=$(printf '%s\n' "${b[@]}" | median)
echo "median: user_tu $mu s, baseline_tu $mb s, ratio $(awk -v a="$mu" -v b="$mb" 'BEGIN {printf "%.2f", a / b}')"
