"""Writes a random-weight Llama GGUF of a real model's shape in one ggml tensor type, for
benchmarks of the block kernels (issue 20): every matrix in TYPE (q4_k_m: llama.cpp's mix, Q4_K
with Q6_K for attn_v / ffn_down of the layers llama.cpp gives more bits and for the output),
norms F32. The blocks are random bytes with scales chosen so that weights have a std of about
0.02; the text such a model writes is meaningless, the speed is that of a real file.

    python3 bench/make_bench_gguf.py OUT.gguf SHAPE TYPE
    SHAPE: llama110m | tinyllama | tinyllama-32k | olmoe-mini | olmoe-mini-dense
                                      TYPE: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k
                                            q4_k q5_k q6_k iq4_nl iq4_xs q4_k_m
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import gguf_io as io  # noqa: E402
from make_bench_model import SHAPES as _HF_SHAPES  # noqa: E402

# A mixture of experts of OLMoE-1B-7B's form scaled down to half its width (64 experts, 8 per
# token, q/k norms over the whole projections; 1.7B parameters, 0.37B active per token), and the
# dense Llama of the same active size (its MLP as wide as the 8 chosen experts together).
SHAPES = dict(_HF_SHAPES)
SHAPES["olmoe-mini"] = dict(arch="olmoe", hidden=1024, layers=16, heads=16, kv=16, ffn=512,
                            experts=64, used=8, vocab=32000, ctx=2048)
SHAPES["olmoe-mini-dense"] = dict(arch="llama", hidden=1024, layers=16, heads=16, kv=16,
                                  ffn=8 * 512, vocab=32000, ctx=2048)

# ggml type id, values per block, bytes per block, [(f16 field offset, value)] per block.
TYPES = {
    "f32": (0, 1, 4, []),
    "f16": (1, 1, 2, []),
    "bf16": (30, 1, 2, []),
    "q8_0": (8, 32, 34, [(0, 2.7e-4)]),
    "q4_0": (2, 32, 18, [(0, 4.3e-3)]),
    "q4_1": (3, 32, 20, [(0, 4.3e-3), (2, -3.4e-2)]),
    "q5_0": (6, 32, 22, [(0, 2.2e-3)]),
    "q5_1": (7, 32, 24, [(0, 2.2e-3), (2, -3.4e-2)]),
    "q2_k": (10, 256, 84, [(80, 2.3e-3), (82, 3.4e-3)]),
    "q3_k": (11, 256, 110, [(108, 4.8e-4)]),
    "q4_k": (12, 256, 144, [(0, 1.4e-4), (2, 1.0e-3)]),
    "q5_k": (13, 256, 176, [(0, 7.0e-5), (2, 1.0e-3)]),
    "q6_k": (14, 256, 210, [(208, 1.5e-5)]),
    "iq4_nl": (20, 32, 18, [(0, 3.0e-4)]),
    "iq4_xs": (23, 256, 136, [(0, 1.7e-5)]),
}


def tensor(rng, type_name, rows, cols):
    gtype, bs, bb, fields = TYPES[type_name]
    if type_name == "f32":
        data = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).tobytes()
    elif type_name in ("f16", "bf16"):
        w = rng.standard_normal((rows, cols), dtype=np.float32) * 0.02
        data = (w.astype(np.float16) if type_name == "f16" else
                (w.view(np.uint32) >> 16).astype(np.uint16)).tobytes()
    else:
        assert cols % bs == 0, (type_name, cols)
        blocks = rng.integers(0, 256, size=(rows * cols // bs, bb), dtype=np.uint8)
        for off, v in fields:
            blocks[:, off:off + 2] = np.frombuffer(np.float16(v).tobytes(), np.uint8)
        data = blocks.tobytes()
    return ([cols, rows], gtype, data)


def main():
    out, shape, type_name = sys.argv[1], sys.argv[2], sys.argv[3]
    s = SHAPES[shape]
    arch = s["arch"]
    assert arch in ("llama", "olmoe")
    E = s.get("experts", 0)
    rng = np.random.default_rng(0)
    d, f, v, n = s["hidden"], s["ffn"], s["vocab"], s["layers"]
    hd = d // s["heads"]
    kvd = s["kv"] * hd
    mix = type_name == "q4_k_m"
    base = "q4_k" if mix else type_name

    def more_bits(i):  # llama.cpp's use_more_bits for attn_v / ffn_down in Q4_K_M
        return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2

    ones = np.ones(d, np.float32).tobytes()
    tensors = [("token_embd.weight",) + tensor(rng, base, v, d)]
    for i in range(n):
        p = f"blk.{i}."
        big = "q6_k" if mix and more_bits(i) else base
        tensors += [
            (p + "attn_norm.weight", [d], 0, ones),
            (p + "attn_q.weight",) + tensor(rng, base, d, d),
            (p + "attn_k.weight",) + tensor(rng, base, kvd, d),
            (p + "attn_v.weight",) + tensor(rng, big, kvd, d),
            (p + "attn_output.weight",) + tensor(rng, base, d, d),
            (p + "ffn_norm.weight", [d], 0, ones),
        ]
        if E:  # OLMoE: q/k norms over the projections, an F32 router (as llama.cpp keeps it),
            # the experts stacked [E, rows, cols]
            tensors += [(p + "attn_q_norm.weight", [d], 0, ones),
                        (p + "attn_k_norm.weight", [kvd], 0, np.ones(kvd, np.float32).tobytes()),
                        (p + "ffn_gate_inp.weight",) + tensor(rng, "f32", E, d)]
            for name, rows, cols, t in (("gate", f, d, base), ("up", f, d, base),
                                        ("down", d, f, big)):
                ne, g, data = tensor(rng, t, E * rows, cols)
                tensors.append((p + f"ffn_{name}_exps.weight", [cols, rows, E], g, data))
        else:
            tensors += [
                (p + "ffn_gate.weight",) + tensor(rng, base, f, d),
                (p + "ffn_up.weight",) + tensor(rng, base, f, d),
                (p + "ffn_down.weight",) + tensor(rng, big, d, f),
            ]
    tensors.append(("output_norm.weight", [d], 0, ones))
    if mix:
        tensors.append(("output.weight",) + tensor(rng, "q6_k", v, d))
    a = arch + "."
    meta = {"general.architecture": arch, "general.name": f"{shape}-{type_name}",
            a + "context_length": io.U32(s["ctx"]), a + "embedding_length": io.U32(d),
            a + "block_count": io.U32(n), a + "feed_forward_length": io.U32(f),
            a + "attention.head_count": io.U32(s["heads"]),
            a + "attention.head_count_kv": io.U32(s["kv"]),
            a + "attention.layer_norm_rms_epsilon": io.F32(1e-5),
            a + "rope.freq_base": io.F32(10000.0),
            "tokenizer.ggml.bos_token_id": io.U32(1), "tokenizer.ggml.eos_token_id": io.U32(2)}
    if E:
        meta.update({a + "expert_count": io.U32(E), a + "expert_used_count": io.U32(s["used"])})
    # A synthetic SentencePiece vocabulary (as ../shared/models/kquant256's): unk, bos, eos, the
    # 256 byte tokens, then pieces.
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    pieces += [("\u2581t%d" if i % 3 == 0 else "t%d") % i for i in range(v - len(pieces))]
    types = [2, 3, 3] + [6] * 256 + [1] * (v - 259)
    meta.update({"tokenizer.ggml.model": "llama",
                 "tokenizer.ggml.tokens": io.Typed(io.ARRAY, (io.STRING, pieces)),
                 "tokenizer.ggml.scores": io.Typed(io.ARRAY, (io.FLOAT32, [-float(i) for i in range(v)])),
                 "tokenizer.ggml.token_type": io.Typed(io.ARRAY, (io.INT32, types))})
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".tmp", "wb") as fh:
        fh.write(io.gguf_bytes(meta, tensors))
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
