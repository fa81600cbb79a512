"""Many LoRA adapters over one base (issue 54): throughput of 32 concurrent sequences spread over
8 different rank-16 adapters against 32 sequences on the base alone, one server, same run; the
time to load an adapter at run time; the memory each loaded adapter holds.

The base is TinyLlama-1.1B's shape (bench/make_bench_model.py tinyllama, random weights) served
as DTYPE (bf16 by default) with Llama 2's tokenizer; each adapter is a random PEFT adapter of
rank 16 (lora_alpha 32) on all seven projections (q, k, v, o, gate, up, down) of every layer,
as f32 safetensors (PEFT's usual file). Adapters are loaded through vLLM's
`POST /v1/load_lora_adapter` (timed: the server reads the files and converts them before it
answers) and the bytes each holds are read from `tokenflow_lora_adapter_bytes`.

Each run sends 32 completions at once (a 16-token prompt of random ids, 64 output tokens,
ignore_eos) and times the whole: output tokens / wall seconds. "base" names the base model for
all 32; "8 adapters" names adapter i % 8 for request i, so every step mixes 8 adapter groups.
Runs alternate, RUNS each (default 3); medians and the ratio adapters / base.

    python3 bench/lora_bench.py [RUNS] [DTYPE]
"""

import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))

import safetensors_io  # noqa: E402

BIN = os.environ.get("TOKENFLOW_BIN", os.path.join(REPO, "build", "release", "tokenflow"))
SHARED = os.environ.get("TF_SHARED_DIR", os.path.join(REPO, "..", "shared"))
MODEL = os.path.join(REPO, "build", "bench-models", "tinyllama")
ADAPTERS = os.path.join(REPO, "build", "bench-models", "tinyllama-loras")
D, LAYERS, Q, KV, FFN = 2048, 22, 2048, 256, 5632
RANK, ALPHA, N_ADAPTERS, SEQS, PROMPT, OUTPUT = 16, 32.0, 8, 32, 16, 64
SHAPES = {  # module: (out, in)
    "self_attn.q_proj": (Q, D), "self_attn.k_proj": (KV, D), "self_attn.v_proj": (KV, D),
    "self_attn.o_proj": (D, Q), "mlp.gate_proj": (FFN, D), "mlp.up_proj": (FFN, D),
    "mlp.down_proj": (D, FFN)}


def write_adapter(path, seed):
    rng = np.random.default_rng(seed)
    t = {}
    for layer in range(LAYERS):
        for mod, (out, inn) in SHAPES.items():
            stem = "base_model.model.model.layers.%d.%s" % (layer, mod)
            t[stem + ".lora_A.weight"] = rng.standard_normal((RANK, inn), dtype=np.float32) * 0.01
            t[stem + ".lora_B.weight"] = rng.standard_normal((out, RANK), dtype=np.float32) * 0.01
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": RANK, "lora_alpha": ALPHA, "use_rslora": False,
                   "target_modules": sorted(m.split(".")[1] for m in SHAPES), "bias": "none",
                   "task_type": "CAUSAL_LM", "base_model_name_or_path": "tinyllama-shaped"}, f)
    safetensors_io.save(os.path.join(path, "adapter_model.safetensors"), t, "F32")


def post(port, path, body, timeout=3600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError("%s: %d %s" % (path, r.status, data[:300]))
    return json.loads(data) if data.startswith(b"{") else data


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    return text


def one_run(port, names, rng):
    """32 completions at once, request i on names[i % len(names)]: output tok/s."""
    prompts = [rng.integers(3, 32000, size=PROMPT).tolist() for _ in range(SEQS)]
    done = [0] * SEQS
    errors = []

    def go(i):
        try:
            r = post(port, "/v1/completions",
                     {"model": names[i % len(names)], "prompt": prompts[i], "max_tokens": OUTPUT,
                      "ignore_eos": True, "temperature": 0})
            done[i] = r["usage"]["completion_tokens"]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(str(e))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(SEQS)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(errors[0])
    return sum(done) / wall


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    dtype = sys.argv[2] if len(sys.argv) > 2 else "bf16"
    if not os.path.exists(os.path.join(MODEL, "config.json")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_bench_model.py"), MODEL,
                        "tinyllama"], check=True)
    paths = [os.path.join(ADAPTERS, "a%d" % i) for i in range(N_ADAPTERS)]
    for i, p in enumerate(paths):
        if not os.path.exists(os.path.join(p, "adapter_model.safetensors")):
            write_adapter(p, 100 + i)
    file_bytes = os.path.getsize(os.path.join(paths[0], "adapter_model.safetensors"))
    proc = subprocess.Popen(
        [BIN, "serve", "--model", MODEL, "--tokenizer",
         os.path.join(SHARED, "tokenizers", "llama2", "tokenizer.model"), "--dtype", dtype,
         "--port", "0", "--kv-cache-memory", "1GiB", "--model-root", ADAPTERS],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        m = re.search(r"http://127\.0\.0\.1:(\d+)", proc.stdout.readline())
        if not m:
            raise RuntimeError("the server did not start")
        port = int(m.group(1))
        base = post(port, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 1})["model"]
        loads = []
        for i, p in enumerate(paths):
            t0 = time.perf_counter()
            post(port, "/v1/load_lora_adapter", {"lora_name": "a%d" % i, "lora_path": p})
            loads.append(time.perf_counter() - t0)
        held = [float(v) for v in re.findall(r"^tokenflow_lora_adapter_bytes\{[^}]*\} (\S+)$",
                                             metrics(port), re.M)]
        names = {"base": [base], "8 adapters": ["a%d" % i for i in range(N_ADAPTERS)]}
        rng = np.random.default_rng(0)
        one_run(port, names["8 adapters"], rng)  # warm-up: pages in weights and adapters
        tps = {k: [] for k in names}
        for _ in range(runs):
            for k, n in names.items():
                tps[k].append(one_run(port, n, rng))
    finally:
        proc.terminate()
        proc.wait()
    print("LoRA adapters: TinyLlama-1.1B shape (%s), %d sequences x %d output tokens, "
          "%d rank-%d adapters on q,k,v,o,gate,up,down; %d runs, medians" %
          (dtype, SEQS, OUTPUT, N_ADAPTERS, RANK, runs))
    b = statistics.median(tps["base"])
    for k, v in tps.items():
        med = statistics.median(v)
        print("  %-11s %7.2f tok/s  (%s)  %.3fx" % (k, med, " ".join("%.2f" % x for x in v),
                                                 med / b))
    print("  load (POST /v1/load_lora_adapter): median %.3f s (min %.3f, max %.3f)" %
          (statistics.median(loads), min(loads), max(loads)))
    print("  adapter file %.1f MB; held in memory (tokenflow_lora_adapter_bytes): %s" %
          (file_bytes / 1e6, ", ".join("%.1f MB" % (x / 1e6) for x in held) or "-"))


if __name__ == "__main__":
    main()
