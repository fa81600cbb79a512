#!/usr/bin/env python3
"""Isolation under attack (issue 49): the latency of ordinary 4-token requests alone and beside
one client that keeps sending an expensive constraint, on a tiny random model with GPT-2's
vocabulary and tokenizer (50,257 tokens: masks are walks over a real vocabulary's trie, and the
forward pass costs almost nothing, so the constraint's cost is what shows). Attacks, each as the issue
describes it: a JSON-schema enum of 20,000 strings (200 KB), the regexes `(.{0,1000}){99}` and
`(((.*)*)*)*`, and a GBNF grammar whose states double with every "x". Per scenario: 20 ordinary
requests one after another; the median and the largest latency, the attacker's answers.
Usage: bench/attack_bench.py [BIN]   (default build/release/tokenflow)
"""
import collections
import http.client
import json
import os
import random
import re
import shutil
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
TOKENIZER = os.path.join(SHARED, "tokenizers", "gpt2", "tokenizer.json")


def serve(model):
    p = subprocess.Popen([BIN, "serve", "-m", model, "--tokenizer", TOKENIZER, "--port", "0",
                          "--access-log", "off", "--kv-cache-memory", "32MiB"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = int(re.search(r":(\d+)\s*$", p.stdout.readline()).group(1))
    return p, port


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t = time.perf_counter()
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status, time.perf_counter() - t


def attacks():
    rng = random.Random(1)
    words = ["".join(rng.choices(string.ascii_lowercase, k=8)) for _ in range(20000)]
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 64}
    return {
        "enum of 20,000 strings": ("/v1/chat/completions", dict(chat, response_format={
            "type": "json_schema", "json_schema": {"name": "e", "schema": {"enum": words}}})),
        "regex (.{0,1000}){99}": ("/v1/completions", {"prompt": "Once", "max_tokens": 64,
                                                       "guided_regex": "(.{0,1000}){99}"}),
        "regex (((.*)*)*)*": ("/v1/completions", {"prompt": "Once", "max_tokens": 64,
                                                 "guided_regex": "(((.*)*)*)*"}),
        "GBNF doubling per x": ("/v1/completions", {
            "prompt": "Once", "max_tokens": 64, "temperature": 0,
            "grammar": 'root ::= a\na ::= "x" a p | "x" a q | "x"\np ::= "y"\nq ::= "y"\n',
            "logit_bias": {"87": 100}}),  # GPT-2's "x"
        # The same after 18 fixed x's: past what the compile-time check follows.
        "GBNF doubling after 18 x": ("/v1/completions", {
            "prompt": "Once", "max_tokens": 64, "temperature": 0,
            "grammar": 'root ::= "xxxxxxxxxxxxxxxxxx" a\na ::= "x" a p | "x" a q | "x"\n'
                       'p ::= "y"\nq ::= "y"\n',
            "logit_bias": {"87": 100}}),
    }


def main():
    d = tempfile.mkdtemp(prefix="tf_attack_bench_")
    model = os.path.join(d, "gpt2-tiny")
    subprocess.run([sys.executable, os.path.join(REPO, "bench", "make_bench_model.py"), model,
                    "gpt2-tiny"], check=True)
    proc, port = serve(model)
    normal = {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}
    print("| attacker | ordinary request median ms | largest ms | attacker's answers |")
    print("|---|---|---|---|")
    scenarios = [("none", None)] + list(attacks().items())
    for name, attack in scenarios:
        stop = threading.Event()
        answers = collections.Counter()

        def attacker():
            while not stop.is_set():
                status, t = post(port, *attack)
                answers["%d in %.1f s" % (status, t) if len(answers) < 3 else status] += 1

        th = None
        if attack:
            th = threading.Thread(target=attacker)
            th.start()
            time.sleep(0.5)  # the attack under way
        times = [post(port, "/v1/completions", normal)[1] * 1000 for _ in range(20)]
        stop.set()
        if th:
            th.join()
        print("| %s | %.1f | %.1f | %s |" % (name, statistics.median(times), max(times),
                                            ", ".join("%s x%d" % kv for kv in answers.items())
                                            or "-"))
    proc.terminate()
    proc.wait()
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
