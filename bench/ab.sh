#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A/B comparison of two builds of dsp, interleaved in one run:
#
#   bash bench/ab.sh OLD_REV [NEW_REV]     (NEW_REV: the working tree when left out)
#
# Builds dsp-bench-suite (bench/bench_switch.cpp) at both revisions (git
# worktrees under AB_DIR, default /tmp/dsp-ab; the working tree builds in
# AB_DIR/work), then runs the two alternately, ROUNDS times each (default 3;
# the first run of each round alternates), at RANKS ranks (default 2), with
# --benchmark_filter=FILTER (default: all) and --benchmark_min_time=MIN_TIME
# (default 0.05). Every suite run prints, per case and method, its ratio to
# the raw collective measured in the same run (interleaved rounds); this
# script compares those ratios, so a machine that changes speed between runs
# moves both sides alike. Per (case, method) it prints the old and the new
# ratio (medians over runs) and new/old: the median over rounds of the
# per-round quotient, with its smallest and largest, as Google Benchmark's
# compare.py reports a change (below 1: the new build is faster). The load
# average before and after is printed with the table; raw outputs stay in
# AB_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
old="${1:?usage: bash bench/ab.sh OLD_REV [NEW_REV]  (NEW_REV: the working tree)}"
new="${2:-}"
rounds="${ROUNDS:-3}"
np="${RANKS:-2}"
filter="${FILTER:-.}"
min_time="${MIN_TIME:-0.05}"
work="${AB_DIR:-${TMPDIR:-/tmp}/dsp-ab}"
mkdir -p "$work"
DSP_WITH_BENCH=1 bash scripts/deps.sh
source scripts/mpi_env.sh

# Builds the suite from source tree $1 in $1/build-ab; prints the binary's path.
build_suite() {
  cmake -S "$1" -B "$1/build-ab" -DCMAKE_BUILD_TYPE=Release -DDSP_BUILD_BENCHMARKS=ON -DBUILD_TESTING=OFF \
    -DDSP_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$1/build-ab" -j"$(nproc)" --target dsp-bench-suite >/dev/null
  echo "$1/build-ab/bench/dsp-bench-suite"
}
# A worktree of revision $1 at $2 (made again when it holds another revision).
checkout() {
  local rev sha
  rev="$1"
  sha=$(git rev-parse "$rev^{commit}")
  if [ ! -d "$2" ] || [ "$(git -C "$2" rev-parse HEAD 2>/dev/null)" != "$sha" ]; then
    git worktree remove --force "$2" 2>/dev/null || rm -rf "$2"
    git worktree add --force --detach "$2" "$sha" >/dev/null
  fi
}

checkout "$old" "$work/old"
old_bin=$(build_suite "$work/old")
if [ -n "$new" ]; then
  checkout "$new" "$work/new"
  new_bin=$(build_suite "$work/new")
  new_name="$new"
else
  rm -rf "$work/work" && mkdir -p "$work/work"
  # The working tree as it is, tracked and untracked files, without build trees.
  git ls-files -co --exclude-standard -z | xargs -0 -I{} cp --parents {} "$work/work/" 2>/dev/null || true
  new_bin=$(build_suite "$work/work")
  new_name="working tree"
fi

run() {  # label round
  local bin="$old_bin"
  [ "$1" = new ] && bin="$new_bin"
  mpirun -np "$np" "$bin" --benchmark_filter="$filter" --benchmark_min_time="$min_time" \
    --benchmark_color=false > "$work/$1_$2.txt"
}
load_before=$(uptime | sed 's/.*load average: //')
for ((r = 1; r <= rounds; ++r)); do
  if ((r % 2)); then run old "$r"; run new "$r"; else run new "$r"; run old "$r"; fi
done
load_after=$(uptime | sed 's/.*load average: //')

# The ratio table of a run: "case method ratio" lines.
ratios() { awk '/^ratios:/ {on = 1; getline; next} on && NF == 6 {print $1, $2, $5}' "$1"; }
{
  for ((r = 1; r <= rounds; ++r)); do
    join <(ratios "$work/old_$r.txt" | awk '{print $1 "|" $2, $3}' | sort) \
         <(ratios "$work/new_$r.txt" | awk '{print $1 "|" $2, $3}' | sort)
  done
} | sort -k1,1 -k2,2g > "$work/pairs.txt"

echo "# A/B: old $old ($(git rev-parse --short "$old")), new $new_name; $rounds rounds at $np ranks, min_time $min_time"
echo "# load before: $load_before; after: $load_after; $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# ratio = time / raw collective in the same run; new/old: median [min, max] over rounds (< 1: new faster)"
printf '%-36s %-22s %9s %9s %9s %17s\n' case method old new new/old "[min, max]"
awk '
  function flush(   i, j, t, n) {
    if (key == "") return
    n = cnt
    for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) {
      if (q[j] < q[i]) { t = q[i]; q[i] = q[j]; q[j] = t }
      if (o[j] < o[i]) { t = o[i]; o[i] = o[j]; o[j] = t }
      if (w[j] < w[i]) { t = w[i]; w[i] = w[j]; w[j] = t }
    }
    split(key, kv, "|")
    printf "%-36s %-22s %9.3f %9.3f %9.3f   [%5.3f, %5.3f]\n", kv[1], kv[2], med(o, n), med(w, n), med(q, n), q[1], q[n]
  }
  function med(a, n) { return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  $1 != key { flush(); key = $1; cnt = 0 }
  { ++cnt; o[cnt] = $2; w[cnt] = $3; q[cnt] = ($2 > 0 ? $3 / $2 : 0) }
  END { flush() }
' "$work/pairs.txt"
