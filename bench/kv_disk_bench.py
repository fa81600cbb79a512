"""The prefix cache on disk (issue 55, `serve --kv-cache-dir`): time to first token of a request
whose 4,096-token prefix another process wrote to the directory, against recomputing that prefix
and against finding it in the RAM prefix cache, on TinyLlama-1.1B's shape.

The model is bench/make_bench_model.py's tinyllama (random weights) with its context raised to
8,192 (a copy of its config.json beside a link to its weights in build/bench-models/
tinyllama-8k), served with --dtype bf16, a bf16 KV cache and 2 threads. Each run takes a new
random 4,096-token prefix (token ids) and times `max_tokens: 1` completions (TTFT as the client
sees it, HTTP included) of prefix + 16 other ids:
- recompute: a fresh server, nothing cached anywhere (every token computed);
- RAM hit: the same server again (the prefix in its RAM prefix cache; 16 tokens computed);
- disk, warm: the server stopped (a graceful stop writes every block) and started again: the
  prefix is read from the directory (the files in the OS page cache, as after a restart on the
  same host);
- disk, cold: stopped and started once more after posix_fadvise(DONTNEED) on every file, so its
  blocks come from the device.
Medians of RUNS runs (default 3); ratios to recompute.

    python3 bench/kv_disk_bench.py [RUNS]
"""

import glob
import http.client
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BIN = os.environ.get("TOKENFLOW_BIN", os.path.join(REPO, "build", "release", "tokenflow"))
BASE = os.path.join(REPO, "build", "bench-models", "tinyllama")
MODEL = os.path.join(REPO, "build", "bench-models", "tinyllama-8k")
PREFIX, SUFFIX = 4096, 16


def make_model():
    if not os.path.exists(os.path.join(BASE, "model.safetensors")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_bench_model.py"), BASE,
                        "tinyllama"], check=True)
    os.makedirs(MODEL, exist_ok=True)
    with open(os.path.join(BASE, "config.json")) as f:
        config = json.load(f)
    config["max_position_embeddings"] = 8192
    with open(os.path.join(MODEL, "config.json"), "w") as f:
        json.dump(config, f)
    link = os.path.join(MODEL, "model.safetensors")
    if not os.path.exists(link):
        os.symlink(os.path.join(BASE, "model.safetensors"), link)


def start(kv_dir):
    proc = subprocess.Popen(
        [BIN, "--log-level", "warn", "serve", "--model", MODEL, "--dtype", "bf16",
         "--kv-cache-dtype", "bf16", "--kv-cache-memory", "2GiB", "--threads", "2",
         "--kv-cache-dir", kv_dir, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.search(r"http://127\.0\.0\.1:(\d+)", proc.stdout.readline())
    if not m:
        proc.kill()
        raise RuntimeError("the server did not start")
    return proc, int(m.group(1))


def stop(proc):
    proc.terminate()
    proc.wait(timeout=600)


def ttft(port, ids):
    """Seconds until the one-token answer is in: the time to first token."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions",
              json.dumps({"model": "tinyllama-8k", "prompt": ids, "max_tokens": 1,
                          "temperature": 0}), {"Content-Type": "application/json"})
    r = c.getresponse()
    body = r.read()
    elapsed = time.perf_counter() - t0
    if r.status != 200:
        raise RuntimeError(body.decode())
    return elapsed


def stats(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/v1/admin/stats")
    return json.loads(c.getresponse().read())["models"]["tinyllama-8k"]


def drop_page_cache(kv_dir):
    for path in glob.glob(os.path.join(kv_dir, "??", "*.kv")):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    make_model()
    kv_dir = tempfile.mkdtemp(prefix="tf_kv_disk_bench_")
    rng = random.Random(55)
    times = {"recompute": [], "RAM hit": [], "disk, warm": [], "disk, cold": []}
    hits = []
    try:
        for _ in range(runs):
            prefix = [rng.randrange(100, 31000) for _ in range(PREFIX)]
            ask = lambda: prefix + [rng.randrange(100, 31000) for _ in range(SUFFIX)]  # noqa: E731
            proc, port = start(kv_dir)
            times["recompute"].append(ttft(port, ask()))
            times["RAM hit"].append(ttft(port, ask()))
            stop(proc)
            proc, port = start(kv_dir)
            times["disk, warm"].append(ttft(port, ask()))
            hits.append(stats(port)["kv_disk_hit_blocks"])
            stop(proc)
            drop_page_cache(kv_dir)
            proc, port = start(kv_dir)
            times["disk, cold"].append(ttft(port, ask()))
            stop(proc)
    finally:
        shutil.rmtree(kv_dir, ignore_errors=True)
    base = statistics.median(times["recompute"])
    print("| TTFT of a 4,096-token prefix + 16 | median s | runs | ratio to recompute |")
    print("|---|---|---|---|")
    for name, t in times.items():
        m = statistics.median(t)
        print("| %s | %.3f | %s | %.4f |" % (name, m, " ".join("%.3f" % x for x in t), m / base))
    print("\nblocks read from disk per restart: %s (of %d)" % (hits, PREFIX // 16))


if __name__ == "__main__":
    main()
