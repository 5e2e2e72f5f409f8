#!/usr/bin/env bash
# The ET backend's full golden check (docs/backends/et.md): every supported
# golden model with --backend et on the in-process emulator (coherence checker
# on), whole prompt in one batch and every teacher-forced greedy step, against
# llama.cpp's logits; prints max|diff|/std, cosine and top-1 per file and
# phase. Emulator-heavy (about a minute of CPU per file): not part of ctest's
# default run, which has the short form (EtGoldenCi).
#   scripts/et_golden.sh [BUILD_DIR] [GTEST_FILTER_SUFFIX]
# e.g. scripts/et_golden.sh build/release 'tiny_llama_q8_0'
set -euo pipefail
build=${1:-build/release}
only=${2:-*}
OPAL_ET_GOLDEN_FULL=1 exec "$build/test_et" --gtest_filter="Et/EtGoldenFull.*/$only"
