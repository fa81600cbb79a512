"""gpt-oss decode speed against the bandwidth its active weights need (issue 53).

A gpt-oss-20b-shaped GGUF (hidden 2880, 64 query / 8 KV heads of 64, 32 experts of 2880 with 4
per token, MXFP4 experts, BF16 attention and head, sliding layers of 128 beside full ones) with
LAYERS layers and a VOCAB-token vocabulary (the 201,088-token head alone would be most of each
step at a reduced depth), random weights, written as llama.cpp's converter lays gpt-oss out
(tests/reference/test_gguf.py). `tokenflow bench --offline` decodes one sequence and 8 at once
(input 16, output 128), RUNS times, medians. A decode step of one sequence reads the attention
weights, the router, 4 experts' MXFP4 blocks per layer and the head: those bytes over the step's
time are the weight bandwidth it reaches, printed beside `tokenflow bench --roofline`'s read
bandwidth of this machine.

    python3 bench/gpt_oss_bench.py [RUNS] [LAYERS] [VOCAB]     (default 3 4 32000)
"""

import os
import re
import statistics
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))

import gguf_io  # noqa: E402
import safetensors_io  # noqa: E402

BIN = os.path.join(REPO, "build", "release", "tokenflow")
D, HEADS, KV, HD, E, TOPK, INTER = 2880, 64, 8, 64, 32, 4, 2880


def bf16_tensor(tensors, name, a):
    a = np.ascontiguousarray(a, dtype=np.float32)
    bits = safetensors_io.f32_to_bf16_bits(a).astype("<u2")
    tensors.append((name, list(reversed(a.shape)), 30, bits.tobytes()))


def f32_tensor(tensors, name, a):
    a = np.ascontiguousarray(a, dtype=np.float32)
    tensors.append((name, list(reversed(a.shape)), 0, a.tobytes()))


def mxfp4_tensor(tensors, name, rows, k, rng):
    """E experts of rows x k as ggml MXFP4 blocks: scales near 2^-6, random nibbles."""
    g = k // 32
    blocks = rng.integers(0, 256, size=(E, rows, g, 17), dtype=np.uint8)
    blocks[..., 0] = rng.integers(119, 123, size=(E, rows, g), dtype=np.uint8)
    tensors.append((name, [k, rows, E], 39, blocks.tobytes()))


def write(path, layers, vocab):
    rng = np.random.default_rng(0)
    t = []

    def normal(*shape, std=0.02):
        return rng.standard_normal(shape, dtype=np.float32) * std

    bf16_tensor(t, "token_embd.weight", normal(vocab, D))
    f32_tensor(t, "output_norm.weight", np.ones(D))
    bf16_tensor(t, "output.weight", normal(vocab, D))
    for l in range(layers):
        b = "blk.%d." % l
        f32_tensor(t, b + "attn_norm.weight", np.ones(D))
        f32_tensor(t, b + "post_attention_norm.weight", np.ones(D))
        for n, rows in (("q", HEADS * HD), ("k", KV * HD), ("v", KV * HD)):
            bf16_tensor(t, b + "attn_%s.weight" % n, normal(rows, D))
            f32_tensor(t, b + "attn_%s.bias" % n, normal(rows))
        bf16_tensor(t, b + "attn_output.weight", normal(D, HEADS * HD))
        f32_tensor(t, b + "attn_output.bias", normal(D))
        f32_tensor(t, b + "attn_sinks.weight", normal(HEADS, std=1.0))
        f32_tensor(t, b + "ffn_gate_inp.weight", normal(E, D))
        f32_tensor(t, b + "ffn_gate_inp.bias", normal(E))
        mxfp4_tensor(t, b + "ffn_gate_exps.weight", INTER, D, rng)
        mxfp4_tensor(t, b + "ffn_up_exps.weight", INTER, D, rng)
        mxfp4_tensor(t, b + "ffn_down_exps.weight", D, INTER, rng)
        for n, rows in (("gate", INTER), ("up", INTER), ("down", D)):
            f32_tensor(t, b + "ffn_%s_exps.bias" % n, normal(E, rows))
    p = "gpt-oss."
    meta = {"general.architecture": "gpt-oss",
            p + "context_length": gguf_io.U32(131072),
            p + "embedding_length": gguf_io.U32(D),
            p + "feed_forward_length": gguf_io.U32(INTER),
            p + "block_count": gguf_io.U32(layers),
            p + "attention.head_count": gguf_io.U32(HEADS),
            p + "attention.head_count_kv": gguf_io.U32(KV),
            p + "attention.key_length": gguf_io.U32(HD),
            p + "attention.value_length": gguf_io.U32(HD),
            p + "attention.layer_norm_rms_epsilon": gguf_io.F32(1e-5),
            p + "attention.sliding_window": gguf_io.U32(128),
            p + "rope.freq_base": gguf_io.F32(150000.0),
            p + "rope.scaling.type": "yarn",
            p + "rope.scaling.factor": gguf_io.F32(32.0),
            p + "rope.scaling.original_context_length": gguf_io.U32(4096),
            p + "expert_count": gguf_io.U32(E),
            p + "expert_used_count": gguf_io.U32(TOPK),
            p + "expert_feed_forward_length": gguf_io.U32(INTER),
            "tokenizer.ggml.bos_token_id": gguf_io.U32(1),
            "tokenizer.ggml.eos_token_id": gguf_io.U32(2)}
    # A synthetic SentencePiece vocabulary (bench/make_bench_gguf.py's): unk, bos, eos, the 256
    # byte tokens, then pieces.
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    pieces += [("\u2581t%d" if i % 3 == 0 else "t%d") % i for i in range(vocab - len(pieces))]
    meta.update({"tokenizer.ggml.model": "llama",
                 "tokenizer.ggml.tokens": gguf_io.Typed(gguf_io.ARRAY, (gguf_io.STRING, pieces)),
                 "tokenizer.ggml.scores": gguf_io.Typed(
                     gguf_io.ARRAY, (gguf_io.FLOAT32, [-float(i) for i in range(vocab)])),
                 "tokenizer.ggml.token_type": gguf_io.Typed(
                     gguf_io.ARRAY, (gguf_io.INT32, [2, 3, 3] + [6] * 256 + [1] * (vocab - 259)))})
    gguf_io.write_gguf(path + ".tmp", meta, t)
    os.replace(path + ".tmp", path)


def active_bytes(layers, vocab):
    attn = ((HEADS + 2 * KV) * HD * D + D * HEADS * HD) * 2
    experts = TOPK * (2 * INTER * (D // 32) + D * (INTER // 32)) * 17
    router = E * D * 4
    return layers * (attn + experts + router) + vocab * D * 2


def bench(model, concurrency):
    out = subprocess.run([BIN, "bench", "--offline", "-m", model, "--num-prompts",
                          str(max(2, concurrency)), "--concurrency", str(concurrency),
                          "--input-len", "16", "--output-len", "128"],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"^output tok/s\s+(\S+)", out, re.M).group(1))


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    layers = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    vocab = int(sys.argv[3]) if len(sys.argv) > 3 else 32000
    path = os.path.join(REPO, "build", "bench-models", "gpt-oss-20b-%dl-%dv.gguf" % (layers, vocab))
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write(path, layers, vocab)
    one, eight = [], []
    for _ in range(runs):
        one.append(bench(path, 1))
        eight.append(bench(path, 8))
    roof = subprocess.run([BIN, "bench", "--roofline"], capture_output=True, text=True).stdout
    m = re.search(r"read bandwidth\D*([\d.]+)\s*GB/s", roof)
    bw = float(m.group(1)) if m else float("nan")
    a, b = statistics.median(one), statistics.median(eight)
    act = active_bytes(layers, vocab)
    print("| model | file MiB | active MB/token | decode tok/s (1) | runs | weight GB/s | of read bandwidth (%.1f GB/s) | 8 at once tok/s | runs |" % bw)
    print("|---|---|---|---|---|---|---|---|---|")
    print("| gpt-oss-20b shape, %d layers, %d vocab | %d | %.0f | %.1f | %s | %.1f | %.2f | %.1f | %s |" % (
        layers, vocab, os.path.getsize(path) / 1048576, act / 1e6, a,
        ", ".join("%.1f" % x for x in one), act * a / 1e9, act * a / 1e9 / bw, b,
        ", ".join("%.1f" % x for x in eight)))


if __name__ == "__main__":
    main()
