#!/usr/bin/env python3
"""Gated DeltaNet (issue 53) against a dense model of the same active size.

Two random-weight BF16 checkpoints of about the same bytes per token (LAYERS layers, hidden 2048,
vocabulary 32,000):

  * hybrid: a Qwen3.5-shaped text model (Qwen3_5ForCausalLM): three Gated DeltaNet layers (16 key
    heads of 128, 32 value heads of 128, convolution of 4) to one gated attention layer (16 heads
    of 256, 2 KV heads, partial rotary 0.25), dense SwiGLU MLPs of 6,144;
  * dense: Qwen3 (every layer attention: 16 heads of 128, 8 KV heads) with MLPs of 9,216, which
    makes its layers as heavy as the hybrid's on average.

`tokenflow bench --offline` (2 threads, weights as stored: bf16) measures, RUNS times
interleaved, medians: prefill tok/s of one 1,024-token prompt (prompt tokens over its TTFT),
decode tok/s of one sequence (1 / ITL p50), and output tok/s of 32 concurrent sequences (64-token
prompts, 128 tokens each). The Gated DeltaNet's two forms are timed apart too (TOKENFLOW_GDN_FORM:
the recurrent form over the whole prompt against the chunkwise one).

Usage: bench/gated_deltanet_bench.py [RUNS] [LAYERS]   (default 3 8; TOKENFLOW_BIN)
"""

import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
import make_checkpoints  # noqa: E402

BIN = os.environ.get("TOKENFLOW_BIN", os.path.join(REPO, "build", "release", "tokenflow"))
VOCAB, D = 32000, 2048


def hybrid_config(layers):
    def cfg(dt):
        c = make_checkpoints.KINDS["qwen3_5"](dt)
        c.update(hidden_size=D, intermediate_size=6144, num_hidden_layers=layers,
                 layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                              for i in range(layers)],
                 linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                 linear_value_head_dim=128, num_attention_heads=16, num_key_value_heads=2,
                 head_dim=256, vocab_size=VOCAB, max_position_embeddings=8192)
        return c
    return cfg


def dense_config(layers):
    def cfg(dt):
        c = make_checkpoints.KINDS["qwen3"](dt)
        c.update(hidden_size=D, intermediate_size=9216, num_hidden_layers=layers,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=VOCAB,
                 max_position_embeddings=8192, tie_word_embeddings=False)
        return c
    return cfg


def checkpoint(name, cfg):
    path = os.path.join(REPO, "build", "bench-models", name)
    if not os.path.exists(os.path.join(path, "config.json")):
        make_checkpoints.KINDS[name] = cfg
        make_checkpoints.write_checkpoint(path, name, dtype="BF16", seed=3)
    return path


def bench(model, concurrency, input_len, output_len, form=None):
    env = dict(os.environ)
    if form:
        env["TOKENFLOW_GDN_FORM"] = form
    out = subprocess.run([BIN, "bench", "--offline", "-m", model, "--num-prompts",
                          str(max(1, concurrency)), "--concurrency", str(concurrency),
                          "--input-len", str(input_len), "--output-len", str(output_len),
                          "--threads", "2"],
                         capture_output=True, text=True, check=True, env=env).stdout
    ttft = float(re.search(r"^ttft ms\s+p50 (\S+)", out, re.M).group(1))
    itl = float(re.search(r"^itl ms\s+p50 (\S+)", out, re.M).group(1))
    tps = float(re.search(r"^output tok/s\s+(\S+)", out, re.M).group(1))
    return ttft, itl, tps


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    layers = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    models = {"hybrid": checkpoint("bench_qwen3_5_%dl" % layers, hybrid_config(layers)),
              "dense": checkpoint("bench_qwen3_dense_%dl" % layers, dense_config(layers))}
    rows = {k: {"prefill": [], "decode": [], "32": []} for k in
            ("hybrid", "hybrid recurrent-only", "dense")}
    for _ in range(runs):
        for name, model, form in (("hybrid", models["hybrid"], None),
                                  ("hybrid recurrent-only", models["hybrid"], "recurrent"),
                                  ("dense", models["dense"], None)):
            ttft, _, _ = bench(model, 1, 1024, 2, form)
            _, itl, _ = bench(model, 1, 16, 128, form)
            _, _, tps = bench(model, 32, 64, 128, form)
            rows[name]["prefill"].append(1024 / (ttft / 1e3))
            rows[name]["decode"].append(1e3 / itl)
            rows[name]["32"].append(tps)
            print(name, rows[name], flush=True)
    med = {k: {m: statistics.median(v) for m, v in r.items()} for k, r in rows.items()}
    print("| model | prefill tok/s (1,024) | decode tok/s (1) | out tok/s (32) | runs |")
    print("|---|---|---|---|---|")
    for k, r in rows.items():
        print("| %s | %.1f | %.1f | %.1f | %s |" % (
            k, med[k]["prefill"], med[k]["decode"], med[k]["32"],
            "; ".join(", ".join("%.1f" % x for x in v) for v in r.values())))
    for m in ("prefill", "decode", "32"):
        print("hybrid / dense %s: %.2f" % (m, med["hybrid"][m] / med["dense"][m]))


if __name__ == "__main__":
    main()
