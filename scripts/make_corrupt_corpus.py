#!/usr/bin/env python3
"""Writes tests/data/corrupt/: one small hand-made corrupt GGUF file per class
of lie a hostile file can tell, plus EXPECTED.tsv (file, a fragment the error
message must contain, and the key or tensor name it must mention, if any).

Every file starts from the same small valid file (base.gguf, also written, and
also used as a fuzzing seed) and breaks exactly one thing. Stdlib only.

    python3 scripts/make_corrupt_corpus.py [OUT_DIR]
"""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
F32_T, Q8_0_T = 0, 8  # ggml tensor types


def count(n, version):
    return struct.pack("<I" if version == 1 else "<Q", n)


def gstr(b, version=3, length=None):
    if isinstance(b, str):
        b = b.encode()
    return count(len(b) if length is None else length, version) + b


def kv(key, vtype, payload, version=3):
    return gstr(key, version) + struct.pack("<I", vtype) + payload


def tensor_info(name, dims, ttype, offset, version=3, n_dims=None):
    out = gstr(name, version) + struct.pack("<I", len(dims) if n_dims is None else n_dims)
    for d in dims:
        out += struct.pack("<I" if version == 1 else "<Q", d)
    return out + struct.pack("<IQ", ttype, offset)


def pad(n, a=32):
    return (-n) % a


def build(kvs, infos, data, version=3, n_kv=None, n_tensors=None, magic=b"GGUF", raw_version=None,
          alignment=32):
    """kvs and infos are lists of already-encoded entries."""
    head = magic + (raw_version if raw_version is not None else struct.pack("<I", version))
    head += count(len(infos) if n_tensors is None else n_tensors, version)
    head += count(len(kvs) if n_kv is None else n_kv, version)
    body = head + b"".join(kvs) + b"".join(infos)
    if not infos:
        return body
    return body + b"\0" * pad(len(body), alignment) + data


def base_kvs(version=3):
    tokens = [b"<unk>", b"<s>", b"</s>", b"hello"]
    arr = struct.pack("<I", STRING) + count(len(tokens), version) + b"".join(gstr(t, version) for t in tokens)
    return [
        kv("general.architecture", STRING, gstr("llama", version), version),
        kv("general.alignment", U32, struct.pack("<I", 32), version),
        kv("llama.rope.freq_base", F32, struct.pack("<f", 10000.0), version),
        kv("tokenizer.ggml.tokens", ARRAY, arr, version),
        kv("tokenizer.ggml.add_bos_token", BOOL, b"\1", version),
    ]


# Two tensors: "w" f32 [8, 2] (64 bytes) at 0 and "q" q8_0 [32] (34 bytes) at 64.
W_BYTES = struct.pack("<16f", *[float(i) for i in range(16)])
Q_BYTES = struct.pack("<e", 0.5) + bytes(range(32))


def base_infos(version=3):
    return [tensor_info("w", [8, 2], F32_T, 0, version), tensor_info("q", [32], Q8_0_T, 64, version)]


def base_data():
    return W_BYTES + Q_BYTES + b"\0" * pad(len(Q_BYTES))


def base(version=3):
    return build(base_kvs(version), base_infos(version), base_data(), version)


def offset_of(blob, marker):
    i = blob.find(marker)
    assert i >= 0, marker
    return i


def nested_array(depth):
    """An array of arrays ... of one u8, `depth` arrays deep."""
    payload = struct.pack("<I", U8) + count(1, 3) + b"\7"
    for _ in range(depth - 1):
        payload = struct.pack("<I", ARRAY) + count(1, 3) + payload
    return payload


def cases():
    b = base()
    kvs, infos, data = base_kvs(), base_infos(), base_data()
    tok = offset_of(b, b"hello")
    info_q = offset_of(b, b"\x01\x00\x00\x00\x00\x00\x00\x00q")  # length 1 then "q"
    yield "truncated_header.gguf", b[:12], "truncated", ""
    yield "truncated_kv.gguf", b[:offset_of(b, b"llama.rope.freq_base") + 20 + 4 + 2], "truncated", \
        "llama.rope.freq_base"
    yield "truncated_string.gguf", b[:tok + 3], "runs past the end", "tokenizer.ggml.tokens"
    yield "truncated_tensor_info.gguf", b[:info_q + 8 + 1 + 4 + 3], "truncated", "q"
    yield "truncated_data.gguf", b[:-40], "runs past the end", "q"
    yield "empty.gguf", b"", "truncated", ""
    yield "bad_magic.gguf", b"GGUX" + b[4:], "bad magic", ""
    yield "ggjt_magic.gguf", b"tjgg" + b[4:], "pre-GGUF", ""
    yield "big_endian.gguf", b[:4] + struct.pack(">I", 3) + b[8:], "big-endian", ""
    yield "unsupported_version.gguf", b[:4] + struct.pack("<I", 4) + b[8:], "unsupported GGUF version", ""
    yield "absurd_kv_count.gguf", build(kvs, infos, data, n_kv=1 << 60), "metadata count", ""
    yield "absurd_tensor_count.gguf", build(kvs, infos, data, n_tensors=1 << 60), "tensor count", ""
    yield "absurd_kv_count_v1.gguf", build(base_kvs(1), base_infos(1), data, version=1, n_kv=0xFFFFFFFF), \
        "metadata count", ""
    yield "absurd_string_length.gguf", build(
        [kv("general.name", STRING, gstr("x", length=1 << 62))] + kvs, infos, data), "string length", "general.name"
    yield "absurd_key_length.gguf", build([gstr(b"k", length=1 << 40) + b"k"] + kvs, infos, data), \
        "string length", ""
    yield "key_too_long.gguf", build([gstr(b"k" * 64, length=70000)] + kvs, infos, data), "exceeds the limit", ""
    yield "empty_key.gguf", build([kv("", U8, b"\1")] + kvs, infos, data), "empty key", ""
    yield "absurd_array_count.gguf", build(
        [kv("tokenizer.ggml.scores", ARRAY, struct.pack("<I", F32) + count(1 << 61, 3))] + kvs, infos, data), \
        "cannot fit", "tokenizer.ggml.scores"
    yield "nested_arrays_too_deep.gguf", build([kv("x.nested", ARRAY, nested_array(9))] + kvs, infos, data), \
        "nested deeper", "x.nested"
    yield "unknown_value_type.gguf", build([kv("x.mystery", 13, b"\0" * 8)] + kvs, infos, data), \
        "unknown value type", "x.mystery"
    yield "unknown_array_element_type.gguf", build(
        [kv("x.mystery", ARRAY, struct.pack("<I", 99) + count(1, 3) + b"\0")] + kvs, infos, data), \
        "unknown value type", "x.mystery"
    yield "bad_bool.gguf", build([kv("x.flag", BOOL, b"\2")] + kvs, infos, data), "bool", "x.flag"
    yield "bad_alignment.gguf", build(
        [kvs[0], kv("general.alignment", U32, struct.pack("<I", 48))] + kvs[2:], infos, data), "power of two", \
        "general.alignment"
    yield "zero_alignment.gguf", build(
        [kvs[0], kv("general.alignment", U32, struct.pack("<I", 0))] + kvs[2:], infos, data), "power of two", \
        "general.alignment"
    yield "string_alignment.gguf", build(
        [kvs[0], kv("general.alignment", STRING, gstr("32"))] + kvs[2:], infos, data), "must be an integer", \
        "general.alignment"
    yield "duplicate_key.gguf", build(kvs + [kvs[0]], infos, data), "duplicate key", "general.architecture"
    yield "too_many_dims.gguf", build(kvs, [tensor_info("w", [8, 2, 1, 1, 1], F32_T, 0), infos[1]], data), \
        "dimensions", "w"
    yield "dims_overflow.gguf", build(kvs, [tensor_info("w", [1 << 32, 1 << 32], F32_T, 0), infos[1]], data), \
        "overflows", "w"
    yield "dim_negative.gguf", build(kvs, [tensor_info("w", [1 << 63, 1], F32_T, 0), infos[1]], data), \
        "negative", "w"
    yield "bytes_overflow.gguf", build(kvs, [tensor_info("w", [1 << 62, 1], F32_T, 0), infos[1]], data), \
        "overflows", "w"
    yield "unknown_tensor_type.gguf", build(kvs, [tensor_info("w", [8, 2], 5, 0), infos[1]], data), \
        "unknown tensor type", "w"
    yield "offset_past_end.gguf", build(kvs, [infos[0], tensor_info("q", [32], Q8_0_T, 1 << 40)], data), \
        "past the end", "q"
    yield "offset_overflow.gguf", build(kvs, [infos[0], tensor_info("q", [32], Q8_0_T, (1 << 64) - 32)], data), \
        "past the end", "q"
    yield "misaligned_offset.gguf", build(kvs, [infos[0], tensor_info("q", [32], Q8_0_T, 65)], data), \
        "not a multiple of the alignment", "q"
    yield "duplicate_tensor_name.gguf", build(kvs, [infos[0], tensor_info("w", [32], Q8_0_T, 64)], data), \
        "duplicate tensor name", "w"
    yield "empty_tensor_name.gguf", build(kvs, [infos[0], tensor_info("", [32], Q8_0_T, 64)], data), \
        "empty name", ""
    yield "tensor_name_too_long.gguf", build(kvs, [infos[0], tensor_info("t" * 65, [32], Q8_0_T, 64)], data), \
        "exceeds the limit", ""
    yield "partial_block.gguf", build(kvs, [infos[0], tensor_info("q", [33], Q8_0_T, 64)], data), \
        "whole number of", "q"
    yield "overlapping_tensors.gguf", build(kvs, [infos[0], tensor_info("q", [32], Q8_0_T, 32)], data), \
        "overlap", "q"
    yield "data_section_past_end.gguf", build(kvs, infos, b""), "past the end", ""


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "tests", "data", "corrupt")
    os.makedirs(out, exist_ok=True)
    for old in os.listdir(out):
        if old.endswith(".gguf"):
            os.remove(os.path.join(out, old))
    with open(os.path.join(out, "base.gguf"), "wb") as f:
        f.write(base())
    rows = []
    for name, blob, fragment, what in cases():
        with open(os.path.join(out, name), "wb") as f:
            f.write(blob)
        rows.append(f"{name}\t{fragment}\t{what}\n")
    with open(os.path.join(out, "EXPECTED.tsv"), "w") as f:
        f.write("# file\tfragment the error must contain\tkey or tensor it must name (may be empty)\n")
        f.write("# written by scripts/make_corrupt_corpus.py; base.gguf is the valid file they all start from\n")
        f.writelines(rows)
    print(f"wrote {len(rows)} corrupt files and base.gguf to {out}")


if __name__ == "__main__":
    main()
