#!/usr/bin/env python3
"""Per-token decode time with and without a JSON schema: llama-server vs opal serve, one run.

Both servers get the same GGUF, one thread, one slot, and the same requests:
POST /completion {"prompt": "hi", "n_predict": N, "temperature": 0, "ignore_eos": true}, REPS
times without and REPS times with "json_schema" = bench/grammar.cpp's 5-property schema. Prints
the fastest timings.predicted_per_token_ms of each and the difference (the grammar's cost per
token). Run bench_grammar in the same session for Opal's mask alone (docs/PERF.md, issue 19).

  python3 scripts/grammar_vs_llamacpp.py --opal build/release/opal --model /tmp/qwen3-0.6b-q4_0.gguf
"""
import argparse
import json
import subprocess
import time
import urllib.request

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer"},
        "email": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
        "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                    "required": ["city", "zip"]},
    },
    "required": ["name", "age", "email", "tags", "address"],
    "additionalProperties": False,
}


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=900))


def wait_healthy(port, proc):
    for _ in range(1200):
        if proc.poll() is not None:
            raise SystemExit(f"the server on port {port} exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return
        except Exception:
            time.sleep(0.5)
    raise SystemExit(f"the server on port {port} did not become healthy")


def measure(cmd, port, n, reps):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(port, proc)
        res = {"plain": [], "schema": []}
        for _ in range(reps):
            for mode in ("plain", "schema"):
                body = {"prompt": "hi", "n_predict": n, "temperature": 0, "ignore_eos": True, "cache_prompt": False}
                if mode == "schema":
                    body["json_schema"] = SCHEMA
                t = post(port, body)["timings"]
                res[mode].append((t["predicted_n"], t["predicted_per_token_ms"]))
        return res
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--opal", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--llama-server", default="../shared/llamacpp/bin/llama-server")
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    runs = {
        "llama.cpp": ([a.llama_server, "-m", a.model, "--port", "8391", "-t", "1", "-c", "256", "-np", "1",
                       "--no-warmup"], 8391),
        "opal": ([a.opal, "serve", "-m", a.model, "--port", "8392", "-t", "1", "-c", "256", "--np", "1"], 8392),
    }
    for name, (cmd, port) in runs.items():
        r = measure(cmd, port, a.n, a.reps)
        plain = min(x[1] for x in r["plain"])
        schema = min(x[1] for x in r["schema"])
        print(f"{name}: no schema {plain:.2f} ms/token, schema {schema:.2f} ms/token, grammar cost "
              f"{schema - plain:.2f} ms/token (tokens {[x[0] for x in r['plain'] + r['schema']]})")


if __name__ == "__main__":
    main()
