#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Formats dsp's C++ files (include/, tests/, examples/, bench/, tools/, python/src/) with clang-format
# and the repository's .clang-format, in place:
#   bash scripts/format.sh            # rewrite the files
#   bash scripts/format.sh --check    # change nothing; list the files that would
#                                     # change and exit 1 if there is any
# CLANG_FORMAT names the binary (default: clang-format-14, else clang-format).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=format
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  -h|--help) sed -n '3,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "format.sh: unknown argument '$1' (use --check)" >&2; exit 2 ;;
esac
cf="${CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format || true)}"
if [ -z "$cf" ]; then echo "format.sh: clang-format not found (apt-get install clang-format)" >&2; exit 2; fi

dirs=(include tests examples bench tools python/src)
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- "${dirs[@]/%//*.hpp}" "${dirs[@]/%//*.cpp}" "${dirs[@]/%//*.h}")
else
  mapfile -t files < <(find "${dirs[@]}" -type f \( -name '*.hpp' -o -name '*.cpp' -o -name '*.h' \) | sort)
fi
[ ${#files[@]} -eq 0 ] && { echo "format.sh: no C++ files found" >&2; exit 2; }

if [ "$mode" = format ]; then
  "$cf" -i --style=file "${files[@]}"
  echo "format.sh: formatted ${#files[@]} files with $("$cf" --version | head -1)"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$cf" --style=file --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf '%s\n' "${bad[@]}"
  echo "format.sh --check: ${#bad[@]} of ${#files[@]} files are not formatted (run bash scripts/format.sh)" >&2
  exit 1
fi
echo "format.sh --check: ${#files[@]} files formatted"
