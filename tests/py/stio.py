"""Minimal safetensors reader/writer (numpy) for megascale's reference scripts.

Independent of the C++ implementation: follows the published format (u64 header length, JSON header,
raw little-endian data)."""
import json
import struct

import numpy as np

_DT = {"F32": np.float32, "I32": np.int32, "F64": np.float64}
_NAME = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32", np.dtype(np.float64): "F64"}


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(data[base + s:base + e], dtype=_DT[v["dtype"]]).reshape(v["shape"]).copy()
    return out


def save(path, tensors):
    header, blobs, off = {}, [], 0
    for k in sorted(tensors):
        a = np.ascontiguousarray(tensors[k])
        b = a.tobytes()
        header[k] = {"dtype": _NAME[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
