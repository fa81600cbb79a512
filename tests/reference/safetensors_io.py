"""Minimal reader/writer for the safetensors format, with numpy only.

File layout:
    u64 little-endian N  (length of the JSON header in bytes)
    N bytes of UTF-8 JSON: {name: {"dtype": ..., "shape": [...],
                                   "data_offsets": [begin, end]}, ...,
                            "__metadata__": {str: str}}   (optional)
    the data buffer; offsets are relative to its start.

Supported dtypes: F32, F16, BF16 (and F64 for reading). Everything is read
back as float32.
"""

import json
import os
import struct

import numpy as np

_ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "U8": 1}


def f32_to_bf16_bits(a):
    """float32 array -> uint16 array of bfloat16 bits, round to nearest even."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():  # keep NaN a NaN (rounding could carry it into Inf)
        out[nan] = ((bits[nan] >> 16).astype(np.uint16) | 0x0040)
    return out


def bf16_bits_to_f32(b):
    """uint16 array of bfloat16 bits -> float32 array (exact)."""
    b = np.ascontiguousarray(b, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)


def round_to_dtype(a, dtype):
    """The float32 values an array has after a store/load in `dtype`."""
    a = np.asarray(a, dtype=np.float32)
    if dtype == "F32":
        return a.copy()
    if dtype == "F16":
        return a.astype(np.float16).astype(np.float32)
    if dtype == "BF16":
        return bf16_bits_to_f32(f32_to_bf16_bits(a)).reshape(a.shape)
    raise ValueError("unsupported dtype %r" % (dtype,))


def _encode(a, dtype):
    a = np.asarray(a)
    if dtype == "F64":
        return np.ascontiguousarray(a, dtype="<f8").tobytes()
    if dtype == "F32":
        return np.ascontiguousarray(a, dtype="<f4").tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(a.astype(np.float32).astype("<f2")).tobytes()
    if dtype == "BF16":
        return f32_to_bf16_bits(a.astype(np.float32)).astype("<u2").tobytes()
    if dtype == "U8":  # packed quantized data (gpt-oss's MXFP4 blocks and scales)
        return np.ascontiguousarray(a, dtype=np.uint8).tobytes()
    raise ValueError("unsupported dtype %r" % (dtype,))


def _decode(buf, dtype, shape):
    if dtype == "F64":
        a = np.frombuffer(buf, dtype="<f8").astype(np.float32)
    elif dtype == "F32":
        a = np.frombuffer(buf, dtype="<f4").astype(np.float32)
    elif dtype == "F16":
        a = np.frombuffer(buf, dtype="<f2").astype(np.float32)
    elif dtype == "BF16":
        a = bf16_bits_to_f32(np.frombuffer(buf, dtype="<u2"))
    elif dtype == "U8":
        a = np.frombuffer(buf, dtype=np.uint8).copy()
    else:
        raise ValueError("unsupported dtype %r" % (dtype,))
    return a.reshape(shape)


def save(path, tensors, dtype="F32", metadata=None):
    """Write `tensors` (name -> array) to `path`.

    `dtype` is one of "F32", "F16", "BF16", or a dict name -> dtype.
    `metadata` is the optional "__metadata__" dict of str -> str;
    by default {"format": "pt"} as PyTorch writers do.
    """
    if metadata is None:
        metadata = {"format": "pt"}
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    for name, arr in tensors.items():
        dt = dtype[name] if isinstance(dtype, dict) else dtype
        arr = np.asarray(arr)
        blob = _encode(arr, dt)
        assert len(blob) == arr.size * _ITEMSIZE[dt]
        header[name] = {"dtype": dt, "shape": [int(s) for s in arr.shape],
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-len(hjson)) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for blob in blobs:
            f.write(blob)
    return offset


def read_header(path):
    """(header dict, byte offset of the data buffer)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    return header, 8 + n


def load(path):
    """Read a .safetensors file -> dict name -> float32 array."""
    header, start = read_header(path)
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        if not (0 <= b <= e <= len(data)):
            raise ValueError("%s: bad data_offsets %r for %s" % (path, info["data_offsets"], name))
        out[name] = _decode(data[b:e], info["dtype"], tuple(info["shape"]))
    return out


def shard_name(i, n):
    return "model-%05d-of-%05d.safetensors" % (i, n)


def save_sharded(out_dir, tensors, n_shards=2, dtype="F32", metadata=None):
    """Split `tensors` (in their given order) into `n_shards` files of about
    equal size plus `model.safetensors.index.json`. Returns the index."""
    names = list(tensors)
    n_shards = max(1, min(n_shards, len(names)))
    sizes = [np.asarray(tensors[k]).size * _ITEMSIZE[dtype[k] if isinstance(dtype, dict) else dtype]
             for k in names]
    total = sum(sizes)
    groups = [[] for _ in range(n_shards)]
    acc = 0
    for k, s in zip(names, sizes):
        g = min(n_shards - 1, acc * n_shards // max(total, 1))
        groups[g].append(k)
        acc += s
    # no empty shard: move tensors forward from the previous group if needed
    for g in range(n_shards):
        if not groups[g]:
            for h in range(g - 1, -1, -1):
                if len(groups[h]) > 1:
                    groups[g].append(groups[h].pop())
                    break
    groups = [g for g in groups if g]
    n = len(groups)
    weight_map = {}
    for i, g in enumerate(groups, start=1):
        fname = shard_name(i, n)
        save(os.path.join(out_dir, fname), {k: tensors[k] for k in g}, dtype, metadata)
        for k in g:
            weight_map[k] = fname
    index = {"metadata": {"total_size": int(total)}, "weight_map": weight_map}
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return index


def load_dir(model_dir):
    """Load all weights of a Hugging Face model directory: either
    model.safetensors.index.json + shards, or model.safetensors."""
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            weight_map = json.load(f)["weight_map"]
        out = {}
        for fname in sorted(set(weight_map.values())):
            part = load(os.path.join(model_dir, fname))
            for k, v in part.items():
                if weight_map.get(k) == fname:
                    out[k] = v
        missing = set(weight_map) - set(out)
        if missing:
            raise ValueError("index names tensors not in their shard: %s" % sorted(missing)[:5])
        return out
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return load(single)
    raise FileNotFoundError("no model.safetensors(.index.json) in %s" % model_dir)
