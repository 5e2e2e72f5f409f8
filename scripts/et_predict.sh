#!/usr/bin/env bash
# Predicted ET-SoC-1 decode and prompt speed of the `opal synth` presets
# (docs/backends/et.md "Predicted performance"). A whole preset is too slow to
# emulate (sw-sysemu runs ~15 M instructions/s), so each preset is synthesized
# with one and with two layers (same shapes, same vocabulary), both are run on
# the emulator with `opal bench --backend et` (fused dispatch, coherence
# checker on), and the card model's predicted time scales as
#   T(L layers) = T(1) + (L - 1) * (T(2) - T(1))
# (the second layer's increment is one representative layer). The bandwidth
# roofline scales the same way. Usage:
#   scripts/et_predict.sh [OPAL] [PRESETS...]   (default: smollm2-135m qwen3-0.6b llama32-1b)
# Environment: TYPES (default "q8_0 q4_0"), P (prompt tokens emulated, default 8), WORK (scratch dir).
set -euo pipefail
OPAL=${1:-build/release/opal}
shift || true
PRESETS=${*:-smollm2-135m qwen3-0.6b llama32-1b}
TYPES=${TYPES:-q8_0 q4_0}
P=${P:-8}
WORK=${WORK:-$(mktemp -d)}
declare -A LAYERS=([smollm2-135m]=30 [qwen3-0.6b]=28 [llama32-1b]=16)
echo "| preset | type | test | predicted ms | predicted t/s | roofline t/s | emulated 1+2 layers (wall s) |"
echo "| --- | --- | --- | ---: | ---: | ---: | ---: |"
for preset in $PRESETS; do
  L=${LAYERS[$preset]:?unknown preset $preset}
  for type in $TYPES; do
    for l in 1 2; do
      f=$WORK/$preset-$type-l$l.gguf
      [ -f "$f" ] || "$OPAL" synth --preset "$preset" --type "$type" --layers $l -o "$f" -t 1 >/dev/null
      s=$(date +%s)
      "$OPAL" bench --backend et -m "$f" -p "$P" -n 1 -r 1 --no-warmup --no-bw > "$WORK/$preset-$type-l$l.md"
      echo $(( $(date +%s) - s )) > "$WORK/$preset-$type-l$l.wall"
    done
    python3 - "$WORK/$preset-$type" "$L" "$preset" "$type" <<'PY'
import json, sys
base, L, preset, typ = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def load(l):
    # the ET prediction table of `opal bench`: | model | threads | test | nodes | predicted ms | t/s | roofline t/s |
    out = {}
    for line in open(f"{base}-l{l}.md"):
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) == 7 and (c[2].startswith("pp") or c[2].startswith("tg")):
            try:
                ms, roof = float(c[4]), float(c[6])
            except ValueError:
                continue
            n = int(c[2][2:])
            out[c[2]] = (ms / 1e3, n / roof, n)
    return out
a, b = load(1), load(2)
wall = open(f"{base}-l1.wall").read().strip() + "+" + open(f"{base}-l2.wall").read().strip()
for test in a:
    t = a[test][0] + (L - 1) * (b[test][0] - a[test][0])
    rf = a[test][1] + (L - 1) * (b[test][1] - a[test][1])
    n = a[test][2]
    print(f"| {preset} | {typ} | {test} | {t*1e3:.2f} | {n/t:.1f} | {n/rf:.1f} | {wall} |")
PY
  done
done
