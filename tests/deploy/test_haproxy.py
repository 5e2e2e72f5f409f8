#!/usr/bin/env python3
"""Three `opal serve` replicas behind HAProxy (deploy/haproxy/haproxy.cfg), on 127.0.0.1.

Drives a mixed load through the balancer and checks what a deployment needs:
  - sticky sessions: every turn of a conversation (keyed by X-Session-Id or the
    request's "user" field) lands on one replica, and its follow-up turns reuse
    that replica's prefix cache (usage.prompt_tokens_details.cached_tokens);
  - requests without a key are spread over all replicas (least connections);
  - draining: a replica sent SIGTERM finishes its in-flight stream (not cut)
    while new requests go elsewhere, then exits 0;
  - failover: a replica that dies is routed around; its conversation re-prefills
    on another replica;
  - /metrics of every replica is Prometheus text and counts the requests.
Prints the spread and cache hits per replica. Exit 0 on success, 1 with the
reason otherwise. Needs haproxy (scripts/setup.sh installs it).

Usage: test_haproxy.py --opal build/release/opal [--shared-dir DIR] [--model GGUF]
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    raise SystemExit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    """One `opal serve` process; its stderr is collected on a thread."""

    def __init__(self, opal, model, name):
        self.name = name
        self.proc = subprocess.Popen(
            [opal, "serve", "-m", model, "--port", "0", "-np", "8", "-c", "8192", "-t", "1", "--metrics",
             "--drain-timeout", "30"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        self.port = None
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"listening on http://[\d.]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if "serve: ready" in line:
                self.ready.set()

    def wait_ready(self, timeout=60):
        if not self.ready.wait(timeout):
            fail(f"replica {self.name} not ready after {timeout} s:\n" + "".join(self.log[-20:]))


def request(port, method, path, body=None, headers=None, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = json.dumps(body).encode() if body is not None else None
    h = {"Content-Type": "application/json"} if data else {}
    h.update(headers or {})
    conn.request(method, path, body=data, headers=h)
    res = conn.getresponse()
    raw = res.read()
    conn.close()
    return res.status, {k.lower(): v for k, v in res.getheaders()}, raw


def chat(port, messages, key=None, key_in_header=True, max_tokens=12):
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0}
    headers = {}
    if key and key_in_header:
        headers["X-Session-Id"] = key
    elif key:
        body["user"] = key
    status, hdrs, raw = request(port, "POST", "/v1/chat/completions", body, headers)
    if status != 200:
        fail(f"chat via the balancer: HTTP {status}: {raw[:300]!r}")
    j = json.loads(raw)
    return hdrs.get("x-opal-replica", "?"), j


def haproxy_states(stats_port):
    status, _, raw = request(stats_port, "GET", "/stats;csv")
    states = {}
    for line in raw.decode().splitlines():
        f = line.split(",")
        if len(f) > 17 and f[0] == "opal_replicas" and f[1] not in ("BACKEND", "FRONTEND"):
            states[f[1]] = f[17]
    return states


def wait_states(stats_port, want, timeout=20):
    t0 = time.time()
    while time.time() - t0 < timeout:
        s = haproxy_states(stats_port)
        if all(s.get(k, "").startswith(v) for k, v in want.items()):
            return s
        time.sleep(0.2)
    fail(f"HAProxy server states {haproxy_states(stats_port)}, wanted {want}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--opal", required=True)
    ap.add_argument("--shared-dir", default=os.path.join(ROOT, "..", "shared"),
                    help="the shared test data (OPAL_SHARED_DIR wins when set)")
    ap.add_argument("--model", help="default: stories260K.gguf from the shared data")
    args = ap.parse_args()
    shared = os.environ.get("OPAL_SHARED_DIR") or args.shared_dir
    args.model = args.model or os.path.join(shared, "models", "stories260K.gguf")
    haproxy = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
    if not haproxy:
        fail("haproxy not found (Debian package haproxy; scripts/setup.sh installs it)")
    if not os.path.exists(args.model):
        fail(f"model {args.model} not found (set OPAL_SHARED_DIR)")

    replicas = {f"r{i}": Replica(args.opal, args.model, f"r{i}") for i in (1, 2, 3)}
    lb = None
    try:
        for r in replicas.values():
            r.wait_ready()
        lb_port, stats_port = free_port(), free_port()
        env = dict(os.environ, OPAL_LB_BIND=f"127.0.0.1:{lb_port}", OPAL_LB_STATS_BIND=f"127.0.0.1:{stats_port}")
        for name, r in replicas.items():
            env[f"OPAL_REPLICA_{name[1]}"] = f"127.0.0.1:{r.port}"
        lb = subprocess.Popen([haproxy, "-W", "-db", "-f", os.path.join(ROOT, "deploy", "haproxy", "haproxy.cfg")],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(100):
            try:
                if request(lb_port, "GET", "/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        wait_states(stats_port, {"r1": "UP", "r2": "UP", "r3": "UP"})

        # 1. Mixed load: 9 conversations of 3 turns (keys in the header or in "user"),
        #    and 18 requests without a key, all at once.
        convs = {}
        lock = threading.Lock()
        errors = []

        def conversation(i):
            try:
                key = f"conv-{i}"
                msgs = [{"role": "user", "content": f"{key}: once upon a time there was a cat."}]
                turns = []
                for t in range(3):
                    rep, j = chat(lb_port, msgs, key, key_in_header=(i % 2 == 0))
                    turns.append((rep, j["usage"]["prompt_tokens"], j["usage"]["prompt_tokens_details"]["cached_tokens"]))
                    msgs += [{"role": "assistant", "content": j["choices"][0]["message"]["content"]},
                             {"role": "user", "content": f"And then what happened in part {t + 2}?"}]
                with lock:
                    convs[key] = (turns, msgs)
            except BaseException as e:  # noqa: BLE001 (reported below)
                errors.append(f"conversation {i}: {e}")

        keyless = []

        def anonymous(i):
            try:
                for k in range(3):
                    rep, _ = chat(lb_port, [{"role": "user", "content": f"Story {i}.{k}: tell me about a dog."}], max_tokens=24)
                    with lock:
                        keyless.append(rep)
            except BaseException as e:  # noqa: BLE001
                errors.append(f"keyless {i}: {e}")

        threads = [threading.Thread(target=conversation, args=(i,)) for i in range(9)]
        threads += [threading.Thread(target=anonymous, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            fail("; ".join(errors))

        print("conversation  replica(s)  prompt/cached tokens per turn")
        hits = follow_ups = 0
        per_replica = {name: {"convs": 0, "hits": 0, "keyless": keyless.count(name)} for name in replicas}
        for key in sorted(convs):
            turns, _ = convs[key]
            reps = {t[0] for t in turns}
            print(f"  {key:8}    {','.join(sorted(reps)):10}  " + "  ".join(f"{p}/{c}" for _, p, c in turns))
            if len(reps) != 1:
                fail(f"{key} was not sticky: its turns went to {sorted(reps)}")
            per_replica[turns[0][0]]["convs"] += 1
            for rep, p, c in turns[1:]:
                follow_ups += 1
                if c >= turns[0][1] // 2:  # most of the first turn came from this replica's cache
                    hits += 1
                    per_replica[rep]["hits"] += 1
        print("replica  conversations  follow-up cache hits  keyless requests")
        for name, v in per_replica.items():
            print(f"  {name}     {v['convs']:13}  {v['hits']:20}  {v['keyless']:16}")
        if hits < follow_ups * 3 // 4:
            fail(f"only {hits} of {follow_ups} follow-up turns reused their prefix")
        if any(v["keyless"] == 0 for v in per_replica.values()):
            fail(f"requests without a key were not spread over the replicas: {per_replica}")

        # 2. /metrics of each replica: Prometheus text that counted the requests.
        total = 0
        for name, r in replicas.items():
            status, hdrs, raw = request(r.port, "GET", "/metrics")
            text = raw.decode()
            if status != 200 or "# TYPE opal:requests_finished_total counter" not in text:
                fail(f"{name} /metrics is not Prometheus text with opal:requests_finished_total")
            total += int(float(re.search(r"^opal:requests_finished_total (\S+)", text, re.M).group(1)))
        if total != 9 * 3 + 18:
            fail(f"the replicas' /metrics count {total} finished requests, {9 * 3 + 18} were made")
        if "haproxy_server_" not in request(stats_port, "GET", "/metrics")[2].decode():
            fail("HAProxy's Prometheus exporter gave no haproxy_server_ metrics")
        print(f"metrics: {total} requests finished over the replicas (Prometheus text)")

        # 3. Draining: SIGTERM the replica of conv-1 during a long stream it serves.
        key = "conv-1"
        turns, msgs = convs[key]
        victim = turns[0][0]
        stream_result = {}

        def long_stream():
            body = {"messages": msgs, "max_tokens": 400, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}, "ignore_eos": True, "user": key}
            conn = http.client.HTTPConnection("127.0.0.1", lb_port, timeout=120)
            conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
            res = conn.getresponse()
            stream_result["replica"] = res.getheader("X-Opal-Replica")
            finish = None
            usage = None
            for line in res:
                line = line.decode().strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    j = json.loads(line[6:])
                    if j.get("choices") and j["choices"][0].get("finish_reason"):
                        finish = j["choices"][0]["finish_reason"]
                    if j.get("usage"):
                        usage = j["usage"]
                if line == "data: [DONE]":
                    break
            stream_result["finish"], stream_result["usage"] = finish, usage

        st = threading.Thread(target=long_stream)
        st.start()
        time.sleep(0.3)
        replicas[victim].proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        rep, j = chat(lb_port, msgs, key, key_in_header=False)  # the session moves on
        st.join(90)
        code = replicas[victim].proc.wait(60)
        print(f"drain: {victim} got SIGTERM mid-stream; the stream ended '{stream_result.get('finish')}' with "
              f"{(stream_result.get('usage') or {}).get('completion_tokens')} tokens; a new turn went to {rep}; "
              f"{victim} exited {code}")
        if stream_result.get("replica") != victim:
            fail(f"the long stream ran on {stream_result.get('replica')}, not on {victim}")
        if stream_result.get("finish") != "length" or (stream_result.get("usage") or {}).get("completion_tokens") != 400:
            fail(f"the in-flight stream was cut by the drain: {stream_result}")
        if rep == victim:
            fail("a new request went to the draining replica")
        if code != 0:
            fail(f"the drained replica exited {code}:\n" + "".join(replicas[victim].log[-10:]))

        # 4. Failover: kill the replica now holding conv-1; its next turn re-prefills elsewhere.
        holder = rep
        replicas[holder].proc.kill()
        replicas[holder].proc.wait()
        rep2, j2 = chat(lb_port, msgs, key, key_in_header=False)
        cached = j2["usage"]["prompt_tokens_details"]["cached_tokens"]
        print(f"failover: {holder} killed; conv-1's next turn answered by {rep2} "
              f"({j2['usage']['prompt_tokens']} prompt tokens, {cached} cached)")
        if rep2 in (holder, victim):
            fail(f"a request went to a dead replica ({rep2})")
        if cached >= j2["usage"]["prompt_tokens"] // 2:
            fail("the conversation's prefix was cached on a replica that never saw it")
        print("OK")
    finally:
        if lb:
            lb.terminate()
            try:
                lb.wait(10)
            except subprocess.TimeoutExpired:
                lb.kill()
        for r in replicas.values():
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()


if __name__ == "__main__":
    main()
