"""The sampling pipeline against an independent numpy implementation of each processor (Hugging
Face / OpenAI semantics, written from their definitions), on random logits with fixed seeds,
including the edge cases (all-equal logits, -inf entries, k larger than the vocab, p = 1, ties);
and chi-square tests that the draws follow the processed distribution.

Env: TF_SAMPLE_LOGITS (tests/tools/sample_logits).
"""

import json
import math
import os
import subprocess
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOOL = os.environ.get("TF_SAMPLE_LOGITS", os.path.join(REPO, "build", "release", "tests", "sample_logits"))
NEG_INF = float("-inf")


def run_tool(cases):
    if not os.path.exists(TOOL):
        raise AssertionError(f"sample_logits not found at {TOOL} (set TF_SAMPLE_LOGITS)")

    def enc(c):
        c = dict(c)
        c["logits"] = ["-inf" if math.isinf(v) else float(v) for v in c["logits"]]
        return json.dumps(c)
    data = "".join(enc(c) + "\n" for c in cases)
    p = subprocess.run([TOOL], input=data, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise AssertionError(p.stderr)
    outs = [json.loads(l) for l in p.stdout.splitlines()]
    for o in outs:
        o["processed"] = np.array([NEG_INF if v == "-inf" else v for v in o["processed"]])
    return outs


# ---------------------------------------------------------------- the reference

def ref_process(logits, params, prompt, output, eos):
    x = np.array(logits, dtype=np.float64)
    if len(output) < params.get("min_tokens", 0):
        for t in list(eos) + params.get("stop_token_ids", []):
            x[t] = NEG_INF
    for seq in params.get("bad_words_ids", []):
        if len(seq) - 1 <= len(output) and (len(seq) == 1 or list(output[len(output) - len(seq) + 1:]) == seq[:-1]):
            x[seq[-1]] = NEG_INF
    n = params.get("no_repeat_ngram_size", 0)
    if n > 0:
        seq = list(prompt) + list(output)
        if len(seq) + 1 >= n:
            tail = seq[len(seq) - n + 1:] if n > 1 else []
            for i in range(len(seq) - n + 1):
                if seq[i:i + n - 1] == tail:
                    x[seq[i + n - 1]] = NEG_INF
    r = params.get("repetition_penalty", 1.0)
    if r != 1.0:
        for t in set(prompt) | set(output):
            x[t] = x[t] / r if x[t] > 0 else x[t] * r
    pres, freq = params.get("presence_penalty", 0.0), params.get("frequency_penalty", 0.0)
    for t in set(output):
        x[t] -= pres + freq * output.count(t)
    for t, b in params.get("logit_bias", {}).items():
        x[int(t)] += b
    temp = params.get("temperature", 1.0)
    greedy = temp == 0 or params.get("top_k", 0) == 1
    if not greedy and temp != 1.0:
        x = x / temp
    return x


def softmax(x):
    m = np.max(x)
    e = np.where(np.isinf(x), 0.0, np.exp(x - m))
    return e / e.sum()


def ref_dist(x, params):
    """Final distribution after top_k, top_p, min_p, typical_p (each over the survivors)."""
    v = len(x)
    if params.get("temperature", 1.0) == 0 or params.get("top_k", 0) == 1:
        d = np.zeros(v)
        d[int(np.argmax(x))] = 1.0
        return d
    keep = ~np.isinf(x)
    order = sorted(range(v), key=lambda i: (-x[i], i))  # best first, lower id on ties
    k = params.get("top_k", 0)
    if 0 < k < v:
        for i in order[k:]:
            keep[i] = False
    p = params.get("top_p", 1.0)
    if p < 1.0:
        probs = softmax(np.where(keep, x, NEG_INF))
        kept = [i for i in order if keep[i]]
        asc = kept[::-1]  # the reference sorts ascending and removes cumsum <= 1 - p
        cum = np.cumsum([probs[i] for i in asc])
        for j, i in enumerate(asc):
            if cum[j] <= 1 - p and j < len(asc) - 1:
                keep[i] = False
    mp = params.get("min_p", 0.0)
    if mp > 0:
        probs = softmax(np.where(keep, x, NEG_INF))
        keep &= probs >= mp * probs.max() * (1 - 1e-12)
    tp = params.get("typical_p", 1.0)
    if tp < 1.0 and keep.sum() > 1:
        probs = softmax(np.where(keep, x, NEG_INF))
        idx = [i for i in range(v) if keep[i]]
        logp = np.log(np.array([probs[i] for i in idx]))
        ent = -np.sum(np.exp(logp) * logp)
        shifted = np.abs(-logp - ent)
        srt = np.argsort(shifted, kind="stable")
        cum = np.cumsum(np.exp(logp[srt]))
        last = min(int(np.sum(cum < tp)), len(idx) - 1)
        thr = shifted[srt[last]]
        for j, i in enumerate(idx):
            if shifted[j] > thr:
                keep[i] = False
    return softmax(np.where(keep, x, NEG_INF))


# ---------------------------------------------------------------- cases

def random_case(seed, vocab=64, **params):
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 2, vocab)
    prompt = [int(t) for t in rng.integers(0, vocab, 6)]
    output = [int(t) for t in rng.integers(0, vocab, 10)]
    return {"params": params, "logits": list(logits), "prompt": prompt, "output": output, "eos": [3]}


CASES = {
    "plain": {},
    "temperature": {"temperature": 0.7},
    "hot": {"temperature": 1.8},
    "greedy": {"temperature": 0.0},
    "top_k": {"top_k": 5},
    "top_k_larger_than_vocab": {"top_k": 1000},
    "top_k_one": {"top_k": 1, "temperature": 0.9},
    "top_p": {"top_p": 0.8},
    "top_p_one": {"top_p": 1.0},
    "top_p_tiny": {"top_p": 1e-6},
    "min_p": {"min_p": 0.1},
    "typical": {"typical_p": 0.7},
    "all_truncations": {"top_k": 20, "top_p": 0.9, "min_p": 0.02, "typical_p": 0.95, "temperature": 0.8},
    "repetition": {"repetition_penalty": 1.3},
    "repetition_below_one": {"repetition_penalty": 0.7},
    "presence_frequency": {"presence_penalty": 0.5, "frequency_penalty": 0.3},
    "negative_penalties": {"presence_penalty": -1.0, "frequency_penalty": -0.5},
    "logit_bias": {"logit_bias": {"7": 5.0, "9": -100.0}},
    "no_repeat_2": {"no_repeat_ngram_size": 2},
    "no_repeat_1": {"no_repeat_ngram_size": 1},
    "bad_words": {"bad_words_ids": [[5], [1, 2], [9, 9, 9]]},
    "min_tokens": {"min_tokens": 20, "stop_token_ids": [11]},
    "everything": {"temperature": 0.9, "top_k": 30, "top_p": 0.95, "repetition_penalty": 1.2,
                   "presence_penalty": 0.2, "frequency_penalty": 0.1, "logit_bias": {"2": 1.5},
                   "no_repeat_ngram_size": 3, "bad_words_ids": [[4]], "min_tokens": 11},
}


class ProcessorTest(unittest.TestCase):
    def check(self, cases):
        outs = run_tool(cases)
        for c, o in zip(cases, outs):
            exp = ref_process(c["logits"], c["params"], c["prompt"], c["output"], c["eos"])
            got = o["processed"]
            self.assertTrue(np.array_equal(np.isinf(exp), np.isinf(got)), f"{c['params']}: masked tokens differ")
            fin = ~np.isinf(exp)
            np.testing.assert_allclose(got[fin], exp[fin], rtol=1e-5, atol=1e-5, err_msg=str(c["params"]))
            d = np.zeros(len(c["logits"]))
            for t, p in o["dist"]:
                d[t] = p
            np.testing.assert_allclose(d, ref_dist(exp, c["params"]), atol=1e-6, err_msg=str(c["params"]))

    def test_each_processor_on_random_logits(self):
        cases = []
        for name, params in CASES.items():
            for seed in range(5):
                cases.append(random_case(seed * 100 + len(name), **params))
        self.check(cases)

    def test_edge_cases(self):
        v = 16
        equal = {"params": {}, "logits": [0.5] * v, "prompt": [], "output": [], "eos": [3]}
        cases = [dict(equal, params=p) for p in (
            {}, {"top_k": 3}, {"top_p": 0.5}, {"min_p": 0.5}, {"typical_p": 0.5}, {"temperature": 0.0},
            {"top_k": 100}, {"top_p": 1.0})]
        ties = [1.0, 3.0, 3.0, 2.0, 3.0, -1.0, 0.0, 2.0] * 2
        cases += [{"params": p, "logits": ties, "prompt": [1, 2], "output": [2], "eos": [3]} for p in (
            {"top_k": 2}, {"top_k": 4}, {"top_p": 0.4}, {"temperature": 0.0}, {"repetition_penalty": 2.0})]
        masked = [NEG_INF, 1.0, NEG_INF, 0.5, 2.0, NEG_INF, -3.0, 0.0]
        cases += [{"params": p, "logits": masked, "prompt": [], "output": [4, 4], "eos": [3]} for p in (
            {}, {"top_k": 6}, {"top_p": 0.9}, {"min_p": 0.2}, {"typical_p": 0.8}, {"frequency_penalty": 2.0},
            {"repetition_penalty": 1.5})]
        self.check(cases)

    def test_top_p_over_large_flat_vocabularies(self):
        # Nuclei larger than the sampler's first sorted prefixes (256 tokens, then 1024, 4096,
        # the whole vocabulary), which it grows until they hold the nucleus.
        cases = []
        for seed, (vocab, p, std) in enumerate(
                [(3000, 0.9, 0.3), (5000, 0.5, 0.2), (20000, 0.95, 0.1), (1500, 0.99, 1.0), (600, 0.7, 0.05)]):
            rng = np.random.default_rng(seed + 77)
            cases.append({"params": {"top_p": p, "temperature": 0.8}, "logits": list(rng.normal(0, std, vocab)),
                          "prompt": [], "output": [], "eos": [3]})
        self.check(cases)

    def test_logprobs_are_log_softmax_of_processed_logits(self):
        cases = [dict(random_case(s, vocab=200, temperature=0.8, repetition_penalty=1.1, top_k=5), **{})
                 for s in range(5)]
        for c in cases:
            c["params"]["logprobs"] = 4
        outs = run_tool(cases)
        for c, o in zip(cases, outs):
            x = ref_process(c["logits"], c["params"], c["prompt"], c["output"], c["eos"])
            lsm = x - (np.max(x) + np.log(np.sum(np.exp(x - np.max(x)))))
            top = sorted(range(len(x)), key=lambda i: (-x[i], i))[:4]
            self.assertEqual([t for t, _ in o["logprob_top"]], top)
            np.testing.assert_allclose([lp for _, lp in o["logprob_top"]], lsm[top], atol=1e-5)
            tok, lp = o["chosen"]
            self.assertAlmostEqual(lp, lsm[tok], places=5)


def chi_square_z(counts, probs, n):
    """Wilson-Hilferty normal approximation of the chi-square statistic (bins with expected < 5
    merged)."""
    exp = probs * n
    big = exp >= 5
    obs = np.append(counts[big], counts[~big].sum())
    ex = np.append(exp[big], exp[~big].sum())
    if ex[-1] < 5:
        obs, ex = obs[:-1], ex[:-1]
    stat = float(np.sum((obs - ex) ** 2 / ex))
    df = len(ex) - 1
    if df <= 0:
        return 0.0
    return ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))


class DistributionTest(unittest.TestCase):
    def test_draws_follow_the_processed_distribution(self):
        n = 20000
        cases = []
        for i, params in enumerate([{}, {"temperature": 0.6}, {"top_k": 8}, {"top_p": 0.7}, {"min_p": 0.05},
                                    {"typical_p": 0.8}, {"temperature": 1.3, "top_k": 20, "top_p": 0.9}]):
            c = random_case(1000 + i, vocab=40, **params)
            c["draws"], c["seed"] = n, 77 + i
            cases.append(c)
        outs = run_tool(cases)
        for c, o in zip(cases, outs):
            d = ref_dist(ref_process(c["logits"], c["params"], c["prompt"], c["output"], c["eos"]), c["params"])
            counts = np.zeros(len(d))
            for t, k in o["counts"]:
                counts[t] = k
            self.assertEqual(counts[d == 0].sum(), 0, f"{c['params']}: drew a truncated token")
            z = chi_square_z(counts, d, n)
            self.assertLess(z, 4.0, f"{c['params']}: chi-square z = {z:.2f}")

    def test_a_wrong_distribution_is_detected(self):
        # The test itself must be able to fail: draws from one distribution against another.
        rng = np.random.default_rng(0)
        p = softmax(rng.normal(0, 1, 20))
        q = softmax(np.log(p) * 1.2)
        counts = np.bincount(rng.choice(20, 20000, p=q), minlength=20).astype(float)
        self.assertGreater(chi_square_z(counts, p, 20000), 4.0)


if __name__ == "__main__":
    unittest.main()
