#!/usr/bin/env python3
"""One speed per weight type, whatever the file (issue 56 item 2): the same random-weight 1.1B
Llama (bench/make_bench_model.py tinyllama) decoded in bf16 from every file format tokenflow
reads, the step timed at 1 and 4 sequences (ITL p50 of `tokenflow bench --offline`, a 16-token
prompt, 64 tokens out), runs interleaved across the formats, medians of RUNS. Target: every
format within 5 % of the others.

The files, all of the same weights:
  safetensors BF16        model.safetensors in bf16 (tests/reference/safetensors_io.py)
  safetensors F32 -> bf16 the f32 bench model with --dtype bf16 (converted at load)
  pytorch_model.bin BF16  torch.save's zip layout (tests/reference/torch_io.py)
  GGUF BF16               `tokenflow convert --dtype bf16` of the f32 model (Llama 2's tokenizer)
  tf_model.h5 F32 -> bf16 Keras HDF5 in TFMistralForCausalLM's names (tests/reference/tf_h5_io.py;
                          transformers has no TF Llama, Mistral is Llama's architecture here)

    python3 bench/format_bench.py [RUNS]        (default 3; BIN=path picks the binary)
"""

import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
sys.path.insert(0, HERE)

import safetensors_io  # noqa: E402
from torch_load_bench import prepare  # noqa: E402

BIN = os.environ.get("BIN", os.path.join(REPO, "build", "release", "tokenflow"))
MODELS = os.path.join(REPO, "build", "bench-models")
SHAPE = "tinyllama"


def tf_h5_model(base):
    out = os.path.join(MODELS, SHAPE + "-tf-f32")
    if os.path.exists(os.path.join(out, "tf_model.h5")):
        return out
    import tf_h5_io
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(base, "config.json")) as f:
        cfg = json.load(f)
    cfg["architectures"] = ["MistralForCausalLM"]
    cfg["model_type"] = "mistral"
    cfg["sliding_window"] = None
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    w = safetensors_io.load_dir(base)
    tf_h5_io.save_tf_h5(os.path.join(out, "tf_model.h5"), tf_h5_io.mistral_tf_weights(w))
    return out


def gguf_model(base):
    out = os.path.join(MODELS, SHAPE + "-convert-bf16.gguf")
    if not os.path.exists(out):
        # Llama 2's llama2.c vocabulary (../shared/tokenizers: 32,000 tokens, as the shape): the
        # GGUF loader wants a vocabulary, the benchmark only ids.
        tok = os.path.join(REPO, "..", "shared", "tokenizers", "llama2", "tokenizer.bin")
        subprocess.run([BIN, "convert", base, out, "--dtype", "bf16", "--tokenizer", tok],
                       check=True, stdout=subprocess.DEVNULL)
    return out


def itl(model, dtype, c):
    args = [BIN, "bench", "--offline", "-m", model, "--kv-cache-dtype", "bf16", "--num-prompts",
            str(c), "--concurrency", str(c), "--input-len", "16", "--output-len", "64",
            "--threads", "2"]
    if dtype:
        args += ["--dtype", dtype]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return float(re.search(r"^itl ms\s+p50 ([0-9.]+)", out, re.M).group(1))


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    base = os.path.join(MODELS, SHAPE)
    st, pt = prepare(SHAPE, "BF16")
    formats = [
        ("safetensors BF16", st, "bf16"),
        ("safetensors F32 -> bf16", base, "bf16"),
        ("pytorch_model.bin BF16", pt, "bf16"),
        ("GGUF BF16", gguf_model(base), "bf16"),
        ("tf_model.h5 F32 -> bf16", tf_h5_model(base), "bf16"),
    ]
    times = {(name, c): [] for name, _, _ in formats for c in (1, 4)}
    for _ in range(runs):
        for name, model, dtype in formats:
            for c in (1, 4):
                times[(name, c)].append(itl(model, dtype, c))
    med = {k: statistics.median(v) for k, v in times.items()}
    best1 = min(med[(n, 1)] for n, _, _ in formats)
    best4 = min(med[(n, 4)] for n, _, _ in formats)
    print("| file | 1 sequence ITL ms | / fastest | 4 sequences ITL ms | / fastest |")
    print("|---|---|---|---|---|")
    for name, _, _ in formats:
        print("| %s | %.2f | %.3f | %.2f | %.3f |" % (name, med[(name, 1)], med[(name, 1)] / best1,
                                                     med[(name, 4)], med[(name, 4)] / best4))


if __name__ == "__main__":
    main()
