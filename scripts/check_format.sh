#!/usr/bin/env bash
# Checks that every C/C++ source git tracks is formatted as .clang-format says
# (generated tokenizer/unicode_data_*.cpp and third-party folders excepted).
# Prints the files that clang-format would change and exits 1 if there are any;
# --stat also prints how many lines it would change in each, and the totals.
# Usage: scripts/check_format.sh [--stat]   (CLANG_FORMAT overrides clang-format-14)
set -euo pipefail
cd "$(dirname "$0")/.."
cf="${CLANG_FORMAT:-clang-format-14}"
command -v "$cf" >/dev/null || { echo "missing $cf (apt-get install clang-format-14)" >&2; exit 2; }
stat=0; [ "${1:-}" = "--stat" ] && stat=1

mapfile -t files < <(git ls-files '*.c' '*.cc' '*.cpp' '*.h' '*.hpp' |
                     grep -v -E '^tokenizer/unicode_data_[^/]*\.cpp$|(^|/)(third_party|vendor|external)/')
bad=0; lines=0
for f in "${files[@]}"; do
  if ! "$cf" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
    bad=$((bad + 1))
    if [ $stat = 1 ]; then
      n=$("$cf" --style=file "$f" | diff "$f" - | grep -c '^[<>]' || true)
      lines=$((lines + n))
      echo "$f ($n lines)"
    else
      echo "$f"
    fi
  fi
done
if [ $bad -gt 0 ]; then
  msg="check_format: $bad of ${#files[@]} files need clang-format ($cf -i FILE)"
  [ $stat = 1 ] && msg="$msg; $lines changed lines (diff lines: removed + added)"
  echo "$msg" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
