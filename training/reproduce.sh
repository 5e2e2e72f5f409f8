#!/bin/sh
# Rebuilds models/opal-kjv.gguf from scratch (see README.md). One CPU thread, niced.
set -e
cd "$(dirname "$0")"
PY=/usr/bin/python3   # Debian's python, which has python3-torch
nice -n 10 $PY train_tokenizer.py --vocab-size 2048
nice -n 10 $PY train.py --seed 1611 --steps 700
nice -n 10 $PY export_gguf.py --out ../models/opal-kjv.gguf
nice -n 10 $PY check_gguf.py --gguf ../models/opal-kjv.gguf
nice -n 10 $PY eval.py
