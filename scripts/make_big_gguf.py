#!/usr/bin/env python3
"""Writes a multi-GB GGUF for timing `opal inspect`: the metadata of a real
vocabulary file (e.g. ggml-vocab-llama-bpe.gguf: 128k tokens, 280k merges) plus
the tensor table of a Llama-3-8B-shaped model in Q4_K/Q6_K. The tensor data is
not written: the file is extended sparsely to its full size, so it takes no
disk space but is as large as the real thing. Write it outside the repository.

    python3 scripts/make_big_gguf.py VOCAB.gguf /tmp/big.gguf
"""
import struct
import sys

Q4_K, Q6_K, F32 = 12, 14, 0
BLOCK = {Q4_K: (256, 144), Q6_K: (256, 210), F32: (1, 4)}


def skip_value(d, p, t):
    if t == 8:
        n = struct.unpack_from("<Q", d, p)[0]
        return p + 8 + n
    if t == 9:
        et, n = struct.unpack_from("<IQ", d, p)
        p += 12
        for _ in range(n):
            p = skip_value(d, p, et)
        return p
    return p + {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}[t]


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def main():
    vocab, out = sys.argv[1], sys.argv[2]
    d = open(vocab, "rb").read()
    assert d[:4] == b"GGUF" and struct.unpack_from("<I", d, 4)[0] == 3
    n_tensors, n_kv = struct.unpack_from("<QQ", d, 8)
    assert n_tensors == 0
    p = 24
    for _ in range(n_kv):
        n = struct.unpack_from("<Q", d, p)[0]
        p += 8 + n
        t = struct.unpack_from("<I", d, p)[0]
        p = skip_value(d, p + 4, t)
    kvs = d[24:p]

    n_embd, n_ff, n_layer, n_vocab, n_kv_embd = 4096, 14336, 32, 128256, 1024
    tensors = [("token_embd.weight", [n_embd, n_vocab], Q4_K)]
    for i in range(n_layer):
        b = f"blk.{i}."
        tensors += [(b + "attn_norm.weight", [n_embd], F32), (b + "attn_q.weight", [n_embd, n_embd], Q4_K),
                    (b + "attn_k.weight", [n_embd, n_kv_embd], Q4_K), (b + "attn_v.weight", [n_embd, n_kv_embd], Q6_K),
                    (b + "attn_output.weight", [n_embd, n_embd], Q4_K), (b + "ffn_norm.weight", [n_embd], F32),
                    (b + "ffn_gate.weight", [n_embd, n_ff], Q4_K), (b + "ffn_up.weight", [n_embd, n_ff], Q4_K),
                    (b + "ffn_down.weight", [n_ff, n_embd], Q6_K)]
    tensors += [("output_norm.weight", [n_embd], F32), ("output.weight", [n_embd, n_vocab], Q6_K)]

    infos, offset = b"", 0
    for name, ne, t in tensors:
        bs, ts = BLOCK[t]
        n = 1
        for x in ne:
            n *= x
        infos += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
        infos += struct.pack("<IQ", t, offset)
        offset += (n // bs * ts + 31) // 32 * 32
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), n_kv) + kvs + infos
    head += b"\0" * ((-len(head)) % 32)
    with open(out, "wb") as f:
        f.write(head)
        f.truncate(len(head) + offset)  # sparse: the data section reads as zeros
    print(f"{out}: {len(head) + offset} bytes, {len(tensors)} tensors, header {len(head)} bytes")


if __name__ == "__main__":
    main()
