#!/usr/bin/env bash
# Regenerates docs/ops.md (the op x dtype x backend support matrix) from
# `opal ops -o md`. With --check, fails if docs/ops.md differs from what the
# binary prints (CI runs this).
#   scripts/gen_ops_md.sh [--check] [path/to/opal]
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [[ "${1:-}" == "--check" ]]; then check=1; shift; fi
opal="${1:-build/release/opal}"
[[ -x "$opal" ]] || { echo "gen_ops_md: no opal binary at '$opal' (build it first)" >&2; exit 2; }
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
"$opal" ops -o md > "$tmp"
if [[ $check == 1 ]]; then
  if ! diff -u docs/ops.md "$tmp"; then
    echo "docs/ops.md is stale: run scripts/gen_ops_md.sh and commit it" >&2
    exit 1
  fi
  echo "docs/ops.md is current"
else
  cp "$tmp" docs/ops.md
  echo "wrote docs/ops.md"
fi
