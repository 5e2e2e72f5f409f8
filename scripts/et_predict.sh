#!/usr/bin/env bash
# Predicted ET-SoC-1 decode and prompt speed of the `opal synth` presets
# (docs/backends/et.md "Predicted performance"). A whole preset is too slow to
# emulate (sw-sysemu runs ~15 M instructions/s), so by default (MODE=shapes)
# each preset is synthesized whole and run with OPAL_ET_PREDICT=shapes
# (EtOptions::predict_by_shape): every distinct node shape is emulated once,
# op by op, with the coherence checker off (instruction counts do not depend
# on it); every later node of that shape runs on the CPU and is charged the
# emulated one's card-model time; launches and fused barriers are charged as
# the fused run would have them. One layer's shapes plus the output matmul are
# emulated, whatever the layer count. The bandwidth roofline is every node's
# bytes / bandwidth, summed over the whole model.
# MODE=layers is the older way: synthesize each preset with one and with two
# layers, emulate both fully (fused, checker on) and scale
#   T(L layers) = T(1) + (L - 1) * (T(2) - T(1)).
# Usage:
#   scripts/et_predict.sh [OPAL] [PRESETS...]   (default: smollm2-135m qwen3-0.6b llama32-1b)
# Environment: TYPES (default "q8_0 q4_0"), P (prompt tokens, default 8), MODE (shapes | layers),
# WORK (scratch dir for the synthesized files and the bench output).
set -euo pipefail
OPAL=${1:-build/release/opal}
shift || true
PRESETS=${*:-smollm2-135m qwen3-0.6b llama32-1b}
TYPES=${TYPES:-q8_0 q4_0}
P=${P:-8}
MODE=${MODE:-shapes}
WORK=${WORK:-$(mktemp -d)}
declare -A LAYERS=([smollm2-135m]=30 [qwen3-0.6b]=28 [llama32-1b]=16)
echo "mode: $MODE; commit $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown); bench outputs in $WORK"
echo "| preset | type | test | predicted ms | predicted t/s | roofline t/s | emulated wall s |"
echo "| --- | --- | --- | ---: | ---: | ---: | ---: |"

# The ET prediction table of `opal bench`: | model | threads | test | nodes | predicted ms | t/s | roofline t/s |
parse() {
  python3 - "$@" <<'PY'
import sys
mode, L, preset, typ, wall = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def load(path):
    out = {}
    for line in open(path):
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) == 7 and (c[2].startswith("pp") or c[2].startswith("tg")):
            try:
                ms, roof = float(c[4]), float(c[6])
            except ValueError:
                continue
            n = int(c[2][2:])
            out[c[2]] = (ms / 1e3, n / roof, n)
    return out
rows = {}
if mode == "shapes":
    rows = load(sys.argv[6])
else:
    a, b = load(sys.argv[6]), load(sys.argv[7])
    for test in a:
        rows[test] = (a[test][0] + (L - 1) * (b[test][0] - a[test][0]),
                      a[test][1] + (L - 1) * (b[test][1] - a[test][1]), a[test][2])
if not rows:
    sys.exit(f"no ET prediction rows in the bench output of {preset} {typ}")
for test, (t, rf, n) in rows.items():
    print(f"| {preset} | {typ} | {test} | {t*1e3:.2f} | {n/t:.1f} | {n/rf:.1f} | {wall} |")
PY
}

bench() {  # FILE OUT [env...]: one bench run, its wall seconds into OUT.wall
  local f=$1 out=$2
  shift 2
  local s
  s=$(date +%s)
  env "$@" "$OPAL" bench --backend et -m "$f" -p "$P" -n 1 -r 1 --no-warmup --no-bw > "$out"
  echo $(($(date +%s) - s)) > "$out.wall"
}

for preset in $PRESETS; do
  L=${LAYERS[$preset]:?unknown preset $preset}
  for type in $TYPES; do
    if [ "$MODE" = shapes ]; then
      f=$WORK/$preset-$type.gguf
      [ -f "$f" ] || "$OPAL" synth --preset "$preset" --type "$type" -o "$f" -t 1 > /dev/null
      bench "$f" "$WORK/$preset-$type.md" OPAL_ET_PREDICT=shapes
      parse shapes "$L" "$preset" "$type" "$(cat "$WORK/$preset-$type.md.wall")" "$WORK/$preset-$type.md"
    else
      for l in 1 2; do
        f=$WORK/$preset-$type-l$l.gguf
        [ -f "$f" ] || "$OPAL" synth --preset "$preset" --type "$type" --layers $l -o "$f" -t 1 > /dev/null
        bench "$f" "$WORK/$preset-$type-l$l.md"
      done
      parse layers "$L" "$preset" "$type" "$(cat "$WORK/$preset-$type-l1.md.wall")+$(cat "$WORK/$preset-$type-l2.md.wall")" \
        "$WORK/$preset-$type-l1.md" "$WORK/$preset-$type-l2.md"
    fi
  done
done
