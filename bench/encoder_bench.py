#!/usr/bin/env python3
"""Issue 52's encoders, measured (random weights of the real shapes; 2 threads):

  * BERT-base-shaped (12 layers, hidden 768, 12 heads, MLP 3072, vocab 30522): documents/s
    embedding DOCS documents of 128 tokens (`tokenflow embed --input-file`, CLS pooling) one
    at a time (--batch 1) and batched (--batch 32); f32 and bf16 weights.
  * A cross-encoder reranker of the same shape (BertForSequenceClassification, one label): the
    latency of scoring 1 query x 100 documents (pairs of 16 + 112 tokens), batched.

RUNS runs each, interleaved, medians; the timing is embed's own (the forward passes, not the
model's load). With LLAMA_EMBEDDING=path/to/llama-embedding (built by hand from llama.cpp's
sources), the same GGUF file (the checkpoint as llama.cpp's converter writes it, f32, with its
WordPiece vocabulary) and the same texts through both, batch 1 and 16, for the ratio against
llama.cpp's own prompt-eval time (ONLY_GGUF=1: that comparison alone).
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


def llama_run(llama, gguf, texts, batch):
    """llama.cpp's llama-embedding over the texts (one per line), `batch` documents of 128
    tokens per llama_decode; its own prompt-eval time (the forward passes) in seconds."""
    ctx = 128 * batch
    r = subprocess.run([llama, "-m", gguf, "-f", texts, "-t", "2", "-tb", "2", "-c", str(ctx),
                        "-b", str(ctx), "-ub", str(ctx), "-np", str(batch), "--pooling", "cls",
                        "--embd-output-format", "json"],
                       capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(r.stderr[-3000:])
    m = re.search(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", r.stderr)
    if not m:
        raise SystemExit("no prompt eval time in llama-embedding's output:\n" + r.stderr[-3000:])
    return float(m.group(1)) / 1000.0


def same_gguf_comparison(tmp, bert, runs, docs, llama):
    """tokenflow and llama.cpp on one GGUF file (the checkpoint as llama.cpp's converter writes
    it, f32, with a WordPiece vocabulary), the same texts (128 tokens each), CLS pooling."""
    import test_encoders  # tests/reference: the GGUF writer of the encoder tests
    vocab = test_encoders.write_bert_vocab(os.path.join(bert, "vocab.txt"), BASE["vocab_size"])
    gguf = os.path.join(tmp, "bert-base.gguf")
    test_encoders.bert_to_gguf(bert, gguf, vocab=vocab, pooling_type=2)
    lines = [" ".join("w%d" % ((i * 131 + j * 17) % 29000) for j in range(126)) for i in range(docs)]
    texts = os.path.join(tmp, "docs.txt")
    with open(texts, "w") as f:
        f.write("\n".join(lines))
    jsonl = os.path.join(tmp, "docs_text.jsonl")
    with open(jsonl, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    results = {}
    for rep in range(runs):
        for batch in (1, 16):
            n, s = run(gguf, jsonl, batch, "f32")
            results.setdefault(("tokenflow", batch), []).append(n / s)
            results.setdefault(("llama.cpp", batch), []).append(docs / llama_run(llama, gguf, texts, batch))
    print()
    print("| same GGUF (f32) | batch | tokenflow docs/s | llama.cpp docs/s | ratio |")
    print("|---|---|---|---|---|")
    for batch in (1, 16):
        t, l = (statistics.median(results[(who, batch)]) for who in ("tokenflow", "llama.cpp"))
        print("| BERT-base-shaped embed | %d | %.2f (%s) | %.2f (%s) | %.2fx |" % (
            batch, t, ", ".join("%.2f" % x for x in results[("tokenflow", batch)]), l,
            ", ".join("%.2f" % x for x in results[("llama.cpp", batch)]), t / l))


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
        only_gguf = os.environ.get("ONLY_GGUF") == "1"  # the llama.cpp comparison alone
        for rep in range(0 if only_gguf else runs):
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
        if os.environ.get("LLAMA_EMBEDDING"):
            same_gguf_comparison(tmp, bert, runs, docs, os.environ["LLAMA_EMBEDDING"])


if __name__ == "__main__":
    main()
