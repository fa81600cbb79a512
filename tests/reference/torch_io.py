"""Write PyTorch checkpoints (pytorch_model.bin) without torch, from the format's description.

torch.save (since PyTorch 1.6) writes a zip archive whose entries are stored, not compressed:
    ARCHIVE/data.pkl     a pickle (protocol 2) of the object saved; each tensor is
                         torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride,
                         requires_grad, backward_hooks) with the storage a persistent id
                         ('storage', torch.<Type>Storage, key, location, numel)
    ARCHIVE/data/KEY     each storage's raw little-endian bytes (aligned to 64 bytes in the file)
    ARCHIVE/version      "3"
    ARCHIVE/byteorder    "little"
A state dict is a collections.OrderedDict of name -> tensor (with a _metadata attribute set by
BUILD after its items).

    save(path, tensors, dtype="F32", **options)
tensors: {name: numpy array}. Options exercise what real checkpoints hold: `tie` {name: other}
makes name a view of other's storage (tied embeddings); `pack` puts every tensor in one storage
at increasing offsets; `transposed` {names} stores those as transposed views (strides (1, rows));
`buffers` {name: int64 array} adds integer buffers (position ids); `wrap` nests the state dict
under "state_dict" with an "epoch" beside it.

    save_sharded(dir, tensors, n_shards, dtype) writes pytorch_model-0000i-of-0000N.bin and
pytorch_model.bin.index.json.
"""

import json
import os
import struct
import zipfile

import numpy as np

STORAGE = {"F32": ("FloatStorage", "<f4"), "F16": ("HalfStorage", "<f2"),
           "BF16": ("BFloat16Storage", None), "I64": ("LongStorage", "<i8"),
           "F64": ("DoubleStorage", "<f8")}


def bf16_bytes(a):
    """Round-to-nearest-even float32 -> bfloat16, as torch's .to(torch.bfloat16)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2").tobytes()


def bf16_round(a):
    b = np.frombuffer(bf16_bytes(a), dtype="<u2").astype(np.uint32) << 16
    return b.view(np.float32).reshape(np.shape(a))


def _raw(a, dtype):
    if dtype == "BF16":
        return bf16_bytes(a)
    return np.ascontiguousarray(a, dtype=STORAGE[dtype][1]).tobytes()


class _Pickle:
    """Emits protocol-2 opcodes (names from pickletools), with the memo a pickler keeps."""

    def __init__(self):
        self.out = bytearray(b"\x80\x02")
        self.memo = {}
        self.globals = {}

    def op(self, b):
        self.out += b

    def put(self):
        n = len(self.memo)
        self.memo[n] = True
        self.op(b"q" + bytes([n]) if n < 256 else b"r" + struct.pack("<I", n))
        return n

    def get(self, n):
        self.op(b"h" + bytes([n]) if n < 256 else b"j" + struct.pack("<I", n))

    def glob(self, module, name):
        key = (module, name)
        if key in self.globals:
            self.get(self.globals[key])
        else:
            self.op(b"c" + module.encode() + b"\n" + name.encode() + b"\n")
            self.globals[key] = self.put()

    def str(self, s):
        b = s.encode()
        self.op(b"X" + struct.pack("<I", len(b)) + b)

    def int(self, v):
        if 0 <= v < 256:
            self.op(b"K" + bytes([v]))
        elif 0 <= v < 65536:
            self.op(b"M" + struct.pack("<H", v))
        elif -2 ** 31 <= v < 2 ** 31:
            self.op(b"J" + struct.pack("<i", v))
        else:
            b = int(v).to_bytes(8, "little", signed=True)
            self.op(b"\x8a\x08" + b)

    def tuple(self, items):
        self.op(b"(")
        for v in items:
            self.int(v)
        self.op(b"t")

    def ordered_dict(self):
        self.glob("collections", "OrderedDict")
        self.op(b")R")
        self.put()

    def tensor(self, storage_type, key, numel, offset, shape, stride):
        self.glob("torch._utils", "_rebuild_tensor_v2")
        self.op(b"(")
        self.op(b"(")  # the persistent id
        self.str("storage")
        self.glob("torch", storage_type)
        self.str(key)
        self.str("cpu")
        self.int(numel)
        self.op(b"tQ")
        self.int(offset)
        self.tuple(shape)
        self.tuple(stride)
        self.op(b"\x89")  # requires_grad False
        self.ordered_dict()  # backward_hooks
        self.op(b"tR")
        self.put()


def _contiguous_strides(shape):
    s, acc = [], 1
    for d in reversed(shape):
        s.append(acc)
        acc *= d
    return list(reversed(s))


def save(path, tensors, dtype="F32", tie=None, pack=False, transposed=(), buffers=None,
         wrap=False, archive=None):
    tie = tie or {}
    buffers = buffers or {}
    storages = []  # (key, dtype, bytes)
    entries = []  # (name, storage_type, key, numel, offset, shape, stride)
    key_of = {}
    packed = bytearray()
    packed_key = "0"
    for name, a in tensors.items():
        a = np.asarray(a, dtype=np.float32)
        shape = list(a.shape)
        if name in tie:
            e = entries[[x[0] for x in entries].index(tie[name])]
            entries.append((name,) + e[1:])
            continue
        stype = STORAGE[dtype][0]
        if name in transposed:  # storage holds a.T contiguous; the tensor views it transposed
            raw, stride = _raw(a.T, dtype), [1, shape[0]]
        else:
            raw, stride = _raw(a, dtype), _contiguous_strides(shape)
        n = int(a.size)
        esize = len(raw) // max(n, 1) if n else 2
        if pack:
            offset = len(packed) // esize
            packed += raw
            entries.append((name, stype, packed_key, None, offset, shape, stride))
        else:
            key = str(len(storages))
            storages.append((key, raw))
            key_of[name] = key
            entries.append((name, stype, key, n, 0, shape, stride))
    if pack:
        storages.append((packed_key, bytes(packed)))
        esize = {"F32": 4, "F16": 2, "BF16": 2}[dtype]
        entries = [e[:3] + (len(packed) // esize,) + e[4:] if e[3] is None else e for e in entries]
    for name, b in buffers.items():
        b = np.asarray(b, dtype="<i8")
        key = str(len(storages) + 1000)
        storages.append((key, b.tobytes()))
        entries.append((name, "LongStorage", key, int(b.size), 0, list(b.shape),
                        _contiguous_strides(list(b.shape))))

    p = _Pickle()
    if wrap:
        p.op(b"}")
        p.put()
        p.op(b"(")
        p.str("epoch")
        p.int(3)
        p.str("state_dict")
    p.ordered_dict()
    p.op(b"(")
    for name, stype, key, numel, offset, shape, stride in entries:
        p.str(name)
        p.tensor(stype, key, numel, offset, shape, stride)
    p.op(b"u")
    # state_dict()'s _metadata attribute, set by BUILD after the items.
    p.op(b"}")
    p.str("_metadata")
    p.ordered_dict()
    p.str("")
    p.op(b"}")
    p.str("version")
    p.int(1)
    p.op(b"sss")
    p.op(b"b")
    if wrap:
        p.op(b"u")
    p.op(b".")

    archive = archive or os.path.splitext(os.path.basename(path))[0]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        def add(name, data, align=64):
            info = zipfile.ZipInfo(archive + "/" + name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            # Pad with an extra field so that the data starts on a 64-byte boundary, as
            # torch.save does (its "FB" field).
            start = z.fp.tell() + 30 + len(info.filename.encode())
            pad = (-(start + 4)) % align
            info.extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad
            z.writestr(info, data)

        add("data.pkl", bytes(p.out))
        add("byteorder", b"little")
        for key, raw in storages:
            add("data/" + key, raw)
        add("version", b"3\n")
    return path


def save_sharded(out_dir, tensors, n_shards, dtype="F32"):
    names = list(tensors)
    per = -(-len(names) // n_shards)
    weight_map = {}
    for i in range(n_shards):
        part = names[i * per:(i + 1) * per]
        fname = "pytorch_model-%05d-of-%05d.bin" % (i + 1, n_shards)
        save(os.path.join(out_dir, fname), {n: tensors[n] for n in part}, dtype)
        for n in part:
            weight_map[n] = fname
    with open(os.path.join(out_dir, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)


def legacy(path):
    """A pre-1.6 torch.save file: pickles back to back after a magic number (only its start)."""
    with open(path, "wb") as f:
        f.write(b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.")
    return path


def hostile(path, module="os", name="system"):
    """A checkpoint whose data.pkl asks to call module.name (what a malicious pickle does)."""
    p = _Pickle()
    p.glob(module, name)
    p.op(b"(")
    p.str("touch " + path + ".pwned")
    p.op(b"tR.")
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", bytes(p.out))
        z.writestr("archive/version", b"3\n")
    return path
