#!/usr/bin/env bash
# The decode table of issue 18 items 1 and 2: per model file and thread count,
# `opal bench -p 0 -n N -r 2 -t T` beside llama-bench's tg N, under
# `--isa avx2` against llama.cpp's haswell build (/work/llh) and natively
# against its native build. Prints a Markdown table: opal t/s, its `% bw`
# (against the read bandwidth that run measured), llama.cpp t/s, the ratio,
# the load average before the pair and the time (UTC). The two runs of a row
# go back to back, so the ratio is of one minute on a shared host.
# Usage: scripts/decode_table.sh [OPAL_BINARY] [MODEL ...]
#   MODEL: a name under $MODELS_DIR (default /work/models/cpu18) without .gguf;
#   default the nine files {smollm2,qwen3,llama32-1b}-{q8_0,q4_0,q4_k_m}.
# Environment: TH (thread counts, default "1 2"), ISAS (default "avx2 native"),
#   N (tokens, default 64), LT (seconds llama-bench may take a row, default
#   150: its two-thread runs collapse on a busy host), LLAMA_NATIVE, LLAMA_AVX2_DIR.
set -uo pipefail
OPAL=${1:-build/release/opal}
shift || true
MODELS_DIR=${MODELS_DIR:-/work/models/cpu18}
LLAMA_NATIVE=${LLAMA_NATIVE:-/work/shared/llamacpp/bin/llama-bench}
LLAMA_AVX2_DIR=${LLAMA_AVX2_DIR:-/work/llh}
models=${*:-"smollm2-q8_0 smollm2-q4_0 smollm2-q4_k_m qwen3-q8_0 qwen3-q4_0 qwen3-q4_k_m
  llama32-1b-q8_0 llama32-1b-q4_0 llama32-1b-q4_k_m"}
TH=${TH:-"1 2"}
ISAS=${ISAS:-"avx2 native"}
N=${N:-64}

echo "| file | isa | T | opal t/s | % bw | llama.cpp t/s | ratio | load | UTC |"
echo "|---|---|---:|---:|---:|---:|---:|---|---|"
for m in $models; do
  f=$MODELS_DIR/$m.gguf
  for isa in $ISAS; do
    for t in $TH; do
      if [ "$isa" = avx2 ]; then
        opal_isa=(--isa avx2)
        llama=(env "LD_LIBRARY_PATH=$LLAMA_AVX2_DIR" "$LLAMA_AVX2_DIR/llama-bench")
      else
        opal_isa=()
        llama=("$LLAMA_NATIVE")
      fi
      load=$(cut -d' ' -f1 /proc/loadavg)
      # opal's row: ... | GB/s | % bw | t/s |; llama-bench's: ... | test | t/s |
      o=$("$OPAL" bench -m "$f" -p 0 -n "$N" -r 2 -t "$t" "${opal_isa[@]}" 2>/dev/null | grep "tg$N")
      ots="" obw=""
      [ -n "$o" ] && ots=$(awk -F'|' '{split($(NF-1), a, " "); print a[1]}' <<<"$o")
      [ -n "$o" ] && obw=$(awk -F'|' '{gsub(/ /, "", $(NF-2)); print $(NF-2)}' <<<"$o")
      l=$(timeout "${LT:-150}" "${llama[@]}" -m "$f" -p 0 -n "$N" -r 2 -t "$t" 2>/dev/null | grep "tg$N")
      lts=""
      [ -n "$l" ] && lts=$(awk -F'|' '{split($(NF-1), a, " "); print a[1]}' <<<"$l")
      ratio=$(awk -v a="$ots" -v b="$lts" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
      echo "| $m | $isa | $t | ${ots:--} | ${obw:--} | ${lts:-timeout} | $ratio | $load | $(date -u +%H:%M) |"
    done
  done
done
