#!/usr/bin/python3
"""Quality of the KV cache dtypes against the bf16 cache (issue 55): per model, top-1 agreement
over 1,000 teacher-forced positions, the common prefix of free greedy decoding, the largest logit
error, and (stories260K) perplexity on a TinyStories-style text.

Usage: bench/kv_quality.py [DUMP_LOGITS] [TOKENFLOW]

Models: stories260K (trained; llama2.c, and llama.cpp's GGUF copies in F32, Q8_0 and Q4_K_M
weights) and kquant256 (random weights, 2 KV heads of 64; F32 and Q4_K_M weights). For each
model the bf16 cache greedy-decodes 4 x 250 tokens from 4 prompts; every dtype then runs those
same 1,000 positions teacher-forced: "top-1" is how often its argmax equals the bf16 cache's,
"max err" max|logits - bf16's| / max|bf16's|. "greedy" is the mean common prefix when each dtype
decodes freely (of 250). Perplexity: the text below, tokenized by stories260K's tokenizer,
scored by each dtype.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TOOL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "build/release/tests/dump_logits")
BIN = sys.argv[2] if len(sys.argv) > 2 else os.path.join(REPO, "build/release/tokenflow")
SHARED = os.environ.get("TF_SHARED_DIR", os.path.join(REPO, "..", "shared"))
ST = os.path.join(SHARED, "models", "stories260K")
KQ = os.path.join(SHARED, "models", "kquant256")
MODELS = [("stories260K (llama2.c, f32)", os.path.join(ST, "stories260K.bin"), 512),
          ("stories260K GGUF F32", os.path.join(ST, "stories260K.gguf"), 512),
          ("stories260K GGUF Q8_0", os.path.join(ST, "stories260K-Q8_0.gguf"), 512),
          ("stories260K GGUF Q4_K_M", os.path.join(ST, "stories260K-Q4_K_M.gguf"), 512),
          ("kquant256 F32 (random)", os.path.join(KQ, "kquant-F32.gguf"), 2048),
          ("kquant256 Q4_K_M (random)", os.path.join(KQ, "kquant-Q4_K_M.gguf"), 2048)]
BASE, OTHERS = "bf16", ["f32", "f16", "q8_0"]
N = 250
PROMPTS = [[1], [1, 403, 407, 261], [1, 378, 432], [1, 376, 298, 315, 421]]
TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the "
        "park with her friend Ben. One day, they saw a big red ball under a tree. Lily said, "
        "\"Let's play with the ball!\" Ben was happy and they played all day. When the sun went "
        "down, their mom called them home. They were tired but happy. The next day, Lily found a "
        "small bird in the grass. The bird was sad because it could not fly. Lily and Ben gave "
        "the bird some water and a little bread. Soon the bird felt better and flew up into the "
        "sky. Lily waved and smiled. She knew that being kind is always good.")


def run(args):
    return subprocess.run([TOOL] + args, check=True, capture_output=True, text=True).stdout


def greedy(model, prompts, kv):
    out = run(["--model", model, "--prompts", ";".join(",".join(map(str, p)) for p in prompts),
               "--greedy", str(N), "--kv-dtype", kv])
    lines = [ln for ln in out.splitlines() if ln and ln[0].isdigit()]
    return [[int(t) for t in ln.split(",")] for ln in lines]


def logits(model, seqs, kv):
    """Every position's logits of each full sequence (teacher-forced), one batch."""
    with tempfile.TemporaryDirectory() as td:
        path = os.path.join(td, "l.f32")
        run(["--model", model, "--prompts", ";".join(",".join(map(str, s)) for s in seqs),
             "--out", path, "--kv-dtype", kv])
        a = np.fromfile(path, dtype="<f4")
    rows = sum(len(s) for s in seqs)
    return a.reshape(rows, -1).astype(np.float64)


def log_softmax(x):
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def perplexity(model, ids, kv):
    lp = log_softmax(logits(model, [ids], kv))
    return float(np.exp(-np.mean([lp[i, ids[i + 1]] for i in range(len(ids) - 1)])))


def main():
    out = subprocess.run([BIN, "tokenize", "-m", MODELS[0][1], TEXT], capture_output=True,
                         text=True, check=True).stdout
    text_ids = [int(t) for t in out.replace(",", " ").split() if t.lstrip("-").isdigit()]
    print("| model | cache | top-1 agreement with bf16 (1,000 positions) | greedy common prefix "
          "(of %d, mean) | max logit err / max | perplexity |" % N)
    print("|---|---|---|---|---|---|")
    for name, path, _ in MODELS:
        paths = greedy(path, PROMPTS, BASE)
        seqs = [p + t[:N] for p, t in zip(PROMPTS, paths)]
        ref = logits(path, seqs, BASE)
        # The rows that predict the decoded tokens: from each prompt's last position on.
        starts = np.cumsum([0] + [len(s) for s in seqs])
        pick = np.concatenate([np.arange(starts[i] + len(p) - 1, starts[i] + len(p) - 1 + N)
                               for i, p in enumerate(PROMPTS)])
        ppl_base = perplexity(path, text_ids, BASE) if "stories" in name else None
        print("| %s | %s | - | - | - | %s |" % (name, BASE,
                                                 "%.3f" % ppl_base if ppl_base else "-"))
        for kv in OTHERS:
            got = logits(path, seqs, kv)
            top1 = np.mean(got[pick].argmax(axis=1) == ref[pick].argmax(axis=1))
            err = np.abs(got[pick] - ref[pick]).max() / np.abs(ref[pick]).max()
            free = greedy(path, PROMPTS, kv)
            prefix = np.mean([next((i for i, (a, b) in enumerate(zip(r, g)) if a != b),
                                   min(len(r), len(g))) for r, g in zip(paths, free)])
            ppl = "%.3f" % perplexity(path, text_ids, kv) if ppl_base else "-"
            print("| %s | %s | %.1f %% | %.0f | %.2e | %s |" % (name, kv, 100 * top1, prefix, err,
                                                               ppl))


if __name__ == "__main__":
    main()
