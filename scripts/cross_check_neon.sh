#!/usr/bin/env bash
# Builds the NEON kernels and their check program (tests/kernels_arm) with
# Debian's aarch64 cross compiler and runs it under qemu-aarch64, which
# emulates a CPU with the dot-product extension. Only the kernel layer is
# built (core/quant, core/dtype, backends/cpu/kernels): fmt is used header-only.
# Usage: scripts/cross_check_neon.sh [build-dir]   (default build/neon)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-build/neon}"
CXX="${CXX_AARCH64:-aarch64-linux-gnu-g++}"
command -v "$CXX" >/dev/null || { echo "missing $CXX (apt-get install g++-aarch64-linux-gnu)" >&2; exit 1; }
command -v qemu-aarch64 >/dev/null || { echo "missing qemu-aarch64 (apt-get install qemu-user)" >&2; exit 1; }
mkdir -p "$out/inc" "$out/obj"
ln -sfn /usr/include/fmt "$out/inc/fmt"  # header-only fmt; no aarch64 libfmt needed
flags=(-std=c++20 -O2 -Wall -Wextra -Wno-unused-parameter -I. -I"$out/inc" -DFMT_HEADER_ONLY)
# Committed sources only when in a git checkout (others' files in progress stay out).
list() { if git rev-parse --git-dir >/dev/null 2>&1; then git ls-files "$@"; else ls "$@"; fi; }
srcs=(core/dtype.cpp $(list 'core/quant/*.cpp' | grep -v recipe.cpp) backends/cpu/kernels/isa.cpp backends/cpu/kernels/matmul_dispatch.cpp
      $(list 'backends/cpu/kernels/ref/*.cpp' 'backends/cpu/kernels/*/table.cpp' 'backends/cpu/kernels/arm_neon/*_neon.cpp')
      tests/kernels_arm/check_kernels.cpp)
objs=()
pids=()
for s in "${srcs[@]}"; do
  o="$out/obj/$(echo "$s" | tr / _).o"
  extra=()
  case "$s" in *_neon.cpp) extra=(-march=armv8.2-a+dotprod+fp16) ;; esac
  case "$s" in core/quant/*) extra+=(-ffp-contract=off) ;; esac  # as CMakeLists.txt: reference rounding
  "$CXX" "${flags[@]}" "${extra[@]}" -c "$s" -o "$o" &
  pids+=($!)
  objs+=("$o")
  if (( ${#pids[@]} >= 2 )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done
"$CXX" -static -o "$out/check_kernels" "${objs[@]}" -lpthread
qemu-aarch64 -L /usr/aarch64-linux-gnu "$out/check_kernels"
