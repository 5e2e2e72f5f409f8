#!/usr/bin/env python3
"""Large request bodies against `opal serve` (issue #20): time and peak RSS.

Starts `opal serve` (stories260K by default), then sends, one at a time:
  * N chat bodies of --mb MB (under --max-body-size): each must get a 400
    naming `messages` (the prompt cannot fit a slot: refused from its size,
    before the template or the tokenizer); prints the time per request and
    the server's peak RSS (VmHWM) after it;
  * one body whose Content-Length is over --max-body-size: the 413 must
    arrive before the body is sent (the client sends the head only and reads).
Standard library only. Exit status 0 when every answer was as expected.

  python3 scripts/big_body_server.py --opal build/release/opal --mb 50 --count 3
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time


def vm(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return -1.0


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--opal", default="build/release/opal")
    ap.add_argument("--model", default=os.path.join(os.environ.get("OPAL_SHARED_DIR", "../shared"),
                                                    "models/stories260K.gguf"))
    ap.add_argument("--serve-args", default="-np 1 -c 2048 -t 1")
    ap.add_argument("--mb", type=float, default=50)
    ap.add_argument("--count", type=int, default=3)
    args = ap.parse_args()

    port = free_port()
    cmd = [args.opal, "serve", "-m", args.model, "--port", str(port)] + args.serve_args.split()
    srv = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ok = True
    try:
        for line in srv.stderr:
            if "ready" in line:
                break
        print(f"server pid {srv.pid}: RSS {vm(srv.pid, 'VmRSS'):.1f} MB after load")
        words = ("once upon a time there was a little girl named lily ") * int(args.mb * 1e6 / 52 + 1)
        body = json.dumps({"messages": [{"role": "user", "content": words[: int(args.mb * 1e6)]}],
                           "max_tokens": 8}).encode()
        print(f"chat body: {len(body) / 1e6:.1f} MB")
        for i in range(args.count):
            t0 = time.monotonic()
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            dt = time.monotonic() - t0
            c.close()
            good = r.status == 400 and b'"param":"messages"' in data
            ok &= good
            print(f"  request {i + 1}: HTTP {r.status} in {dt:.2f} s, server peak RSS (VmHWM) "
                  f"{vm(srv.pid, 'VmHWM'):.1f} MB, RSS now {vm(srv.pid, 'VmRSS'):.1f} MB"
                  f"{'' if good else '  UNEXPECTED: ' + data[:200].decode(errors='replace')}")
        # Over the limit: only the head is sent; the 413 comes without reading the body.
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        t0 = time.monotonic()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000000000\r\n\r\n")
        resp = b""
        while b"\r\n\r\n" not in resp:
            chunk = s.recv(65536)
            if not chunk:
                break
            resp += chunk
        dt = time.monotonic() - t0
        s.close()
        good = resp.startswith(b"HTTP/1.1 413")
        ok &= good
        status_line = resp.split(b"\r\n", 1)[0].decode()
        print(f"  1 GB Content-Length, head only: {status_line} in {dt * 1000:.1f} ms "
              f"(nothing of the body sent), peak RSS {vm(srv.pid, 'VmHWM'):.1f} MB")
    finally:
        srv.terminate()
        srv.wait(timeout=30)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
