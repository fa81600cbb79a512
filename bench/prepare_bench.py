#!/usr/bin/env python3
"""Preparing requests (issue 18): how long a prompt too long for the context takes to be refused,
and how /healthz answers meanwhile. Two servers on stories260K: its own llama2.c tokenizer (a
bound on bytes per id: too-long prompts are refused before tokenizing) and GPT-2's tokenizer
with an NFC normalizer (no bound: every prompt is tokenized, on the preparation pool). Medians
of 5 runs. Usage: bench/prepare_bench.py [BIN]   (default build/release/tokenflow)
"""
import http.client
import json
import os
import random
import re
import statistics
import string
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "build", "release", "tokenflow")
SHARED = os.path.join(REPO, "..", "shared")
MODEL = os.path.join(SHARED, "models", "stories260K", "stories260K.bin")


def serve(*extra):
    p = subprocess.Popen([BIN, "serve", "-m", MODEL, "--port", "0", "--access-log", "off",
                          "--max-body-bytes", "16777216", "--kv-cache-memory", "32MiB", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = int(re.search(r":(\d+)\s*$", p.stdout.readline()).group(1))
    return p, port


def post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    return r.status, time.perf_counter() - t


def healthz(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t = time.perf_counter()
    c.request("GET", "/healthz")
    c.getresponse().read()
    return time.perf_counter() - t


def text(nbytes, seed):
    rng = random.Random(seed)
    return "".join(rng.choices(string.ascii_lowercase + " ", k=nbytes))


def main():
    d = tempfile.mkdtemp(prefix="tf_prepare_bench_")
    with open(os.path.join(SHARED, "tokenizers", "gpt2", "tokenizer.json")) as f:
        tok = json.load(f)
    tok["normalizer"] = {"type": "NFC"}
    nfc = os.path.join(d, "tokenizer.json")
    with open(nfc, "w") as f:
        json.dump(tok, f)
    servers = {"llama2.c tokenizer (bound)": serve(), "GPT-2 + NFC (no bound)":
               serve("--tokenizer", nfc)}
    print("| server | prompt | status | time to answer, median ms | /healthz during, median ms |")
    print("|---|---|---|---|---|")
    for name, (proc, port) in servers.items():
        idle = statistics.median(healthz(port) for _ in range(20)) * 1000
        print("| %s | (idle) | | | %.2f |" % (name, idle))
        for size in (10_000, 20_000, 30_000, 1 << 20, 7 << 20):
            times, during, status = [], [], None
            for run in range(5):
                body = {"prompt": text(size, run), "max_tokens": 1}
                result = {}
                th = threading.Thread(target=lambda: result.update(r=post(port, body)))
                th.start()
                during.append(healthz(port))
                th.join()
                status, t = result["r"]
                times.append(t)
            print("| %s | %s | %d | %.1f | %.2f |" % (
                name, "%d KB" % (size // 1000) if size < 1 << 20 else "%d MiB" % (size >> 20),
                status, statistics.median(times) * 1000, statistics.median(during) * 1000))
    for proc, _ in servers.values():
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
