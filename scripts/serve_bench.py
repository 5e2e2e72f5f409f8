#!/usr/bin/env python3
"""Throughput and TTFT of a running `opal serve` (standard library only; loopback only).

  scripts/serve_bench.py --port 8080 --clients 1,2,4,8 --requests 4 --tokens 128
  scripts/serve_bench.py --port 8080 --ttft

Throughput: N client threads each send R non-streaming /completion requests
(ignore_eos, n_predict = T, distinct prompts); prints aggregate generated tokens / wall second.
TTFT: a long prompt streamed once with cache_prompt=false and then again with the
prefix cached; prints the time to the first streamed token of each (median of 5).
"""
import argparse
import http.client
import json
import statistics
import threading
import time


def post(port, path, body, stream=False):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return conn, conn.getresponse()


def throughput(port, clients, requests, tokens):
    total = [0]
    lock = threading.Lock()

    def worker(c):
        for r in range(requests):
            body = {"prompt": f"Once upon a time, child {c} found toy {r}", "n_predict": tokens,
                    "ignore_eos": True, "temperature": 0.8, "seed": c * 100 + r, "cache_prompt": False}
            conn, res = post(port, "/completion", body)
            j = json.loads(res.read())
            conn.close()
            with lock:
                total[0] += j["tokens_predicted"]

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return total[0], wall


def ttft(port, prompt, cache):
    body = {"prompt": prompt, "n_predict": 4, "stream": True, "cache_prompt": cache, "temperature": 0}
    t0 = time.perf_counter()
    conn, res = post(port, "/completion", body, stream=True)
    first = None
    while True:
        line = res.readline()
        if not line:
            break
        if line.startswith(b"data: ") and first is None:
            first = time.perf_counter() - t0
    conn.close()
    return first


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--ttft", action="store_true")
    ap.add_argument("--prompt-words", type=int, default=150)
    a = ap.parse_args()
    if a.ttft:
        prompt = " ".join(["the little dog ran to the big park and played"] * (a.prompt_words // 10))
        cold = [ttft(a.port, prompt + f" {i}", False) for i in range(5)]
        ttft(a.port, prompt, True)  # fill a slot's cache
        warm = [ttft(a.port, prompt, True) for _ in range(5)]
        print(f"ttft_ms cold(no reuse) median={1e3 * statistics.median(cold):.2f} "
              f"warm(prefix reused) median={1e3 * statistics.median(warm):.2f}")
        return
    for n in [int(x) for x in a.clients.split(",")]:
        toks, wall = throughput(a.port, n, a.requests, a.tokens)
        print(f"clients={n} tokens={toks} wall_s={wall:.2f} aggregate_tok_s={toks / wall:.0f}")


if __name__ == "__main__":
    main()
