#!/usr/bin/env python3
"""Memory and start-up of `opal run` beside llama.cpp's llama-cli (issue #18 item 6).

For one model file and each tool:
  * time to first token, cold and warm: the wall time of a run that prints one
    token (load, prompt, one decode step, exit). Cold evicts the model file from the
    page cache first (posix_fadvise DONTNEED; check with `fincore FILE`), warm runs
    right after another run. Best and median of --runs.
  * memory with a --ctx context generating --tokens tokens: the peak resident set
    (ru_maxrss: the weights' mapped pages count when touched) and the peak of RssAnon
    (sampled every 20 ms: memory that is not the model file: KV cache, compute
    buffers, vocabulary...).
Standard library only.

  python3 scripts/mem_startup.py --model /tmp/llama1b-q8_0.gguf --opal build/release/opal \\
      --llama-cli ../shared/llamacpp/bin/llama-cli --threads 2
"""
import argparse
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time

PROMPT = "Once upon a time there was a little girl named Lily. She liked to play in the park with her dog."


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def rss_anon_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run(argv):
    """Runs argv to its end. Returns (wall s, peak RSS MiB, peak RssAnon MiB, exit status, output tail)."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peak_anon = [0]
    out = []
    done = threading.Event()

    def reader():
        out.append(p.stdout.read())

    def sampler():
        while not done.wait(0.02):  # not p.poll(): that would reap the child before wait4
            peak_anon[0] = max(peak_anon[0], rss_anon_kib(p.pid))

    threads = [threading.Thread(target=reader), threading.Thread(target=sampler)]
    for t in threads:
        t.start()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    done.set()
    p.returncode = os.waitstatus_to_exitcode(status)
    for t in threads:
        t.join()
    return wall, usage.ru_maxrss / 1024.0, peak_anon[0] / 1024.0, p.returncode, out[0][-600:].decode(errors="replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--opal", default="build/release/opal")
    ap.add_argument("--llama-cli", default=os.path.join(os.environ.get("OPAL_SHARED_DIR", "../shared"),
                                                         "llamacpp/bin/llama-cli"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--opal-args", default="", help="more `opal run` arguments, e.g. '--lm mmap' (llama.cpp's mapping)")
    ap.add_argument("--only", choices=("opal", "llama.cpp"), help="measure one tool")
    args = ap.parse_args()

    def opal(n, ctx):
        return [args.opal, "run", "-m", args.model, "-p", PROMPT, "-n", str(n), "-c", str(ctx), "-t", str(args.threads)
                ] + shlex.split(args.opal_args)

    def llama(n, ctx):  # llama-cli is conversational now: one turn, then exit
        return [args.llama_cli, "-m", args.model, "-p", PROMPT, "-n", str(n), "-c", str(ctx), "-t", str(args.threads),
                "-st", "--simple-io"]

    tools = {name: cmd for name, cmd in (("opal", opal), ("llama.cpp", llama)) if args.only in (None, name)}
    rows = {}
    for name, cmd in tools.items():
        r = {}
        for mode in ("cold", "warm"):
            walls = []
            for _ in range(args.runs):
                if mode == "cold":
                    evict(args.model)
                else:
                    run(cmd(1, 512))  # the file in the page cache
                wall, _, _, rc, tail = run(cmd(1, 512))
                if rc != 0:
                    sys.exit(f"{name}: exit status {rc}:\n{tail}")
                walls.append(wall)
            r[mode] = (min(walls), statistics.median(walls))
        run(cmd(1, 512))
        wall, rss, anon, rc, tail = run(cmd(args.tokens, args.ctx))
        if rc != 0:
            sys.exit(f"{name}: exit status {rc}:\n{tail}")
        r["mem"] = (rss, anon, wall)
        rows[name] = r
        print(f"{name}: first token cold best {r['cold'][0]:.2f} s (median {r['cold'][1]:.2f}), warm best "
              f"{r['warm'][0]:.2f} s (median {r['warm'][1]:.2f}); -c {args.ctx} -n {args.tokens}: peak RSS "
              f"{rss:.0f} MiB, peak RssAnon {anon:.0f} MiB", flush=True)
    print(f"\n| tool | first token, cold (best / median) | first token, warm (best / median) | peak RSS, -c {args.ctx} "
          f"| peak anonymous RSS, -c {args.ctx} |")
    print("|---|---:|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| {name} | {r['cold'][0]:.2f} / {r['cold'][1]:.2f} s | {r['warm'][0]:.2f} / {r['warm'][1]:.2f} s | "
              f"{r['mem'][0]:.0f} MiB | {r['mem'][1]:.0f} MiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
