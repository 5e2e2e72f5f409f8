#!/usr/bin/env python3
"""Per-token timeline of a decode, from `opal bench/run --perf-log FILE` output.

Usage:
  scripts/token_timeline.py PERF_LOG [PERF_LOG ...] [--summary] [--slow X]

  opal bench -m M.gguf -p 0 -n 64 -d 4096 --fa 0 -t 1 --perf-log /tmp/p.log
  scripts/token_timeline.py /tmp/p.log            # one line per decode token, then the summary
  scripts/token_timeline.py /tmp/p.log --summary  # the summary only

A token is the run of OPAL_PERF lines that a `logits` MUL_MAT closes; it is a decode token when it
computes one position (its `embd` GET_ROWS, or failing that its `logits` matmul, has m = 1). Its wall
time is the gap between its `logits` end_us and the previous token's (the first one: from its first
node's start), so host work between tokens counts; `span` is its first start to its logits end.
Per op type: the summed duration_us of its nodes. Summary: median / p90 / max wall, and the tokens
slower than X times the median (default 2: "slow tokens") with their mean op-type split beside the
other tokens'. Standard library only.
"""
import argparse
import signal
import statistics
import sys


def parse(line):
    if not line.startswith("OPAL_PERF|"):
        return None
    fields = {}
    for part in line.rstrip("\n").split("|")[1:]:
        key, _, value = part.partition("=")
        fields[key] = value
    return fields


def positions(node):
    """Positions a node computes, from its shape ([n_embd,n_tokens] for embd, m= for matmuls)."""
    if node.get("m"):
        return int(node["m"])
    shape = node.get("shape", "[]").strip("[]").split(",")
    return int(shape[1]) if len(shape) > 1 and shape[1] else 1


def tokens(path):
    """Yields (wall_ms, span_ms, {op: ms}, (slowest tensor, ms), decode?) per token of one log."""
    group, prev_end = [], None
    with open(path, errors="replace") as f:
        for line in f:
            node = parse(line)
            if node is None or "end_us" not in node:
                continue
            group.append(node)
            if node.get("tensor") != "logits":
                continue
            end = float(node["end_us"])
            first = float(group[0]["start_us"])
            embd = next((n for n in group if n.get("tensor") == "embd"), None)
            decode = positions(embd if embd else node) == 1
            ops = {}
            for n in group:
                ops[n["op"]] = ops.get(n["op"], 0.0) + float(n["duration_us"]) / 1000
            slow = max(group, key=lambda n: float(n["duration_us"]))
            wall = (end - (prev_end if prev_end is not None and prev_end <= first else first)) / 1000
            yield wall, (end - first) / 1000, ops, (slow["tensor"], float(slow["duration_us"]) / 1000), decode
            group, prev_end = [], end


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def split(rows, order):
    if not rows:
        return "-"
    return " ".join(f"{op}={statistics.fmean(r[2].get(op, 0.0) for r in rows):.1f}" for op in order)


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under | head
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--summary", action="store_true", help="print the summary only")
    ap.add_argument("--slow", type=float, default=2.0, help="a slow token takes more than X times the median")
    args = ap.parse_args()
    for path in args.logs:
        rows = [t for t in tokens(path) if t[4]]
        if not rows:
            print(f"{path}: no decode tokens")
            continue
        totals = {}
        for r in rows:
            for op, ms in r[2].items():
                totals[op] = totals.get(op, 0.0) + ms
        order = sorted(totals, key=totals.get, reverse=True)[:4]
        if not args.summary:
            print(f"# {path}")
            print(f"{'tok':>4} {'wall_ms':>8} {'span_ms':>8}  " + " ".join(f"{op:>10}" for op in order) + "  slowest")
            for i, (wall, span, ops, (name, ms), _) in enumerate(rows):
                cells = " ".join(f"{ops.get(op, 0.0):10.2f}" for op in order)
                print(f"{i:4d} {wall:8.2f} {span:8.2f}  {cells}  {name} {ms:.2f}")
        walls = [r[0] for r in rows]
        med = statistics.median(walls)
        slow = [r for r in rows if r[0] > args.slow * med]
        rest = [r for r in rows if r[0] <= args.slow * med]
        print(f"{path}: {len(rows)} decode tokens, wall median {med:.2f} ms, p90 {pct(walls, 90):.2f}, "
              f"max {max(walls):.2f}; slow (> {args.slow:g}x median): {len(slow)}")
        print(f"  mean ms, other tokens: {split(rest, order)}")
        if slow:
            print(f"  mean ms, slow tokens:  {split(slow, order)}")


if __name__ == "__main__":
    sys.exit(main())
