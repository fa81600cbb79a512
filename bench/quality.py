#!/usr/bin/python3
"""Quality of the weight dtypes against f32 (issue 7): greedy-token agreement over 256 tokens
and the mean KL divergence of next-token distributions, on stories260K (trained weights).

Usage: bench/quality.py [DUMP_LOGITS] [MODEL]
  DUMP_LOGITS  build/release/tests/dump_logits (the test tool)
  MODEL        ../shared/models/stories260K/stories260K.bin

For each prompt: f32 greedy-decodes 256 tokens; each dtype greedy-decodes too (agreement: the
common prefix, and the fraction of the 256 positions with the same token); then each dtype is
run teacher-forced along the f32 tokens and KL(f32 || dtype) is averaged over those positions.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

TOOL = sys.argv[1] if len(sys.argv) > 1 else "build/release/tests/dump_logits"
MODEL = sys.argv[2] if len(sys.argv) > 2 else "../shared/models/stories260K/stories260K.bin"
N = 256
DTYPES = ["bf16", "f16", "int8", "q4"]
# BOS + a few story openings in stories260K's vocabulary (llama2.c's 512-token tokenizer).
PROMPTS = [[1], [1, 403, 407, 261], [1, 378, 432], [1, 403, 407, 261, 378, 432, 383, 286, 261],
           [1, 376, 298, 315, 421]]


def run(args):
    return subprocess.run([TOOL] + args, check=True, capture_output=True, text=True).stdout


def greedy(prompt, dtype):
    out = run(["--model", MODEL, "--prompts", ",".join(map(str, prompt)), "--greedy", str(N),
               "--dtype", dtype])
    lines = [ln for ln in out.splitlines() if ln and ln[0].isdigit()]
    return [int(t) for t in lines[0].split(",")]


def logits(prompt, decode, dtype):
    with tempfile.TemporaryDirectory() as td:
        path = os.path.join(td, "l.f32")
        run(["--model", MODEL, "--prompts", ",".join(map(str, prompt)), "--decode",
             ",".join(map(str, decode)), "--out", path, "--dtype", dtype])
        a = np.fromfile(path, dtype="<f4")
    v = a.size // (len(prompt) + len(decode))
    # The rows that predict the generated tokens: the prompt's last, then every decode row but
    # the last token's.
    return a.reshape(-1, v)[len(prompt) - 1:len(prompt) - 1 + N].astype(np.float64)


def log_softmax(x):
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def main():
    print("| dtype | common greedy prefix (of %d, mean) | same token at position (%%) | mean KL(f32 || dtype) |" % N)
    print("|---|---|---|---|")
    ref_tokens = [greedy(p, "f32") for p in PROMPTS]
    ref_logp = [log_softmax(logits(p, t[:N], "f32")) for p, t in zip(PROMPTS, ref_tokens)]
    for dtype in DTYPES:
        prefix, same, kl = [], [], []
        for p, ref, lp in zip(PROMPTS, ref_tokens, ref_logp):
            got = greedy(p, dtype)
            k = next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), min(len(ref), len(got)))
            prefix.append(k)
            same.append(np.mean([a == b for a, b in zip(ref, got)]))
            lq = log_softmax(logits(p, ref[:N], dtype))
            kl.append(np.mean(np.sum(np.exp(lp) * (lp - lq), axis=1)))
        print("| %s | %.0f | %.1f | %.5f |" % (dtype, np.mean(prefix), 100 * np.mean(same), np.mean(kl)))


if __name__ == "__main__":
    main()
