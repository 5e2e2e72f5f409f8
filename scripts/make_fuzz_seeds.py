#!/usr/bin/env python3
"""Writes a seed corpus for fuzz/gguf_parse from the shared GGUF files.

Real files are megabytes (vocabularies, weights); a fuzzer wants inputs of a
few KiB. Each shared file is rebuilt small but with the same structure: same
version, keys, value types and tensor names, types and ranks, with every array
cut to at most 8 elements and every tensor shrunk to one block. The corrupt
corpus (tests/data/corrupt) is copied in too. Stdlib only.

    python3 scripts/make_fuzz_seeds.py SHARED_DIR OUT_DIR
"""
import os
import shutil
import struct
import sys

# ggml type -> (elements per block, bytes per block); core/dtype.cpp has the same table.
BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 36),
          10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
          16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110),
          22: (256, 82), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8),
          29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66), 39: (32, 17)}
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
MAX_ITEMS = 8


class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0
        self.version = 3

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.d, self.p)[0]
        self.p += struct.calcsize(fmt)
        return v

    def count(self):
        return self.take("I" if self.version == 1 else "Q")

    def string(self):
        n = self.count()
        s = self.d[self.p:self.p + n]
        self.p += n
        return s

    def value(self, t):
        if t == STRING:
            return self.string()
        if t == ARRAY:
            et, n = self.take("I"), self.count()
            return (et, [self.value(et) for _ in range(n)])
        return self.take(SCALAR[t])


def enc_count(n, version):
    return struct.pack("<I" if version == 1 else "<Q", n)


def enc_value(t, v, version):
    if t == STRING:
        return enc_count(len(v), version) + v
    if t == ARRAY:
        et, items = v
        items = items[:MAX_ITEMS]
        return struct.pack("<I", et) + enc_count(len(items), version) + b"".join(enc_value(et, x, version)
                                                                                   for x in items)
    return struct.pack("<" + SCALAR[t], v)


def shrink(data):
    r = Reader(data)
    assert r.d[:4] == b"GGUF"
    r.p = 4
    r.version = version = r.take("I")
    n_tensors, n_kv = r.count(), r.count()
    kvs, alignment = [], 32
    for _ in range(n_kv):
        key, t = r.string(), r.take("I")
        v = r.value(t)
        if key == b"general.alignment":
            alignment = v
        kvs.append((key, t, v))
    out = b"GGUF" + struct.pack("<I", version) + enc_count(n_tensors, version) + enc_count(n_kv, version)
    for key, t, v in kvs:
        out += enc_count(len(key), version) + key + struct.pack("<I", t) + enc_value(t, v, version)
    blob, offset = b"", 0
    for _ in range(n_tensors):
        name, n_dims = r.string(), r.take("I")
        for _ in range(n_dims):
            r.take("I" if version == 1 else "Q")
        ttype, _ = r.take("I"), r.take("Q")
        bs, ts = BLOCKS[ttype]
        dims = [bs] + [1] * (n_dims - 1) if n_dims else []
        out += enc_count(len(name), version) + name + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<I" if version == 1 else "<Q", d) for d in dims)
        out += struct.pack("<IQ", ttype, offset)
        chunk = bytes((i * 37 + offset) & 0xFF for i in range(ts)) if n_dims else b"\0" * ts
        chunk += b"\0" * ((-len(chunk)) % alignment)
        blob += chunk
        offset += len(chunk)
    if n_tensors:
        out += b"\0" * ((-len(out)) % alignment) + blob
    return out


def main():
    shared, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    n = 0
    for root, _, files in os.walk(shared):
        for f in sorted(files):
            if f.endswith(".gguf"):
                with open(os.path.join(root, f), "rb") as fh:
                    small = shrink(fh.read())
                with open(os.path.join(out, "shared-" + f), "wb") as fh:
                    fh.write(small)
                n += 1
    corrupt = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "corrupt")
    for f in sorted(os.listdir(corrupt)):
        if f.endswith(".gguf"):
            shutil.copy(os.path.join(corrupt, f), os.path.join(out, "corrupt-" + f))
            n += 1
    print(f"wrote {n} seeds to {out}")


if __name__ == "__main__":
    main()
