#!/usr/bin/env python3
"""Any OpenAI-compatible servers under the same client load, side by side (issue #18 item 5).

Each server is started from a command line (with {port} and {model} in it), warmed up,
then driven at each concurrency level in turn: C clients, each looping streamed
/v1/chat/completions requests for --seconds. Prompts mix lengths (a few words, a
paragraph, a page) and a share of them (--shared-prefix) start with one common long
system prompt, as a chat product's requests do. Per level and server it reports:

  agg tok/s   generated tokens (content chunks) / wall time of the level
  req/s       completed requests / wall time
  TTFT p50/p99  request sent -> first content chunk (queueing included), of the streams that had one
  TTFT p99 all  the same over every request sent, a stream cut before its first chunk counted at its wait
                until the cut (a lower bound): a server that starts few requests in the window is not
                rewarded for the ones it never answered (`unanswered`: how many)
  ITL p50/p99   gaps between successive content chunks of one stream
  RSS         the server's peak resident set (VmHWM) since it started, read at the end of the level, MB
  errors      failed or malformed streams (the figures are only meaningful at 0)
  cut         streams still running --drain seconds after the level's end, cut there (their tokens and
              TTFT count; a slow server is not waited for without end)
  load        the host's 1-minute load average when the level began
  steady      with --warmup S: TTFT p50 / p99 (and p99 all) again over only the requests sent S seconds or
              more into the level, i.e. after the opening burst's queue has drained: with more clients
              than slots, every client's first request arrives at once and the slots run in waves, so
              the whole level's p99 is the last answered wave's wait (docs/perf/serve.md "Stop 18,
              srv2"); the steady figures are the wait a request meets once the queue moves at the
              server's own pace. --ramp R spreads the clients' first requests over R seconds (client
              i starts at i * R / C), as a load tester's ramp-up does, instead of one burst.

and for every server after the first, its ratio to the first (agg tok/s; TTFT and ITL
p99 as first/this, so > 1 means better). Standard library only; the servers must run
on this machine (RSS from /proc).

  python3 scripts/bench_server.py --model M.gguf --clients 1,4,16,64 --seconds 30 \\
    --server 'llama=../shared/llamacpp/bin/llama-server -m {model} --port {port} -np 16 -c 32768 -t 2' \\
    --server 'opal=build/release/opal serve -m {model} --port {port} -np 16 -c 32768 -t 2'

--json FILE writes every figure; with --per-request it also holds one record per request sent (when it
was sent, its first token or its wait until the cut, its prompt, and the server's own `timings` from the
stream's last chunk where the server sends them: cache_n, prompt_n, prompt_ms), to see what sets the
latency tails (queue wait vs. prompt reading). Exit status 0 when no stream failed.
"""
import argparse
import http.client
import json
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

WORDS = ("once upon a time there was a little girl named lily she liked to play in the park with her dog "
         "one day the sun was shining and the birds were singing in the tall green trees").split()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def vm_kib(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


class Server:
    def __init__(self, name, cmd, model, log_dir):
        self.name, self.port = name, free_port()
        argv = shlex.split(cmd.replace("{port}", str(self.port)).replace("{model}", model))
        self.log_path = os.path.join(log_dir, f"bench_server_{name}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log_path}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not healthy after {timeout} s; see {self.log_path}")

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def make_prompt(rng, system_prefix, shared_prefix, info=None):
    # Word counts sized so that the longest prompt with the system prompt and the answer fits a 2048-token
    # slot (-np 16 -c 32768) even under a tokenizer of ~3.5 tokens a word (opal synth's).
    kind = rng.random()
    n = rng.randint(3, 20) if kind < 0.5 else rng.randint(30, 80) if kind < 0.85 else rng.randint(150, 250)
    user = " ".join(rng.choice(WORDS) for _ in range(n))
    messages = [{"role": "user", "content": user}]
    if rng.random() < shared_prefix:
        messages.insert(0, {"role": "system", "content": system_prefix})
    if info is not None:
        info.update(user_words=n, system=len(messages) > 1)
    return messages


class Cut(Exception):
    """The level's hard stop came while the stream was still running; carries what it had received."""

    def __init__(self, ttft, gaps, tokens, waited):
        super().__init__("cut at the hard stop")
        self.ttft, self.gaps, self.tokens, self.waited = ttft, gaps, tokens, waited


def one_request(port, messages, max_tokens, seed, timeout, stop_at=None, info=None):
    """Streams one chat completion. Returns (ttft, [inter-token gaps], tokens) or raises; Cut when the
    monotonic time passes stop_at before the stream ends. `info` (a dict), when given, gets the server's
    `timings` object of the stream's last chunk, if it sends one."""
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "stream": True, "seed": seed,
                       "temperature": 0.8, "ignore_eos": True}).encode()
    t0 = time.monotonic()
    if stop_at is not None:  # no read may outlast the hard stop (a slow server may not even send its headers)
        timeout = max(0.5, min(timeout, stop_at - t0))
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    ttft, last, gaps, tokens, finished, done = None, None, [], 0, False, False
    try:
        c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
    except socket.timeout:
        c.close()
        if stop_at is not None and time.monotonic() >= stop_at:
            raise Cut(ttft, gaps, tokens, time.monotonic() - t0)
        raise
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    while True:
        if stop_at is not None and time.monotonic() > stop_at:
            c.close()
            raise Cut(ttft, gaps, tokens, time.monotonic() - t0)
        try:
            line = r.readline()
        except socket.timeout:
            c.close()
            if stop_at is not None and time.monotonic() >= stop_at:
                raise Cut(ttft, gaps, tokens, time.monotonic() - t0)
            raise
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            done = True
            break
        ev = json.loads(data)
        if "error" in ev:
            raise RuntimeError(f"error event: {ev['error']}")
        if info is not None and isinstance(ev.get("timings"), dict):
            info["timings"] = ev["timings"]
        for ch in ev.get("choices", []):
            if ch.get("delta", {}).get("content"):
                now = time.monotonic()
                if ttft is None:
                    ttft = now - t0
                else:
                    gaps.append(now - last)
                last = now
                tokens += 1
            if ch.get("finish_reason"):
                finished = True
    c.close()
    if not (finished and done):
        raise RuntimeError("stream ended without a finish_reason and [DONE]")
    if ttft is None:
        raise RuntimeError("no content in the stream")
    return ttft, gaps, tokens


def run_level(server, clients, seconds, args, system_prefix):
    stats = {"ttft": [], "unanswered": [], "gaps": [], "tokens": 0, "requests": 0, "cut": 0, "errors": [],
             "lock": threading.Lock(), "records": []}
    level_t0 = time.monotonic()
    deadline = level_t0 + seconds
    stop_at = deadline + args.drain  # streams still running then are cut (their tokens so far count)
    load = os.getloadavg()[0]

    def client(idx):
        rng = random.Random(args.seed * 1000 + idx)
        time.sleep(args.ramp * idx / clients)
        while time.monotonic() < deadline:
            rec = {"client": idx}
            messages = make_prompt(rng, system_prefix, args.shared_prefix, rec)
            rec["t_sent"] = round(time.monotonic() - level_t0, 3)
            try:
                ttft, gaps, tokens = one_request(server.port, messages, args.max_tokens, rng.randint(0, 1 << 30),
                                                 args.timeout, stop_at, rec)
                rec.update(ttft=round(ttft, 3), tokens=tokens, cut=False)
                with stats["lock"]:
                    stats["records"].append(rec)
                    stats["ttft"].append(ttft)
                    stats["gaps"].extend(gaps)
                    stats["tokens"] += tokens
                    stats["requests"] += 1
            except Cut as cut:  # the hard stop: what arrived counts, the request is not complete
                rec.update(ttft=None if cut.ttft is None else round(cut.ttft, 3), waited=round(cut.waited, 3),
                           tokens=cut.tokens, cut=True)
                with stats["lock"]:
                    stats["records"].append(rec)
                    if cut.ttft is not None:
                        stats["ttft"].append(cut.ttft)
                    else:
                        stats["unanswered"].append(cut.waited)
                    stats["gaps"].extend(cut.gaps)
                    stats["tokens"] += cut.tokens
                    stats["cut"] += 1
            except Exception as e:  # connection errors, HTTP errors, malformed streams
                rec["error"] = f"{type(e).__name__}: {e}"
                with stats["lock"]:
                    stats["records"].append(rec)
                    stats["errors"].append(f"{type(e).__name__}: {e}")

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0  # requests in flight at the deadline run to their end
    steady = [r for r in stats["records"] if "error" not in r and r["t_sent"] >= args.warmup]
    steady_ttft = [r["ttft"] for r in steady if r["ttft"] is not None]
    steady_all = steady_ttft + [r["waited"] for r in steady if r["ttft"] is None]
    return {
        "clients": clients,
        "wall_s": round(wall, 2),
        "requests": stats["requests"],
        "tokens": stats["tokens"],
        "agg_tok_s": stats["tokens"] / wall,
        "req_s": stats["requests"] / wall,
        "ttft_p50_s": pct(stats["ttft"], 50),
        "ttft_p99_s": pct(stats["ttft"], 99),
        "ttft_all_p99_s": pct(stats["ttft"] + stats["unanswered"], 99),
        "unanswered": len(stats["unanswered"]),
        "steady_n": len(steady),
        "ttft_steady_p50_s": pct(steady_ttft, 50),
        "ttft_steady_p99_s": pct(steady_ttft, 99),
        "ttft_steady_all_p99_s": pct(steady_all, 99),
        "itl_p50_ms": pct(stats["gaps"], 50) * 1000,
        "itl_p99_ms": pct(stats["gaps"], 99) * 1000,
        "peak_rss_mb": vm_kib(server.proc.pid, "VmHWM") / 1024.0,
        "cut": stats["cut"],
        "load_avg": load,
        "errors": len(stats["errors"]),
        "first_errors": stats["errors"][:3],
        **({"requests": sorted(stats["records"], key=lambda r: r["t_sent"])} if args.per_request else {}),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", action="append", required=True, metavar="NAME=CMD",
                    help="a server command line with {port} and {model}; repeat for each server")
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", default="1,4,16,64")
    ap.add_argument("--seconds", type=float, default=30, help="load per concurrency level")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--shared-prefix", type=float, default=0.5, help="share of requests with the common system prompt")
    ap.add_argument("--timeout", type=float, default=300, help="per-request socket timeout (s)")
    ap.add_argument("--drain", type=float, default=30,
                    help="after --seconds, requests in flight may run this long; then they are cut (counted as cut)")
    ap.add_argument("--ready-timeout", type=float, default=300)
    ap.add_argument("--prefix-words", type=int, default=100, help="words of the shared system prompt")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup", type=float, default=0,
                    help="also report TTFT over the requests sent this many seconds or more into a level (steady)")
    ap.add_argument("--ramp", type=float, default=0,
                    help="spread the clients' first requests over this many seconds (default 0: all at once)")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--per-request", action="store_true",
                    help="--json also holds one record per request: t_sent (s from the level's start), ttft (s; "
                         "null: cut before its first token, then waited: s until the cut), tokens, cut, system "
                         "(had the shared system prompt), user_words, and the server's timings when it sends them")
    args = ap.parse_args()
    if args.warmup < 0 or args.ramp < 0 or args.warmup >= args.seconds or args.ramp >= args.seconds:
        ap.error("--warmup and --ramp must be >= 0 and below --seconds")
    levels = [int(x) for x in args.clients.split(",")]
    # A SIGTERM (e.g. from `timeout`) unwinds through the finally below, which stops the server: an orphaned
    # server would go on decoding its queued requests and load the host for the next measurements.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench_server.py: terminated"))
    system_prefix = " ".join(random.Random(7).choice(WORDS) for _ in range(args.prefix_words))
    results = {}
    for spec in args.server:
        name, _, cmd = spec.partition("=")
        if not cmd:
            ap.error(f"--server {spec!r}: expected NAME=CMD")
        srv = Server(name, cmd, args.model, os.environ.get("TMPDIR", "/tmp"))
        try:
            srv.wait_ready(args.ready_timeout)
            one_request(srv.port, [{"role": "user", "content": "warm up"}], 8, 1, args.timeout)
            results[name] = []
            for c in levels:
                r = run_level(srv, c, args.seconds, args, system_prefix)
                results[name].append(r)
                print(f"{name:>8} clients={c:>3}: {r['agg_tok_s']:8.1f} tok/s {r['req_s']:6.2f} req/s  TTFT p50 "
                      f"{r['ttft_p50_s']:.3f} p99 {r['ttft_p99_s']:.3f} s (all {r['ttft_all_p99_s']:.3f} s, "
                      f"{r['unanswered']} unanswered)  ITL p50 {r['itl_p50_ms']:.1f} p99 "
                      f"{r['itl_p99_ms']:.1f} ms  RSS {r['peak_rss_mb']:.0f} MB  errors {r['errors']}  cut {r['cut']}  "
                      f"load {r['load_avg']:.1f}"
                      + (f"  steady ({r['steady_n']} sent from {args.warmup:g} s): TTFT p50 "
                         f"{r['ttft_steady_p50_s']:.3f} p99 {r['ttft_steady_p99_s']:.3f} s (all "
                         f"{r['ttft_steady_all_p99_s']:.3f} s)" if args.warmup > 0 else ""),
                      flush=True)
                for e in r["first_errors"]:
                    print(f"           {e}", flush=True)
        finally:
            srv.stop()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "args": vars(args), "results": results}, f, indent=1)
    names = list(results)

    def ratio(a, b):  # a / b, or "-" when either is missing (no token or no request in the window)
        return f"{a / b:.2f}x" if a == a and b == b and a > 0 and b > 0 else "-"

    steady = args.warmup > 0
    print("\n| clients | server | agg tok/s | req/s | TTFT p50 / p99 (s) | TTFT p99 all (s) | "
          + (f"TTFT p50 / p99 / p99 all, sent from {args.warmup:g} s (s) | " if steady else "")
          + "ITL p50 / p99 (ms) | peak RSS (MB) | errors | cut | unanswered | load |"
          + (" vs " + names[0] + ": tok/s, TTFT p99, TTFT p99 all, " + ("steady TTFT p99, " if steady else "")
             + "ITL p99 |" if len(names) > 1 else ""))
    print("|---:|---|---:|---:|---|---:|" + ("---|" if steady else "") + "---|---:|---:|---:|---:|---:|"
          + ("---|" if len(names) > 1 else ""))
    for i, c in enumerate(levels):
        base = results[names[0]][i]
        for n in names:
            r = results[n][i]
            row = (f"| {c} | {n} | {r['agg_tok_s']:.1f} | {r['req_s']:.2f} | {r['ttft_p50_s']:.3f} / "
                   f"{r['ttft_p99_s']:.3f} | {r['ttft_all_p99_s']:.3f} | "
                   + (f"{r['ttft_steady_p50_s']:.3f} / {r['ttft_steady_p99_s']:.3f} / {r['ttft_steady_all_p99_s']:.3f} "
                      f"({r['steady_n']}) | " if steady else "")
                   + f"{r['itl_p50_ms']:.1f} / {r['itl_p99_ms']:.1f} | "
                   f"{r['peak_rss_mb']:.0f} | {r['errors']} | {r['cut']} | {r['unanswered']} | {r['load_avg']:.1f} |")
            if len(names) > 1:
                if n == names[0]:
                    row += " |"
                else:
                    row += (f" {ratio(r['agg_tok_s'], base['agg_tok_s'])}, {ratio(base['ttft_p99_s'], r['ttft_p99_s'])}, "
                            f"{ratio(base['ttft_all_p99_s'], r['ttft_all_p99_s'])}, "
                            + (f"{ratio(base['ttft_steady_p99_s'], r['ttft_steady_p99_s'])}, " if steady else "")
                            + f"{ratio(base['itl_p99_ms'], r['itl_p99_ms'])} |")
            print(row)
    return 0 if all(r["errors"] == 0 for rs in results.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
