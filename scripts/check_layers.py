#!/usr/bin/env python3
"""Checks the include rules of docs/architecture.md: which folder's sources may
include which folder's headers, and that no two folders include each other
(directly or through others). Prints each violation with file and line and
exits 1; CI runs it. Link-level rules are enforced by CMake (opal_layer).

Usage: scripts/check_layers.py [repo root]"""
import os
import re
import sys

# A source under the key folder may include headers from these folders (and its own).
ALLOWED = {
    "core": [],
    "tokenizer/jinja": ["core"],
    "tokenizer": ["core"],
    "sampling": ["core"],
    "graph": ["core"],
    "backends/cpu": ["core", "graph"],
    "backends/rocket": ["core", "graph"],
    "backends/et": ["core", "graph", "backends/et/abi", "backends/et/kernels"],
    # ET-SoC-1 device code (C for RV64, cross-compiled) and the host/device contract it shares.
    "backends/et/kernels": ["backends/et/abi"],
    "backends/et/abi": [],
    "backends/test_accel": ["core", "graph", "backends/cpu"],
    "backends/shadow": ["core", "graph", "backends/cpu"],
    "backends/factory": ["core", "graph", "backends"],
    "models": ["core", "graph"],
    "runtime": ["core", "graph", "models", "sampling", "tokenizer"],
    "server": ["core", "graph", "models", "runtime", "sampling", "tokenizer", "backends/factory"],
    # Models by name: HTTP downloads into the cache (libcurl); nothing of the engine.
    "hub": ["core"],
}
# Folders whose subfolders must not include each other in a cycle.
CYCLE_ROOTS = ["backends/rocket", "backends/et", "backends/cpu", "graph", "tokenizer", "runtime", "server", "models"]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    best = None
    for key in ALLOWED:
        if path == key or path.startswith(key + "/"):
            if best is None or len(key) > len(best):
                best = key
    return best


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    root = os.path.abspath(root)
    errors = []
    edges = {}  # folder -> {folder: (file, line)}
    for key in ALLOWED:
        top = os.path.join(root, key)
        for dirpath, _, files in os.walk(top):
            for f in files:
                if not f.endswith((".h", ".cpp", ".c")):
                    continue
                full = os.path.join(dirpath, f)
                rel = os.path.relpath(full, root)
                src_layer = layer_of(rel)
                if src_layer != key:
                    continue  # counted under a longer key
                with open(full, encoding="utf-8", errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        if "/" not in inc or not os.path.exists(os.path.join(root, inc)):
                            continue  # relative or system-style include
                        dst_layer = layer_of(inc) or inc.split("/")[0]
                        ok = dst_layer == src_layer or any(
                            dst_layer == a or dst_layer.startswith(a + "/") for a in ALLOWED[src_layer])
                        if not ok:
                            errors.append(f"{rel}:{n}: {src_layer}/ may not include {inc} "
                                          f"({src_layer} may use: {', '.join(ALLOWED[src_layer]) or 'nothing'})")
                        a, b = os.path.dirname(rel), os.path.dirname(inc)
                        # A subfolder using its parent's interface (driver/emulator ->
                        # driver) is the shape of an implementation, not a cycle.
                        if a != b and not a.startswith(b + "/"):
                            edges.setdefault(a, {}).setdefault(b, (rel, n))
    # Folder cycles under each root.
    for croot in CYCLE_ROOTS:
        nodes = {a for a in edges if a == croot or a.startswith(croot + "/")}
        sub = {a: {b: w for b, w in edges.get(a, {}).items() if b in nodes or b == croot or b.startswith(croot + "/")}
               for a in nodes}
        for a in sorted(sub):
            for b, (f, n) in sorted(sub[a].items()):
                # b reaches a?
                seen, stack = set(), [b]
                while stack:
                    x = stack.pop()
                    if x == a:
                        errors.append(f"{f}:{n}: include cycle between folders {a}/ and {b}/")
                        break
                    if x in seen:
                        continue
                    seen.add(x)
                    stack.extend(sub.get(x, {}).keys())
    for e in errors:
        print(e)
    if errors:
        print(f"check_layers: {len(errors)} violation(s) of docs/architecture.md's include rules")
        return 1
    print("check_layers: include rules hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
