#!/usr/bin/env python3
"""Sliding windows that free memory (issue 51 item 4): how many 4k-token sequences decode at
once in a fixed --kv-cache-memory for models whose sliding-window layers sit beside global ones,
with their own cache groups (the default) and with one group for every layer
(--disable-hybrid-kv-cache-manager, what tokenflow did before).

Random-weight checkpoints with real layer patterns and windows (tests/reference/make_checkpoints,
small widths: the KV bytes per token scale with them, the ratios do not): Gemma-2-2B's 26
alternating layers (with a window of 2048: a 4k sequence is twice it, as an 8k one is twice Gemma
2's 4096), Gemma-3-1B's 26 layers (every sixth global) with its window of 512, Gemma-3-4B's 34
with 1024. A batch job (`tokenflow generate --input-file`, greedy, 2 threads) of REQUESTS
prompts of 4032 tokens + 64 generated, all submitted at once; the engine reports the most
sequences running after any step, the preemptions, its blocks and their size. Also: the wall
time of the job. Runs RUNS times each, interleaved; medians.

Usage: bench/sliding_window_bench.py [RUNS] (TOKENFLOW_BIN, default build/release/tokenflow)
"""

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import make_checkpoints  # noqa: E402
from test_engine_archs import write_vocab  # noqa: E402

BIN = os.environ.get("TOKENFLOW_BIN", os.path.join(HERE, "..", "build", "release", "tokenflow"))
REQUESTS = 24
PROMPT, GENERATED = 4032, 64
KV_MEMORY = "160MiB"

SHAPES = {
    # name: (base kind, overrides). Gemma 2's own window (4096) covers a 4k-token sequence whole:
    # nothing to release there (measured: the same 7 sequences either way); at its 8k context a
    # sequence is twice its window, which the window of 2048 below reproduces at 4k.
    "gemma2-2b-shaped, window 2048 (1:1)": ("gemma2", {
        "num_hidden_layers": 26, "sliding_window": 2048, "max_position_embeddings": 8192}),
    "gemma3-1b-shaped (window 512, 5:1)": ("gemma3", {
        "num_hidden_layers": 26, "sliding_window": 512, "sliding_window_pattern": 6,
        "max_position_embeddings": 8192}),
    "gemma3-4b-shaped (34 layers, window 1024, 5:1)": ("gemma3", {
        "num_hidden_layers": 34, "sliding_window": 1024, "sliding_window_pattern": 6,
        "max_position_embeddings": 8192}),
}


def checkpoint(tmp, name, kind, over):
    key = "bench_" + re.sub(r"\W+", "_", name)
    base = make_checkpoints.KINDS[kind]
    make_checkpoints.KINDS[key] = lambda dt: make_checkpoints._scaled(base(dt), **over)
    path = os.path.join(tmp, key)
    if not os.path.exists(os.path.join(path, "config.json")):
        make_checkpoints.write_checkpoint(path, key, seed=3)
        write_vocab(os.path.join(path, "tokenizer.bin"), make_checkpoints.KINDS[key]("F32")["vocab_size"])
    return path


def run(model, tmp, grouped):
    inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
    with open(inp, "w") as f:
        for i in range(REQUESTS):
            prompt = [300 + (i * 7 + j) % 600 for j in range(PROMPT)]
            f.write(json.dumps({"prompt": prompt, "max_tokens": GENERATED, "temperature": 0,
                                "ignore_eos": True}) + "\n")
    if os.path.exists(out):
        os.remove(out)
    cmd = [BIN, "generate", "-m", model, "--input-file", inp, "--output-file", out,
           "--concurrency", str(REQUESTS), "--kv-cache-memory", KV_MEMORY, "--threads", "2",
           "-v"] + ([] if grouped else ["--disable-hybrid-kv-cache-manager"])
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.monotonic() - t0
    m = re.search(r"engine: (\d+) preemptions, .* (\d+) blocks released behind the sliding "
                  r"window, at most (\d+) sequences running; (\d+) KV blocks of (\d+) bytes in "
                  r"(.*)", r.stderr)
    return {"preemptions": int(m.group(1)), "released": int(m.group(2)),
            "peak": int(m.group(3)), "blocks": int(m.group(4)), "block_bytes": int(m.group(5)),
            "layout": m.group(6), "wall": wall}


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory(prefix="tf_sliding_bench_") as tmp:
        print("| model | cache groups | KV blocks (bytes each) | most sequences running | "
              "preemptions | blocks released | job wall s (median of %d) |" % runs)
        print("|---|---|---|---|---|---|---|")
        for name, (kind, over) in SHAPES.items():
            model = checkpoint(tmp, name, kind, over)
            results = {True: [], False: []}
            for _ in range(runs):
                for grouped in (False, True):
                    results[grouped].append(run(model, tmp, grouped))
            base = None
            for grouped in (False, True):
                rs = results[grouped]
                peak = statistics.median(r["peak"] for r in rs)
                wall = statistics.median(r["wall"] for r in rs)
                if base is None:
                    base = (peak, wall)
                print("| %s | %s | %d (%d) | %g (x%.2f) | %g | %g | %.1f (x%.2f) |" % (
                    name, rs[0]["layout"], rs[0]["blocks"], rs[0]["block_bytes"], peak,
                    peak / base[0], statistics.median(r["preemptions"] for r in rs),
                    statistics.median(r["released"] for r in rs), wall, wall / base[1]))


if __name__ == "__main__":
    main()
