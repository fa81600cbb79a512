"""A GGUF writer for tests, written from the format's description (llama.cpp's docs/gguf.md):
header ("GGUF", version, tensor count, metadata count), typed metadata, tensor infos (name, dims
innermost first, ggml type, offset), then the data section at the alignment, each tensor at a
multiple of it. Independent of tokenflow's C++ reader, so that a test can build files, hostile
ones included, and check what the reader makes of them.

    write_gguf(path, metadata={"general.architecture": "llama", "llama.block_count": U32(2)},
               tensors=[("w", [4, 2], 0, float32_bytes)])
"""
import struct

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, \
    FLOAT64 = range(13)
_SCALAR = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
           FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}


class Typed:
    """A metadata value with an explicit GGUF type (ARRAY: value is (item_type, [items]))."""

    def __init__(self, type_, value):
        self.type, self.value = type_, value


def U32(v):
    return Typed(UINT32, v)


def F32(v):
    return Typed(FLOAT32, v)


def _string(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def _value(type_, v):
    if type_ == STRING:
        return _string(v)
    if type_ == ARRAY:
        item_type, items = v
        out = struct.pack("<IQ", item_type, len(items))
        for x in items:
            out += _value(item_type, x)
        return out
    return struct.pack(_SCALAR[type_], v)


def _typed(v):
    if isinstance(v, Typed):
        return v.type, v.value
    if isinstance(v, bool):
        return BOOL, v
    if isinstance(v, int):
        return (INT32 if -2**31 <= v < 2**31 else INT64), v
    if isinstance(v, float):
        return FLOAT32, v
    if isinstance(v, (str, bytes)):
        return STRING, v
    raise TypeError("give list values a type: Typed(ARRAY, (item_type, items))")


def gguf_bytes(metadata, tensors, version=3, alignment=32):
    """metadata: {key: value}; tensors: [(name, dims innermost first, ggml type, data bytes)]."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(metadata)))
    for key, v in metadata.items():
        t, value = _typed(v)
        out += _string(key) + struct.pack("<I", t) + _value(t, value)
    offset = 0
    offsets = []
    for name, dims, ggml_type, data in tensors:
        offsets.append(offset)
        out += _string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ggml_type, offset)
        offset += (len(data) + alignment - 1) // alignment * alignment
    out += b"\0" * (-len(out) % alignment)
    for (_, _, _, data), at in zip(tensors, offsets):
        out += data
        out += b"\0" * (-len(data) % alignment)
    return bytes(out)


def read_gguf(path):
    """(metadata {key: value}, tensors {name: (dims innermost first, ggml type, bytes)}) of a
    GGUF file; arrays as lists."""
    with open(path, "rb") as f:
        b = f.read()
    assert b[:4] == b"GGUF", path
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", b, 4)
    pos = 24

    def string():
        nonlocal pos
        n, = struct.unpack_from("<Q", b, pos)
        s = b[pos + 8:pos + 8 + n]
        pos += 8 + n
        return s.decode("utf-8", "replace")

    def value(t):
        nonlocal pos
        if t == STRING:
            return string()
        if t == ARRAY:
            item, n = struct.unpack_from("<IQ", b, pos)
            pos += 12
            return [value(item) for _ in range(n)]
        fmt = _SCALAR[t]
        v, = struct.unpack_from(fmt, b, pos)
        pos += struct.calcsize(fmt)
        return v

    meta = {}
    for _ in range(n_kv):
        key = string()
        t, = struct.unpack_from("<I", b, pos)
        pos += 4
        meta[key] = value(t)
    infos = []
    for _ in range(n_tensors):
        name = string()
        nd, = struct.unpack_from("<I", b, pos)
        dims = list(struct.unpack_from("<%dQ" % nd, b, pos + 4))
        ggml_type, offset = struct.unpack_from("<IQ", b, pos + 4 + 8 * nd)
        pos += 4 + 8 * nd + 12
        infos.append((name, dims, ggml_type, offset))
    align = meta.get("general.alignment", 32)
    data = (pos + align - 1) // align * align
    ends = sorted(data + off for _, _, _, off in infos) + [len(b)]
    tensors = {}
    for name, dims, ggml_type, off in infos:
        start = data + off
        end = min(e for e in ends if e > start)  # up to the next tensor (or the end)
        tensors[name] = (dims, ggml_type, b[start:end])
    return meta, tensors


def write_gguf(path, metadata, tensors, **kw):
    with open(path, "wb") as f:
        f.write(gguf_bytes(metadata, tensors, **kw))


if __name__ == "__main__":
    # The fuzz seed: a little of everything the reader parses.
    import sys
    meta = {
        "general.architecture": "llama",
        "general.alignment": U32(32),
        "llama.block_count": U32(1),
        "llama.rope.freq_base": F32(10000.0),
        "general.flag": True,
        "general.big": Typed(UINT64, 2**40),
        "tokenizer.ggml.tokens": Typed(ARRAY, (STRING, ["<unk>", "a", "b"])),
        "tokenizer.ggml.scores": Typed(ARRAY, (FLOAT32, [0.0, -1.0, -2.0])),
        "nested": Typed(ARRAY, (ARRAY, [(INT32, [1, 2]), (INT32, [3])])),
    }
    f32 = struct.pack("<8f", *range(8))
    q8 = struct.pack("<e", 0.5) + bytes(range(32))  # one Q8_0 block
    write_gguf(sys.argv[1], meta, [("a.weight", [4, 2], 0, f32), ("b.weight", [32], 8, q8)])


def sentencepiece_unigram_metadata(model_path, vocab_size):
    """A SentencePiece Unigram .model's vocabulary as llama.cpp's T5 converter writes it
    (convert_hf_to_gguf's T5Model.set_vocab): [PAD<id>] placeholders (unused, score -10000) over
    vocab_size ids, the pieces with their scores and SentencePiece types over them, the
    character map as an array of bytes, the whitespace flags; no BOS, EOS appended."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb
    proto = pb.ModelProto()
    with open(model_path, "rb") as f:
        proto.ParseFromString(f.read())
    sp = spm.SentencePieceProcessor(model_file=model_path)
    tokens = ["[PAD%d]" % i for i in range(vocab_size)]
    scores = [-10000.0] * vocab_size
    types = [5] * vocab_size
    for i in range(sp.get_piece_size()):
        tokens[i] = sp.id_to_piece(i)
        scores[i] = sp.get_score(i)
        types[i] = (2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 5 if sp.is_unused(i)
                    else 6 if sp.is_byte(i) else 1)
    return {"tokenizer.ggml.model": "t5", "tokenizer.ggml.pre": "default",
            "tokenizer.ggml.tokens": Typed(ARRAY, (STRING, tokens)),
            "tokenizer.ggml.scores": Typed(ARRAY, (FLOAT32, scores)),
            "tokenizer.ggml.token_type": Typed(ARRAY, (INT32, types)),
            "tokenizer.ggml.add_space_prefix": proto.normalizer_spec.add_dummy_prefix,
            "tokenizer.ggml.remove_extra_whitespaces": proto.normalizer_spec.remove_extra_whitespaces,
            "tokenizer.ggml.precompiled_charsmap":
                Typed(ARRAY, (UINT8, list(proto.normalizer_spec.precompiled_charsmap))),
            "tokenizer.ggml.eos_token_id": U32(1), "tokenizer.ggml.unknown_token_id": U32(2),
            "tokenizer.ggml.padding_token_id": U32(0),
            "tokenizer.ggml.add_bos_token": False, "tokenizer.ggml.add_eos_token": True}
