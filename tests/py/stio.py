"""Minimal safetensors reader/writer (numpy) for megascale's reference scripts.

Independent of the C++ implementation: follows the published format (u64 header length, JSON header,
raw little-endian data)."""
import json
import struct

import numpy as np

_DT = {"F32": np.float32, "I32": np.int32, "F64": np.float64, "F16": np.float16}
_NAME = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32", np.dtype(np.float64): "F64",
         np.dtype(np.float16): "F16"}


def bf16_bits(a):
    """float32 array -> uint16 bfloat16 bits, rounded to nearest even (finite inputs)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


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
        if v["dtype"] == "BF16":  # returned as float32 (exact)
            bits = np.frombuffer(data[base + s:base + e], dtype=np.uint16)
            out[k] = bf16_to_f32(bits).reshape(v["shape"]).copy()
            continue
        out[k] = np.frombuffer(data[base + s:base + e], dtype=_DT[v["dtype"]]).reshape(v["shape"]).copy()
    return out


def save(path, tensors, bf16=False):
    """Writes tensors in name order; bf16=True stores float32 arrays as BF16 (rounded to nearest even)."""
    header, blobs, off = {}, [], 0
    for k in sorted(tensors):
        a = np.ascontiguousarray(tensors[k])
        name = _NAME[a.dtype]
        if bf16 and a.dtype == np.float32:
            a, name = bf16_bits(a), "BF16"
        b = a.tobytes()
        header[k] = {"dtype": name, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_folder(model_dir):
    """Every tensor of a Hugging Face folder (model.safetensors, or the files of a sharded
    model.safetensors.index.json) as float32 numpy arrays (F16 and BF16 are exact in float32)."""
    import os
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        raw = load(single)
    else:
        index = json.load(open(os.path.join(model_dir, "model.safetensors.index.json")))
        raw = {}
        for f in sorted(set(index["weight_map"].values())):
            raw.update(load(os.path.join(model_dir, f)))
    return {k: np.asarray(v, dtype=np.float32) for k, v in raw.items()}
