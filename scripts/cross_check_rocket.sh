#!/usr/bin/env bash
# Compiles backends/rocket (the drm_accel driver with the real uAPI, the
# builder, the emulator, replay) for aarch64 Linux with Debian's cross
# compiler, to object files in a temporary folder. Nothing is linked or run.
# Needs: apt-get install g++-aarch64-linux-gnu (plus the usual libfmt-dev and
# nlohmann-json3-dev, whose headers are architecture-independent).
# Usage: scripts/cross_check_rocket.sh [--syntax-only]
set -euo pipefail
cd "$(dirname "$0")/.."

CXX=${CXX_AARCH64:-aarch64-linux-gnu-g++}
if ! command -v "$CXX" >/dev/null; then
  echo "cross_check_rocket: $CXX not found (apt-get install g++-aarch64-linux-gnu)" >&2
  exit 2
fi
mode=(-c)
[ "${1:-}" = "--syntax-only" ] && mode=(-fsyntax-only)

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The target's own libc headers come first; /usr/include is searched last only
# for the header-only libraries (fmt, nlohmann-json).
flags=(-std=c++20 -O1 -Wall -Wextra -Wno-unused-parameter -Werror=return-type
       -I. -Iinclude -idirafter /usr/include -DFMT_HEADER_ONLY)
status=0
while IFS= read -r src; do
  obj="$out/$(echo "$src" | tr '/' '_').o"
  if ! "$CXX" "${flags[@]}" "${mode[@]}" "$src" -o "$obj"; then
    echo "cross_check_rocket: FAILED $src" >&2
    status=1
  fi
done < <(find backends/rocket -name '*.cpp' | sort)
[ $status -eq 0 ] && echo "cross_check_rocket: backends/rocket compiles for aarch64 ($CXX)"
exit $status
