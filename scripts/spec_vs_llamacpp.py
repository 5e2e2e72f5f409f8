#!/usr/bin/env python3
"""Speculative decoding (n-gram, ngram-simple) in llama-server and opal serve, side by side (docs/PERF.md, #21).

Usage: scripts/spec_vs_llamacpp.py OPAL_BINARY MODEL.gguf PROMPT_FILE [LLAMA_SERVER [KEY_SIZE]]

Each server runs alone with -t 1 -c 512 -np 1, plain and with --spec-type ngram-simple (key KEY_SIZE tokens,
default 3; drafts of 4); three greedy /completion requests of 64 tokens (end of generation ignored, no prompt
cache), the first a warm-up. Prints the servers' own predicted_per_second, the draft tokens and acceptance of
the last request, and whether the text with speculation equals the text without.

Why llama-server may draft nothing: its ngram-simple takes the most recent earlier occurrence of the key (the
last KEY_SIZE tokens) and drafts only when at least KEY_SIZE tokens follow that occurrence (it copies no
further than the end of the text and does not look further back). A random-weight `opal synth` model soon
repeats one token; there the most recent occurrence of the key is one token back, so llama-server never
drafts, while Opal's ngram-simple copies on over its own draft (docs/speculative.md). Compare the drafters on
a model whose text repeats with a period of at least KEY_SIZE tokens (stories260K on the repetitive prompt),
or with KEY_SIZE 1 (llama-server then drafts one token per step on a one-token loop).
"""
import json, subprocess, sys, time, urllib.request
if len(sys.argv) < 4:
    raise SystemExit(__doc__)
O, M = sys.argv[1], sys.argv[2]
prompt = open(sys.argv[3]).read()
L = sys.argv[4] if len(sys.argv) > 4 else "../shared/llamacpp/bin/llama-server"
N = sys.argv[5] if len(sys.argv) > 5 else "3"
def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=300))
def wait(port):
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2); return
        except Exception: time.sleep(0.2)
    raise SystemExit("server did not come up")
def run(name, cmd, port):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait(port)
        res = []
        for r in range(3):
            j = post(port, {"prompt": prompt, "n_predict": 64, "temperature": 0, "ignore_eos": True, "cache_prompt": False})
            t = j["timings"]
            if r > 0: res.append((t["predicted_per_second"], t.get("draft_n", 0), t.get("draft_n_accepted", 0), j["content"]))
        tps = sum(x[0] for x in res) / len(res)
        print(f"{name}: {tps:.1f} t/s (runs {[round(x[0],1) for x in res]}), draft_n {res[-1][1]}, accepted {res[-1][2]}", flush=True)
        return res[-1]
    finally:
        p.terminate(); p.wait()
base_l = [L, "-m", M, "-t", "1", "-c", "512", "-np", "1", "--port", "18093", "--no-webui"]
base_o = [O, "serve", "-m", M, "-t", "1", "-c", "512", "-np", "1", "--port", "18094"]
a = run("llama-server plain", base_l, 18093)
b = run(f"llama-server ngram-simple n={N} m=4", base_l + ["--spec-type", "ngram-simple", "--spec-draft-n-max", "4", "--spec-ngram-simple-size-n", N, "--spec-ngram-simple-size-m", "4"], 18093)
c = run("opal serve plain", base_o, 18094)
d = run(f"opal serve ngram-simple n={N} draft-max 4", base_o + ["--spec-type", "ngram-simple", "--draft-max", "4", "--spec-ngram-size-n", N], 18094)
print("llama same:", a[3] == b[3], " opal same:", c[3] == d[3], " llama vs opal same:", a[3] == c[3])
if b[1] == 0:
    print(f"llama-server drafted nothing: its ngram-simple needs {N} tokens after the key's most recent occurrence "
          "(see the docstring); a text that loops on fewer tokens gets no draft there")
