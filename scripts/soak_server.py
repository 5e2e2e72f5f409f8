#!/usr/bin/env python3
"""Soak test for `opal serve` (issue #20): N streaming clients for M minutes.

Each client loops until the time is up, picking per request:
  ~80% a streamed chat completion (prompt lengths mixed from a few tokens to
       most of a slot; max_tokens 8..128), checked for a well-formed SSE stream
       that ends with a finish_reason and `data: [DONE]`;
  ~10% a stream it drops after the first chunks (a client that disconnects);
  ~10% a bad request (malformed JSON, wrong types, numbers out of range, too
       long a prompt...) that must get a 4xx JSON error naming the field.
Anything else counts as an error (goal: 0). Every 10 s it prints the server's
RSS (from /proc, so the server must run on this machine), requests so far,
errors and TTFT percentiles; at the end a summary with p50/p99 TTFT (request
sent -> first content chunk, queueing included) and the RSS samples.

  # start a server itself (stories260K, 8 slots of 2048 tokens):
  python3 scripts/soak_server.py --opal build/release/opal --minutes 10
  # or against a running one (give its pid for RSS):
  python3 scripts/soak_server.py --url http://127.0.0.1:8080 --pid 1234

Standard library only. Exit status 0 when there were no errors.
"""
import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

WORDS = ("once upon a time there was a little girl named lily she liked to play in the park with her dog "
         "one day the sun was shining and the birds were singing").split()


def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return -1.0


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = self.bad_ok = self.dropped = 0
        self.errors = []
        self.ttft = []

    def error(self, what):
        with self.lock:
            self.errors.append(what)

    def add(self, field, ttft=None):
        with self.lock:
            setattr(self, field, getattr(self, field) + 1)
            if ttft is not None:
                self.ttft.append(ttft)


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100.0 * len(v)))]


def prompt_text(rng, n_words):
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


BAD_REQUESTS = [
    ("/v1/chat/completions", b'{"messages": [', None),
    ("/v1/chat/completions", b'{"messages":[{"role":"user","content":"Hi"}],"max_tokens":1e400}', "max_tokens"),
    ("/v1/chat/completions", json.dumps({"messages": "Hi"}).encode(), "messages"),
    ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "Hi"}],
                                         "response_format": "json"}).encode(), "response_format"),
    ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "Hi"}],
                                         "tools": {}}).encode(), "tools"),
    ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "Hi"}],
                                         "top_p": 7}).encode(), "top_p"),
    ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "Hi"}],
                                         "stop": 5}).encode(), "stop"),
    ("/v1/completions", json.dumps({"prompt": "Hi", "max_tokens": -5}).encode(), "max_tokens"),
    ("/completion", json.dumps({"prompt": "Hi", "n_probs": 1000}).encode(), "n_probs"),
    ("/v1/completions", json.dumps({"prompt": "the dog " * 20000}).encode(), "prompt"),
]


class Client(threading.Thread):
    def __init__(self, idx, args, stats, deadline):
        super().__init__(daemon=True)
        self.rng = random.Random(args.seed * 1000 + idx)
        self.args, self.stats, self.deadline = args, stats, deadline
        u = urllib.parse.urlparse(args.url)
        self.host, self.port = u.hostname, u.port or 80

    def conn(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=self.args.timeout)

    def run(self):
        while time.time() < self.deadline:
            r = self.rng.random()
            try:
                if r < 0.10:
                    self.bad_request()
                elif r < 0.20:
                    self.stream(drop_after=self.rng.randint(1, 3))
                else:
                    self.stream(drop_after=None)
            except Exception as e:  # connection refused, timeout, reset...
                self.stats.error(f"{type(e).__name__}: {e}")

    def bad_request(self):
        path, body, param = self.rng.choice(BAD_REQUESTS)
        c = self.conn()
        c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        data = resp.read()
        c.close()
        if not 400 <= resp.status < 500:
            return self.stats.error(f"bad request {path} {body[:60]!r}: status {resp.status}")
        try:
            err = json.loads(data)["error"]
        except (ValueError, KeyError):
            return self.stats.error(f"bad request {path}: not a JSON error: {data[:100]!r}")
        if param is not None and err.get("param") != param:
            return self.stats.error(f"bad request {path}: param {err.get('param')!r}, expected {param!r}")
        self.stats.add("bad_ok")

    def stream(self, drop_after):
        # prompt lengths: mostly short, some medium, a few long (up to ~1,200 tokens)
        k = self.rng.random()
        n_words = self.rng.randint(1, 20) if k < 0.6 else self.rng.randint(50, 300) if k < 0.9 else \
            self.rng.randint(600, 1000)
        body = {"messages": [{"role": "user", "content": prompt_text(self.rng, n_words)}],
                "max_tokens": self.rng.randint(8, 128), "stream": True,
                "stream_options": {"include_usage": True}, "temperature": 0.8}
        c = self.conn()
        t0 = time.time()
        c.request("POST", "/v1/chat/completions", body=json.dumps(body),
                  headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        if resp.status != 200:
            data = resp.read()
            c.close()
            return self.stats.error(f"stream: status {resp.status}: {data[:200]!r}")
        ttft, finish, done, n_events, usage = None, None, False, 0, None
        buf = b""
        while True:
            chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1024)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                if not ev.startswith(b"data: "):
                    c.close()
                    return self.stats.error(f"stream: bad event {ev[:80]!r}")
                payload = ev[6:]
                if payload == b"[DONE]":
                    done = True
                    continue
                j = json.loads(payload)
                if "error" in j:
                    c.close()
                    return self.stats.error(f"stream: error event {j['error']}")
                n_events += 1
                ch = j.get("choices") or []
                if ch and ch[0].get("delta", {}).get("content") and ttft is None:
                    ttft = time.time() - t0
                if ch and ch[0].get("finish_reason"):
                    finish = ch[0]["finish_reason"]
                if j.get("usage"):
                    usage = j["usage"]
                if drop_after is not None and n_events >= drop_after:
                    c.sock.shutdown(socket.SHUT_RDWR)  # the client goes away mid-stream
                    c.close()
                    return self.stats.add("dropped")
        c.close()
        if drop_after is not None:  # ended before we dropped it: fine too
            return self.stats.add("dropped")
        if not done or finish not in ("stop", "length") or usage is None:
            return self.stats.error(f"stream: done={done} finish={finish} usage={usage is not None}")
        self.stats.add("ok", ttft if ttft is not None else time.time() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (default: start one with --opal)")
    ap.add_argument("--pid", type=int, help="the running server's pid (for RSS)")
    ap.add_argument("--opal", default="build/release/opal", help="opal binary to start when --url is not given")
    ap.add_argument("--model", default=os.path.join(os.environ.get("OPAL_SHARED_DIR", "../shared"),
                                                    "models/stories260K.gguf"))
    ap.add_argument("--serve-args", default="-np 8 -c 16384 -t 2 --metrics")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--timeout", type=float, default=120, help="per-request socket timeout (s)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    server = None
    if not args.url:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        cmd = [args.opal, "serve", "-m", args.model, "--port", str(port)] + args.serve_args.split()
        print("soak: starting", " ".join(cmd), flush=True)
        server = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        for line in server.stderr:
            if "serve: ready" in line:
                break
            if server.poll() is not None:
                sys.exit("soak: the server did not start")
        threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
        args.url, args.pid = f"http://127.0.0.1:{port}", server.pid

    stats = Stats()
    start = time.time()
    deadline = start + args.minutes * 60
    clients = [Client(i, args, stats, deadline) for i in range(args.clients)]
    for c in clients:
        c.start()
    samples = []
    while any(c.is_alive() for c in clients):
        time.sleep(min(10, max(0.5, deadline + args.timeout - time.time())) if time.time() < deadline else 1)
        t = time.time() - start
        r = rss_mb(args.pid) if args.pid else -1
        with stats.lock:
            line = (f"soak: t={t:5.0f}s rss={r:7.1f} MB ok={stats.ok} dropped={stats.dropped} "
                    f"bad_ok={stats.bad_ok} errors={len(stats.errors)} "
                    f"ttft_p50={pct(stats.ttft, 50):.3f}s p99={pct(stats.ttft, 99):.3f}s")
        samples.append(round(r, 1))
        print(line, flush=True)
        if time.time() > deadline + args.timeout + 30:
            stats.error("clients still running long after the deadline")
            break
    summary = {"clients": args.clients, "minutes": args.minutes, "ok": stats.ok, "dropped": stats.dropped,
               "bad_requests_answered": stats.bad_ok, "errors": len(stats.errors),
               "ttft_p50_s": round(pct(stats.ttft, 50), 4), "ttft_p99_s": round(pct(stats.ttft, 99), 4),
               "rss_mb_samples": samples}
    for e in stats.errors[:20]:
        print("soak: error:", e)
    print("soak: summary", json.dumps(summary), flush=True)
    if server:
        server.terminate()
        server.wait(60)
    sys.exit(1 if stats.errors else 0)


if __name__ == "__main__":
    main()
