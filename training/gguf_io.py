"""Minimal GGUF v3 writer and reader (stdlib + numpy for tensor views).

Layout (little-endian): magic "GGUF", u32 version 3, u64 tensor count, u64 KV count;
KVs: string key, u32 value type, value (strings are u64 length + bytes; arrays are
u32 element type + u64 count + elements); tensor infos: string name, u32 n_dims,
u64 ne[n_dims] (ne0 = innermost/contiguous dimension), u32 ggml type, u64 offset
relative to the data section; padding to `general.alignment` (default 32); tensor
data, each tensor's offset a multiple of the alignment.
"""
import struct

import numpy as np

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_SCALAR = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
           FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}
GGML_F32, GGML_F16 = 0, 1
ALIGNMENT = 32


def _string(s):
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _value(vtype, value):
    if vtype == STRING:
        return _string(value)
    if vtype == ARRAY:
        etype, items = value
        out = [struct.pack("<IQ", etype, len(items))]
        out.extend(_value(etype, item) for item in items)
        return b"".join(out)
    return struct.pack(_SCALAR[vtype], value)


def write(path, kvs, tensors):
    """kvs: [(key, type, value)] (arrays: (ARRAY, (elem_type, list)));
    tensors: [(name, np.ndarray float32/float16 in GGML order: shape[::-1] = ne)]."""
    header = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(kvs))]
    for key, vtype, value in kvs:
        header += [_string(key), struct.pack("<I", vtype), _value(vtype, value)]
    offset = 0
    blobs = []
    for name, array in tensors:
        array = np.ascontiguousarray(array)
        gtype = {np.dtype(np.float32): GGML_F32, np.dtype(np.float16): GGML_F16}[array.dtype]
        ne = array.shape[::-1]
        header += [_string(name), struct.pack("<I", len(ne)), struct.pack(f"<{len(ne)}Q", *ne),
                   struct.pack("<IQ", gtype, offset)]
        raw = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        blobs.append(raw)
        offset += len(raw)
        offset += -offset % ALIGNMENT
    head = b"".join(header)
    head += b"\0" * (-len(head) % ALIGNMENT)
    with open(path, "wb") as f:
        f.write(head)
        for raw in blobs:
            f.write(raw)
            f.write(b"\0" * (-len(raw) % ALIGNMENT))


class Reader:
    """Reads a GGUF file: .kv {key: (type, value)}, .tensors {name: np.ndarray}."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.pos = 0
        if self.buf[:4] != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        self.pos = 4
        version, n_tensors, n_kv = self._unpack("<IQQ")
        if version != 3:
            raise ValueError(f"{path}: GGUF version {version}, expected 3")
        self.kv = {}
        for _ in range(n_kv):
            key = self._str()
            (vtype,) = self._unpack("<I")
            self.kv[key] = (vtype, self._val(vtype))
        infos = []
        for _ in range(n_tensors):
            name = self._str()
            (n_dims,) = self._unpack("<I")
            ne = self._unpack(f"<{n_dims}Q")
            gtype, offset = self._unpack("<IQ")
            infos.append((name, ne, gtype, offset))
        align = self.kv.get("general.alignment", (UINT32, ALIGNMENT))[1]
        data_start = self.pos + (-self.pos % align)
        self.tensors = {}
        for name, ne, gtype, offset in infos:
            dtype = {GGML_F32: np.float32, GGML_F16: np.float16}[gtype]
            count = int(np.prod(ne))
            arr = np.frombuffer(self.buf, dtype=np.dtype(dtype).newbyteorder("<"), count=count,
                                offset=data_start + offset)
            self.tensors[name] = arr.reshape(ne[::-1]).astype(np.float32)
        self.types = {k: v[0] for k, v in self.kv.items()}

    def get(self, key):
        return self.kv[key][1]

    def _unpack(self, fmt):
        vals = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return vals

    def _str(self):
        (n,) = self._unpack("<Q")
        s = self.buf[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def _val(self, vtype):
        if vtype == STRING:
            return self._str()
        if vtype == ARRAY:
            etype, n = self._unpack("<IQ")
            return [self._val(etype) for _ in range(n)]
        return self._unpack(_SCALAR[vtype])[0]
