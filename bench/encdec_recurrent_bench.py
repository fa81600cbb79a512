#!/usr/bin/env python3
"""Issue 51's new model kinds, measured (random weights of the real shapes; 2 threads):

  * T5-small- and T5-base-shaped encoder-decoders (6+6 and 12+12 layers, d_model 512 / 768,
    relu, tied, vocab 32128): output tok/s of a batch job (`tokenflow generate --input-file`,
    greedy, prompts of 128 encoder tokens, 64 decoder tokens each) at 1 and at 32 concurrent
    requests; the 32's encoders run in the same steps as the others' decoders.
  * Mamba-130m-shaped (24 layers, d_model 768, state 16, expand 2, vocab 50280): decode tok/s
    at batch 1 (`tokenflow generate -v`, 256 tokens) against the bandwidth bound (the weights'
    bytes read once per token at the roofline's measured read bandwidth: `tokenflow bench
    --roofline`), and output tok/s at 32 concurrent sequences.

Weights f32 and bf16 (--dtype). RUNS runs each, interleaved, medians.
Usage: bench/encdec_recurrent_bench.py [RUNS] (TOKENFLOW_BIN, default build/release/tokenflow)
"""

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import make_checkpoints  # noqa: E402
from test_t5 import write_vocab  # noqa: E402

BIN = os.environ.get("TOKENFLOW_BIN", os.path.join(HERE, "..", "build", "release", "tokenflow"))
T5_SHAPES = {
    "t5-small-shaped": dict(d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=6,
                            num_heads=8, relative_attention_num_buckets=32,
                            relative_attention_max_distance=128, vocab_size=32128),
    "t5-base-shaped": dict(d_model=768, d_kv=64, d_ff=3072, num_layers=12,
                           num_decoder_layers=12, num_heads=12,
                           relative_attention_num_buckets=32, relative_attention_max_distance=128,
                           vocab_size=32128),
}
MAMBA_SHAPE = dict(hidden_size=768, num_hidden_layers=24, state_size=16, expand=2,
                   intermediate_size=1536, vocab_size=50280)


def checkpoint(tmp, kind, name, over):
    key = "bench_" + name.replace("-", "_")
    base = make_checkpoints.KINDS[kind]
    make_checkpoints.KINDS[key] = lambda dt: make_checkpoints._scaled(base(dt), **over)
    path = os.path.join(tmp, key)
    make_checkpoints.write_checkpoint(path, key, seed=1)
    write_vocab(os.path.join(path, "tokenizer.bin"), over["vocab_size"])
    return path


def batch(model, tmp, n, prompt_len, max_tokens, dtype):
    inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
    with open(inp, "w") as f:
        for i in range(n):
            f.write(json.dumps({"prompt": [3 + (i * 31 + j * 7) % 30000 for j in range(prompt_len)],
                                "max_tokens": max_tokens, "temperature": 0,
                                "ignore_eos": True}) + "\n")
    if os.path.exists(out):
        os.remove(out)
    r = subprocess.run([BIN, "generate", "-m", model, "--input-file", inp, "--output-file", out,
                        "--concurrency", str(n), "--threads", "2", "--dtype", dtype, "-v"],
                       capture_output=True, text=True, check=True)
    return float(re.search(r"batch: \d+ generated tokens in [\d.]+ s: ([\d.]+) tok/s",
                           r.stderr).group(1))


def decode_one(model, dtype):
    r = subprocess.run([BIN, "generate", "-m", model, "--prompt-ids", "5,6,7,8", "-n", "256",
                        "-t", "0", "--ignore-eos", "--threads", "2", "--dtype", dtype, "-v",
                        "--no-echo"], capture_output=True, text=True, check=True)
    return float(re.search(r"decode: ([\d.]+) tok/s", r.stderr).group(1))


def read_bandwidth():
    r = subprocess.run([BIN, "bench", "--roofline", "--threads", "2"], capture_output=True,
                       text=True)
    m = re.search(r"([\d.]+) GB/s", r.stdout + r.stderr)
    return float(m.group(1)) if m else None


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    med = statistics.median
    with tempfile.TemporaryDirectory(prefix="tf_encdec_bench_") as tmp:
        print("| model | weights | 1 request tok/s | 32 requests tok/s | 32 / 1 |")
        print("|---|---|---|---|---|")
        for name, over in T5_SHAPES.items():
            model = checkpoint(tmp, "t5", name, over)
            for dtype in ("f32", "bf16"):
                one, many = [], []
                for _ in range(runs):
                    one.append(batch(model, tmp, 1, 128, 64, dtype))
                    many.append(batch(model, tmp, 32, 128, 64, dtype))
                print("| %s | %s | %.1f | %.1f | x%.1f |" % (name, dtype, med(one), med(many),
                                                             med(many) / med(one)))
            subprocess.run(["rm", "-rf", model])
        model = checkpoint(tmp, "mamba", "mamba-130m-shaped", MAMBA_SHAPE)
        params = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model)
                     if f.endswith(".safetensors")) // 4
        bw = read_bandwidth()
        print()
        print("| model | weights | batch-1 decode tok/s | bandwidth bound tok/s | fraction | "
              "32 sequences tok/s |")
        print("|---|---|---|---|---|---|")
        for dtype, size in (("f32", 4), ("bf16", 2)):
            one, many = [], []
            for _ in range(runs):
                one.append(decode_one(model, dtype))
                many.append(batch(model, tmp, 32, 16, 128, dtype))
            bound = bw * 1e9 / (params * size) if bw else float("nan")
            print("| mamba-130m-shaped (%dM params) | %s | %.1f | %.1f (at %.0f GB/s) | %.2f | %.1f |"
                  % (params // 1000000, dtype, med(one), bound, bw or 0, med(one) / bound,
                     med(many)))


if __name__ == "__main__":
    main()
