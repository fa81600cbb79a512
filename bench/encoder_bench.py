#!/usr/bin/env python3
"""Issue 52's encoders, measured (random weights of the real shapes; 2 threads):

  * BERT-base-shaped (12 layers, hidden 768, 12 heads, MLP 3072, vocab 30522): documents/s
    embedding DOCS documents of 128 tokens (`tokenflow embed --input-file`, CLS pooling) one
    at a time (--batch 1) and batched (--batch 32); f32 and bf16 weights.
  * A cross-encoder reranker of the same shape (BertForSequenceClassification, one label): the
    latency of scoring 1 query x 100 documents (pairs of 16 + 112 tokens), batched.

RUNS runs each, interleaved, medians; the timing is embed's own (the forward passes, not the
model's load). With LLAMA_EMBEDDING=path/to/llama-embedding, the same GGUF file (tokenflow's
convert of the checkpoint) through llama.cpp in the same run, for the ratio.
Usage: bench/encoder_bench.py [RUNS] [DOCS] (TOKENFLOW_BIN, default build/release/tokenflow)
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

BIN = os.environ.get("TOKENFLOW_BIN", os.path.join(HERE, "..", "build", "release", "tokenflow"))
BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, max_position_embeddings=512)


def checkpoint(tmp, kind, over):
    key = "bench_" + kind
    base = make_checkpoints.KINDS[kind]
    make_checkpoints.KINDS[key] = lambda dt: make_checkpoints._scaled(base(dt), **over)
    path = os.path.join(tmp, key)
    make_checkpoints.write_checkpoint(path, key, seed=1)
    return path


def run(model, path, batch, dtype):
    r = subprocess.run([BIN, "embed", "-m", model, "--input-file", path, "--batch", str(batch),
                        "--dtype", dtype, "--threads", "2"], capture_output=True, text=True,
                       timeout=3600)
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    m = re.search(r"embedded (\d+) inputs \((\d+) tokens\) in ([\d.]+) s", r.stderr)
    return int(m.group(1)), float(m.group(3))


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    docs = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    with tempfile.TemporaryDirectory(prefix="tf_encbench_") as tmp:
        bert = checkpoint(tmp, "bert", BASE)
        ranker = checkpoint(tmp, "bert_cls", dict(BASE, id2label={"0": "LABEL_0"},
                                                  label2id={"LABEL_0": 0}))
        path = os.path.join(tmp, "docs.jsonl")
        with open(path, "w") as f:
            for i in range(docs):
                f.write(json.dumps({"ids": [101] + [1000 + (i * 131 + j * 17) % 29000
                                                    for j in range(126)] + [102]}) + "\n")
        pairs = os.path.join(tmp, "pairs.jsonl")
        with open(pairs, "w") as f:
            query = [101] + [2000 + j for j in range(14)] + [102]
            for i in range(100):
                f.write(json.dumps({"ids": query + [3000 + (i * 37 + j) % 20000
                                                    for j in range(111)] + [102]}) + "\n")
        results = {}
        for rep in range(runs):
            for dtype in ("f32", "bf16"):
                for batch in (1, 32):
                    n, s = run(bert, path, batch, dtype)
                    results.setdefault(("embed", dtype, batch), []).append(n / s)
                n, s = run(ranker, pairs, 100, dtype)
                results.setdefault(("rerank", dtype, 100), []).append(s * 1000.0)
        print("| model | weights | batch | median | runs |")
        print("|---|---|---|---|---|")
        for (what, dtype, batch), v in results.items():
            unit = "docs/s" if what == "embed" else "ms for 1 x 100"
            print("| BERT-base-shaped %s | %s | %d | %.1f %s | %s |" % (
                what, dtype, batch, statistics.median(v), unit, ", ".join("%.1f" % x for x in v)))


if __name__ == "__main__":
    main()
