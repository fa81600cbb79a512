"""Load time of a PyTorch checkpoint (pytorch_model.bin) against the same weights as safetensors
(issue 53; target: within 1.2x).

For each shape and dtype, the random-weight bench model (bench/make_bench_model.py) is written
once as model.safetensors and once as pytorch_model.bin (tests/reference/torch_io.py: torch.save's
zip layout), each beside the same config.json; then `tokenflow generate` of one token from a
one-token prompt (load, one step; KV cache 64 MiB) runs RUNS times per format, interleaved, the
page cache warm (one untimed run of each first). Prints a markdown table of the medians.

    python3 bench/torch_load_bench.py [RUNS] [SHAPE:DTYPE ...]     (default 5 llama110m:F32 tinyllama:BF16)
"""

import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))

import safetensors_io  # noqa: E402
import torch_io  # noqa: E402

BIN = os.path.join(REPO, "build", "release", "tokenflow")
MODELS = os.path.join(REPO, "build", "bench-models")


def prepare(shape, dtype):
    base = os.path.join(MODELS, shape)
    if not os.path.exists(os.path.join(base, "model.safetensors")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_bench_model.py"), base, shape],
                       check=True)
    st = os.path.join(MODELS, "%s-st-%s" % (shape, dtype.lower()))
    pt = os.path.join(MODELS, "%s-pt-%s" % (shape, dtype.lower()))
    if not (os.path.exists(os.path.join(st, "model.safetensors")) and
            os.path.exists(os.path.join(pt, "pytorch_model.bin"))):
        tensors = safetensors_io.load_dir(base)
        for d in (st, pt):
            os.makedirs(d, exist_ok=True)
            for f in os.listdir(base):
                if not f.endswith(".safetensors") and not f.endswith(".json.tmp"):
                    shutil.copy(os.path.join(base, f), d)
        safetensors_io.save(os.path.join(st, "model.safetensors"), tensors, dtype)
        torch_io.save(os.path.join(pt, "pytorch_model.bin"), tensors, dtype)
        del tensors
    return st, pt


def load_once(model):
    t = time.monotonic()
    subprocess.run([BIN, "generate", "-m", model, "--prompt-ids", "1", "-n", "1",
                    "--kv-cache-memory", "64MiB"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.monotonic() - t


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    cases = sys.argv[2:] or ["llama110m:F32", "tinyllama:BF16"]
    print("| shape | dtype | file MiB | safetensors s | pytorch_model.bin s | .bin / safetensors |")
    print("|---|---|---|---|---|---|")
    for case in cases:
        shape, dtype = case.split(":")
        st, pt = prepare(shape, dtype)
        load_once(st)
        load_once(pt)
        a, b = [], []
        for _ in range(runs):
            a.append(load_once(st))
            b.append(load_once(pt))
        ma, mb = statistics.median(a), statistics.median(b)
        mib = os.path.getsize(os.path.join(pt, "pytorch_model.bin")) / 1048576
        print("| %s | %s | %.0f | %.3f | %.3f | %.2f |" % (shape, dtype, mib, ma, mb, mb / ma))


if __name__ == "__main__":
    main()
