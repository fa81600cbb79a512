"""The routes around generation (issue 26): /tokenize and /detokenize in vLLM's shapes,
/v1/embeddings in OpenAI's, prompt logprobs (completions' echo with logprobs, vLLM's
prompt_logprobs), and the utilization, out-of-memory and per-key metrics.

Embeddings and prompt logprobs are checked against stories260K's weights run by the numpy
reference (tests/reference/np_model.py: final hidden states, log_softmax of the logits), not
against tokenflow's own output."""

import base64
import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from test_server import STORIES_BIN, Client, ServerCase, sse_events, start_server, stop_server

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("TF_REFERENCE_DIR",
                                  os.path.join(os.path.dirname(HERE), "reference")))
import np_model  # noqa: E402

REF = None


def ref():
    global REF
    if REF is None:
        REF = np_model.load_llama2c(STORIES_BIN)
    return REF


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def metric(text, name, **labels):
    """The value of the sample of name whose labels include labels (None: no such sample)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        m = re.match(r'^([^{ ]+)(?:\{(.*)\})? (\S+)$', line)
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if m.group(1) == name and all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return None


class TokenizeTest(ServerCase):
    def tokenize(self, body, status=200):
        st, out, text, _ = self.c.post("/tokenize", body)
        self.assertEqual(st, status, text)
        return out

    def test_prompt_round_trip_and_counts_match_generation(self):
        text = "Once upon a time, there was a little girl"
        out = self.tokenize({"prompt": text, "return_token_strs": True})
        self.assertEqual(out["count"], len(out["tokens"]))
        self.assertEqual(out["max_model_len"], 512)
        self.assertEqual(out["tokens"][0], 1)  # BOS: add_special_tokens defaults to true
        self.assertEqual("".join(out["token_strs"]).strip(), text)
        no_bos = self.tokenize({"prompt": text, "add_special_tokens": False})
        self.assertEqual(no_bos["tokens"], out["tokens"][1:])
        # The count is what a completion of the same prompt is billed.
        _, comp, _, _ = self.c.post("/v1/completions", {"prompt": text, "max_tokens": 1})
        self.assertEqual(comp["usage"]["prompt_tokens"], out["count"])
        st, back, raw, _ = self.c.post("/detokenize", {"tokens": out["tokens"]})
        self.assertEqual(st, 200, raw)
        self.assertEqual(back["prompt"].strip(), text)
        st, back, _, _ = self.c.post("/v1/detokenize", {"tokens": out["tokens"][1:]})
        self.assertEqual(back["prompt"].strip(), text)

    def test_messages_count_as_chat_bills_them(self):
        messages = [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Tell me a story"}]
        out = self.tokenize({"messages": messages})
        _, chat, raw, _ = self.c.post("/v1/chat/completions",
                                      {"messages": messages, "max_tokens": 1})
        self.assertEqual(chat["usage"]["prompt_tokens"], out["count"], raw)

    def test_bad_requests(self):
        for body, param in (({"prompt": "a", "messages": []}, "prompt"),
                            ({}, "prompt"),
                            ({"prompt": 5}, "prompt"),
                            ({"prompt": "a", "bogus": 1}, "bogus"),
                            ({"messages": "hi"}, "messages"),
                            ({"prompt": "a", "return_token_strs": "yes"}, "return_token_strs")):
            out = self.tokenize(body, 400)
            self.assertEqual(out["error"]["param"], param, body)
        st, out, _, _ = self.c.post("/tokenize", {"prompt": "a", "model": "nope"})
        self.assertEqual(st, 404)
        for tokens in ([1, -1], [1, 512], ["a"], 7):
            st, out, raw, _ = self.c.post("/detokenize", {"tokens": tokens})
            self.assertEqual(st, 400, raw)
            self.assertEqual(out["error"]["param"], "tokens")
        st, _, _, _ = self.c.get("/tokenize")
        self.assertEqual(st, 405)


class ChatTemplateFlagsTest(unittest.TestCase):
    """--chat-template and --chat-template-kwargs (vLLM's and llama-server's flags): the
    operator's template over the model's own, built once at load, its variables under the
    request's; a bad one ends the command before it serves."""

    def chat_text(self, port, body):
        c = Client(port)
        st, out, text, _ = c.post("/tokenize", body)
        self.assertEqual(st, 200, text)
        st, back, text, _ = c.post("/detokenize", {"tokens": out["tokens"]})
        self.assertEqual(st, 200, text)
        return back["prompt"].strip()

    def test_a_template_and_its_variables_replace_the_models_own(self):
        template = ("{% for m in messages %}<{{ m.role }}|{{ tone }}>{{ m.content }}"
                    "{% endfor %}{% if add_generation_prompt %}<assistant|{{ tone }}>{% endif %}")
        proc, port = start_server("--chat-template", template,
                                  "--chat-template-kwargs", '{"tone": "calm"}')
        try:
            msgs = [{"role": "user", "content": "Hello"}]
            self.assertEqual(self.chat_text(port, {"messages": msgs}),
                             "<user|calm>Hello<assistant|calm>")
            # The request's own variables win over the server's.
            self.assertEqual(
                self.chat_text(port, {"messages": msgs, "add_generation_prompt": False,
                                      "chat_template_kwargs": {"tone": "loud"}}),
                "<user|loud>Hello")
        finally:
            stop_server(proc)
        # A built-in template by name.
        proc, port = start_server("--chat-template", "chatml")
        try:
            self.assertEqual(self.chat_text(port, {"messages": msgs}),
                             "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant")  # (stripped)
        finally:
            stop_server(proc)

    def test_bad_flags_end_the_command_with_the_reason(self):
        bin_ = os.environ.get("TOKENFLOW_BIN")
        for flags, want in ((["--chat-template", "no-such-template"], "--chat-template"),
                            (["--chat-template-kwargs", "[1]"],
                             "--chat-template-kwargs must be a JSON object")):
            r = subprocess.run([bin_, "serve", "--model", STORIES_BIN, "--port", "0", *flags],
                               capture_output=True, text=True, timeout=60)
            self.assertNotEqual(r.returncode, 0, flags)
            self.assertIn(want, r.stderr, flags)


class EmbeddingsTest(ServerCase):
    def embed(self, body, status=200):
        st, out, text, _ = self.c.post("/v1/embeddings", body)
        self.assertEqual(st, status, text)
        return out

    def ids(self, text):
        return self.c.post("/tokenize", {"prompt": text})[1]["tokens"]

    def test_last_and_mean_pooling_match_the_reference(self):
        texts = ["Once upon a time", "The cat sat on the mat and"]
        out = self.embed({"input": texts})
        self.assertEqual(out["object"], "list")
        self.assertEqual(out["model"], "stories260K")
        self.assertEqual([d["index"] for d in out["data"]], [0, 1])
        total = 0
        for text, d in zip(texts, out["data"]):
            ids = self.ids(text)
            total += len(ids)
            h = ref().hidden(ids)
            want = h[-1] / np.linalg.norm(h[-1])
            got = np.array(d["embedding"])
            self.assertEqual(d["object"], "embedding")
            self.assertEqual(got.shape, (64,))
            np.testing.assert_allclose(got, want, atol=2e-4)
            self.assertAlmostEqual(float(np.linalg.norm(got)), 1.0, places=5)
        self.assertEqual(out["usage"], {"prompt_tokens": total, "total_tokens": total})
        # Mean pooling, unnormalized, from token ids.
        ids = self.ids(texts[1])
        out = self.embed({"input": ids, "pooling": "mean", "normalize": False})
        np.testing.assert_allclose(np.array(out["data"][0]["embedding"]),
                                   ref().hidden(ids).mean(axis=0), atol=2e-4)

    def test_mean_pooling_is_whole_after_a_cached_prefix(self):
        # The first request leaves the prompt's blocks in the prefix cache; a mean over a
        # prompt sharing them must still see every position.
        text = "Once upon a time, there was a little girl named Lily who liked to play"
        self.c.post("/v1/completions", {"prompt": text, "max_tokens": 1})
        ids = self.ids(text + " outside")
        out = self.embed({"input": ids, "pooling": "mean"})
        want = ref().hidden(ids).mean(axis=0)
        np.testing.assert_allclose(np.array(out["data"][0]["embedding"]),
                                   want / np.linalg.norm(want), atol=2e-4)

    def test_base64_is_the_float_encoding(self):
        body = {"input": "Once upon a time"}
        floats = self.embed(body)["data"][0]["embedding"]
        b64 = self.embed(dict(body, encoding_format="base64"))["data"][0]["embedding"]
        raw = base64.b64decode(b64)
        decoded = struct.unpack("<%df" % (len(raw) // 4), raw)
        np.testing.assert_allclose(decoded, floats, rtol=1e-6, atol=1e-7)
        self.assertEqual(len(decoded), 64)

    def test_bad_requests(self):
        for body, param in (({"input": "a", "dimensions": 32}, "dimensions"),
                            ({"input": "a", "dimensions": 0}, "dimensions"),
                            ({}, "input"),
                            ({"input": ""}, "input"),
                            ({"input": []}, "input"),
                            ({"input": [[1, 2], "x"]}, "input"),
                            ({"input": [1, 99999]}, "input"),
                            ({"input": "a", "encoding_format": "hex"}, "encoding_format"),
                            ({"input": "a", "pooling": "cls"}, "pooling"),
                            ({"input": "a", "normalize": 1}, "normalize"),
                            ({"input": "a", "extra": 1}, "extra"),
                            ({"input": "a " * 600}, "input")):
            out = self.embed(body, 400)
            self.assertEqual(out["error"]["param"], param, body)
        # The model's own size is accepted.
        self.assertEqual(len(self.embed({"input": "a", "dimensions": 64})["data"][0]["embedding"]),
                         64)
        st, _, _, _ = self.c.post("/v1/embeddings", {"input": "a", "model": "nope"})
        self.assertEqual(st, 404)
        # Nothing was left running.
        _, stats, _, _ = self.c.get("/v1/admin/stats")
        self.assertEqual(stats["models"]["stories260K"]["kv_blocks_used"], 0)


class PromptLogprobsTest(ServerCase):
    PROMPT = "Once upon a time, there was a little"

    def ids(self, text):
        return self.c.post("/tokenize", {"prompt": text})[1]["tokens"]

    def reference(self, ids):
        return log_softmax(ref().logits(ids))

    def check_vllm(self, plps, ids, k):
        lp = self.reference(ids)
        self.assertIsNone(plps[0])
        self.assertEqual(len(plps), len(ids))
        for i in range(1, len(ids)):
            entry = plps[i]
            own = entry[str(ids[i])]
            self.assertAlmostEqual(own["logprob"], lp[i - 1, ids[i]], delta=2e-3)
            rank = 1 + int((lp[i - 1] > lp[i - 1, ids[i]]).sum())
            self.assertEqual(own["rank"], rank, i)
            top = np.argsort(-lp[i - 1], kind="stable")[:k]
            for t in top:
                self.assertAlmostEqual(entry[str(t)]["logprob"], lp[i - 1, t], delta=2e-3)
            self.assertEqual(len(entry), k + (0 if ids[i] in top else 1))

    def test_vllm_prompt_logprobs_match_the_reference(self):
        ids = self.ids(self.PROMPT)
        for attempt in range(2):  # the second time, the prompt's blocks are in the prefix cache
            st, out, raw, _ = self.c.post("/v1/completions", {
                "prompt": self.PROMPT, "max_tokens": 2, "prompt_logprobs": 3})
            self.assertEqual(st, 200, raw)
            self.check_vllm(out["choices"][0]["prompt_logprobs"], ids, 3)
            self.assertEqual(out["usage"]["prompt_tokens"], len(ids))
        st, out, raw, _ = self.c.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
            "prompt_logprobs": 0, "n": 2})
        self.assertEqual(st, 200, raw)
        chat_ids = self.c.post("/tokenize", {"messages": [{"role": "user", "content": "Hi"}]})[1]
        self.check_vllm(out["prompt_logprobs"], chat_ids["tokens"], 0)

    def test_echo_with_logprobs(self):
        ids = self.ids(self.PROMPT)
        lp = self.reference(ids)
        st, out, raw, _ = self.c.post("/v1/completions", {
            "prompt": self.PROMPT, "max_tokens": 3, "echo": True, "logprobs": 2,
            "temperature": 0})
        self.assertEqual(st, 200, raw)
        c = out["choices"][0]
        self.assertTrue(c["text"].startswith(self.PROMPT))
        lps = c["logprobs"]
        n = len(ids)
        self.assertEqual(len(lps["tokens"]), n + 3)
        self.assertIsNone(lps["token_logprobs"][0])
        self.assertIsNone(lps["top_logprobs"][0])
        for i in range(1, n):
            self.assertAlmostEqual(lps["token_logprobs"][i], lp[i - 1, ids[i]], delta=2e-3)
            self.assertEqual(len(lps["top_logprobs"][i]), 2)
        self.assertEqual(lps["text_offset"], sorted(lps["text_offset"]))
        # The generated part is the greedy continuation, as without echo.
        _, plain, _, _ = self.c.post("/v1/completions", {
            "prompt": self.PROMPT, "max_tokens": 3, "logprobs": 2, "temperature": 0})
        self.assertEqual(lps["tokens"][n:], plain["choices"][0]["logprobs"]["tokens"])
        # Streamed: each choice's first chunk carries the echo and the prompt's logprobs.
        head, body = self.c.raw_stream("/v1/completions", {
            "prompt": self.PROMPT, "max_tokens": 3, "echo": True, "logprobs": 1, "n": 2,
            "stream": True, "temperature": 0})
        firsts = {}
        for e in sse_events(body):
            for ch in e["choices"]:
                firsts.setdefault(ch["index"], ch)
        self.assertEqual(sorted(firsts), [0, 1])
        for ch in firsts.values():
            self.assertTrue(ch["text"].startswith(self.PROMPT))
            got = ch["logprobs"]["token_logprobs"]
            self.assertIsNone(got[0])
            for i in range(1, n):
                self.assertAlmostEqual(got[i], lp[i - 1, ids[i]], delta=2e-3)

    def test_refusals(self):
        for body, param in (({"prompt": "a", "prompt_logprobs": 21}, "prompt_logprobs"),
                            ({"prompt": "a", "prompt_logprobs": -1}, "prompt_logprobs"),
                            ({"prompt": "a", "prompt_logprobs": "3"}, "prompt_logprobs"),
                            ({"prompt": "a", "prompt_logprobs": 1, "stream": True},
                             "prompt_logprobs"),
                            ({"prompt": "a", "prompt_logprobs": 1, "use_beam_search": True,
                              "best_of": 2}, "prompt_logprobs")):
            st, out, raw, _ = self.c.post("/v1/completions", body)
            self.assertEqual(st, 400, raw)
            self.assertEqual(out["error"]["param"], param, body)


class MetricsTest(unittest.TestCase):
    def test_busy_seconds_and_kv_cache_refusals(self):
        proc, port = start_server("--threads", "1", kv_cache="1MiB")
        try:
            c = Client(port)
            text = c.get("/metrics")[2]
            self.assertEqual(metric(text, "tokenflow_oom_total", model="stories260K",
                                    reason="kv_cache_exhausted"), 0)
            before = metric(text, "tokenflow_engine_busy_seconds_total", model="stories260K")
            self.assertIsNotNone(before)
            st, _, raw, _ = c.post("/v1/completions", {"prompt": "Once", "max_tokens": 64})
            self.assertEqual(st, 200, raw)
            # Four beams of 404 tokens can never fit a 1 MiB cache (51 blocks): refused.
            st, out, raw, _ = c.post("/v1/completions", {
                "prompt": "Once", "max_tokens": 400, "use_beam_search": True, "best_of": 4})
            self.assertEqual(st, 400, raw)
            text = c.get("/metrics")[2]
            self.assertEqual(metric(text, "tokenflow_oom_total", model="stories260K",
                                    reason="kv_cache_exhausted"), 1)
            self.assertEqual(metric(text, "tokenflow_oom_total", model="stories260K",
                                    reason="allocation_failure"), 0)
            self.assertGreater(metric(text, "tokenflow_engine_busy_seconds_total",
                                      model="stories260K"), before)
            self.assertIsNone(metric(text, "tokenflow_key_tokens_total"))
        finally:
            code, err = stop_server(proc)
            self.assertEqual(code, 0, err[-2000:])

    def test_per_key_labels(self):
        d = tempfile.mkdtemp(prefix="tf_extras_")
        try:
            keys = os.path.join(d, "keys")
            with open(keys, "w") as f:
                f.write("sk-a name=alice\nsha256:%s name=bob\n" %
                        hashlib.sha256(b"sk-b").hexdigest())
            proc, port = start_server("--threads", "1", "--api-keys-file", keys)
            try:
                c = Client(port)
                for key, n in (("sk-a", 2), ("sk-b", 1)):
                    for _ in range(n):
                        st, _, raw, _ = c.post("/v1/completions",
                                               {"prompt": "Once", "max_tokens": 3},
                                               headers={"Authorization": "Bearer " + key})
                        self.assertEqual(st, 200, raw)
                text = c.get("/metrics", headers={"Authorization": "Bearer sk-a"})[2]
                self.assertEqual(metric(text, "tokenflow_requests_total", key="alice",
                                        code="200"), 2)
                self.assertEqual(metric(text, "tokenflow_requests_total", key="bob",
                                        code="200"), 1)
                self.assertEqual(metric(text, "tokenflow_key_tokens_total", key="alice",
                                        type="generation"), 6)
                self.assertEqual(metric(text, "tokenflow_key_tokens_total", key="bob",
                                        type="generation"), 3)
                prompt = c.post("/tokenize", {"prompt": "Once"},
                                headers={"Authorization": "Bearer sk-a"})[1]["count"]
                self.assertEqual(metric(text, "tokenflow_key_tokens_total", key="bob",
                                        type="prompt"), prompt)
                self.assertNotIn("sk-a", text)
            finally:
                code, err = stop_server(proc)
                self.assertEqual(code, 0, err[-2000:])
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
