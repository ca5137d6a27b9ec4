#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Rewrites the tables between the markers in docs/benchmarks.md from the ratio
# sections of docs/bench/suite_np*.txt (called by bench/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
doc=docs/benchmarks.md
tables=$(mktemp)
for f in docs/bench/suite_np*.txt; do
  awk '
    /^ratios:/ { on = 1; next }
    on && $1 == "case" { print "| case | method | median time (us) | GB/s per rank | ratio to raw collective | rounds |"
                         print "|---|---|---:|---:|---:|---:|"; next }
    on && NF == 6 { printf "| `%s` | %s | %s | %s | **%s** | %s |\n", $1, $2, $3, $4, $5, $6 }
  ' "$f"
  echo
done > "$tables"
awk -v t="$tables" '
  /<!-- tables:begin -->/ { print; while ((getline line < t) > 0) print line; skip = 1; next }
  /<!-- tables:end -->/ { skip = 0 }
  !skip { print }
' "$doc" > "$doc.new"
mv "$doc.new" "$doc"
rm -f "$tables"
