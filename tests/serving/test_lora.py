"""LoRA adapters through the server (issue 54): `serve --model stories=... --lora sql=DIR`
serves the adapter under its own name on every generating door (OpenAI, Anthropic, Ollama,
TF Serving's predict), computed unmerged over the one
copy of the base; its answers equal those of the same adapter merged into a copy of the base
(W + s B A, served beside it as a model of its own); /v1/models lists it with its base as
parent; requests for the base are untouched; unknown names are 404 and an adapter named where a
model that does not generate is wanted is 400.

Env: TOKENFLOW_BIN, TF_SHARED_DIR, TF_REFERENCE_DIR.
"""

import json
import os
import re
import shutil
import sys
import tempfile
import unittest

import numpy as np

from test_server import SHARED, STORIES_BIN, ServerCase, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("TF_REFERENCE_DIR",
                                  os.path.join(os.path.dirname(HERE), "reference")))
import make_checkpoints  # noqa: E402
import np_model  # noqa: E402
import safetensors_io  # noqa: E402

TOKENIZER = os.path.join(SHARED, "models", "stories260K", "tok512.bin")
# (q_proj and k_proj are left out: the HF copy of a llama2.c checkpoint permutes their rows.)
TARGETS = (("self_attn", "v_proj"), ("self_attn", "o_proj"), ("mlp", "gate_proj"),
           ("mlp", "up_proj"), ("mlp", "down_proj"))


def write_adapter_and_merged(root):
    """A random rank-4 adapter for stories260K (PEFT's layout) and the HF copy of stories260K
    with it merged in: (adapter dir, merged dir)."""
    hdr, _ = np_model.read_llama2c(STORIES_BIN)
    merged_dir = make_checkpoints.convert_llama2c(STORIES_BIN, os.path.join(root, "merged"))
    w = safetensors_io.load(os.path.join(merged_dir, "model.safetensors"))
    rng = np.random.default_rng(11)
    r, alpha = 4, 8.0
    lora = {}
    for layer in range(hdr["n_layers"]):
        for block, module in TARGETS:
            name = "model.layers.%d.%s.%s.weight" % (layer, block, module)
            out, inn = w[name].shape
            a = (rng.standard_normal((r, inn)) * 0.3).astype(np.float32)
            b = (rng.standard_normal((out, r)) * 0.3).astype(np.float32)
            stem = "base_model.model." + name[:-len(".weight")]
            lora[stem + ".lora_A.weight"] = a
            lora[stem + ".lora_B.weight"] = b
            w[name] = (w[name] + (alpha / r) * (b.astype(np.float64) @ a)).astype(np.float32)
    safetensors_io.save(os.path.join(merged_dir, "model.safetensors"), w, "F32")
    adapter = os.path.join(root, "sql-lora")
    os.makedirs(adapter)
    with open(os.path.join(adapter, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": r, "lora_alpha": alpha, "bias": "none",
                   "target_modules": [m for _, m in TARGETS], "task_type": "CAUSAL_LM",
                   "base_model_name_or_path": "stories260K"}, f)
    safetensors_io.save(os.path.join(adapter, "adapter_model.safetensors"), lora, "F32")
    return adapter, merged_dir


def metric(client, name):
    """The first sample of a metric family on /metrics, or None when it has none."""
    text = client.get("/metrics")[2]
    m = re.search(r"^%s\{[^}]*\} (\S+)$" % name, text, re.M)
    return float(m.group(1)) if m else None


def adapter_elements(adapter):
    """How many numbers the adapter's A and B matrices hold."""
    t = safetensors_io.load(os.path.join(adapter, "adapter_model.safetensors"))
    return sum(v.size for v in t.values())


class LoraServingTest(ServerCase):
    @classmethod
    def setUpClass(cls):
        cls.model_dir = tempfile.mkdtemp(prefix="tf_lora_")
        cls.adapter, merged = write_adapter_and_merged(cls.model_dir)
        cls.model_flags = ("--model", "stories=" + STORIES_BIN, "--lora", "sql=" + cls.adapter,
                           "--model", "merged=" + merged)
        cls.server_args = ("--threads", "1", "--tokenizer", TOKENIZER)
        super().setUpClass()

    def complete(self, model, prompt="Once upon a time", n=12):
        s, b, text, _ = self.c.post("/v1/completions", {
            "model": model, "prompt": prompt, "max_tokens": n, "temperature": 0,
            "logprobs": 1})
        self.assertEqual(s, 200, text)
        lp = b["choices"][0]["logprobs"]
        return b["choices"][0]["text"], lp["tokens"], lp["token_logprobs"], b["model"]

    def test_the_adapter_answers_as_its_merged_weights_do(self):
        for prompt in ("Once upon a time", "Lily and Ben went to the park.", "The dog"):
            text, tokens, lps, model = self.complete("sql", prompt)
            self.assertEqual(model, "sql")
            m_text, m_tokens, m_lps, _ = self.complete("merged", prompt)
            self.assertEqual(tokens, m_tokens, prompt)
            np.testing.assert_allclose(lps, m_lps, atol=2e-3, err_msg=prompt)
            base_text, _, _, _ = self.complete("stories", prompt)
            self.assertNotEqual(text, base_text, "the adapter must change the answer")

    def test_base_at_adapter_names_it_too(self):
        text, _, _, model = self.complete("stories@sql", "The dog", n=10)
        self.assertEqual(model, "sql")  # answers and metrics carry the adapter's own name
        self.assertEqual(text, self.complete("sql", "The dog", n=10)[0])
        # An adapter of another base, or none, is not a label of this one.
        for name in ("merged@sql", "stories@nosuch"):
            s, b, raw, _ = self.c.post("/v1/completions", {"model": name, "prompt": "x"})
            self.assertEqual(s, 404, raw)

    def test_every_generating_door_reaches_it(self):
        text, _, _, _ = self.complete("sql", "The dog", n=10)
        s, b, raw, _ = self.c.post("/v1/chat/completions", {
            "model": "sql", "messages": [{"role": "user", "content": "The dog"}],
            "max_tokens": 10, "temperature": 0})
        self.assertEqual(s, 200, raw)
        self.assertEqual(b["model"], "sql")
        s, b, raw, _ = self.c.post("/api/generate", {
            "model": "sql", "prompt": "The dog", "raw": True, "stream": False,
            "options": {"temperature": 0, "num_predict": 10}})
        self.assertEqual(s, 200, raw)
        self.assertEqual(b["response"], text)
        s, b, raw, _ = self.c.post("/v1/messages", {
            "model": "sql", "max_tokens": 10, "temperature": 0,
            "messages": [{"role": "user", "content": "The dog"}]})
        self.assertEqual(s, 200, raw)
        # TF Serving's REST door: the adapter's name in the path (and a version of its base).
        for path in ("/v1/models/sql:predict", "/v1/models/sql/versions/1:predict"):
            s, b, raw, _ = self.c.post(path, {"instances": [
                {"prompt": "The dog", "max_tokens": 10, "temperature": 0}]})
            self.assertEqual(s, 200, raw)
            self.assertEqual(b["predictions"][0]["text"], text, path)
        s, b, raw, _ = self.c.get("/v1/models/sql/metadata")
        self.assertEqual(s, 400, raw)

    def test_listed_with_its_base_as_parent(self):
        s, b, text, _ = self.c.get("/v1/models")
        self.assertEqual(s, 200, text)
        by_id = {m["id"]: m for m in b["data"]}
        self.assertEqual(by_id["sql"]["parent"], "stories")
        self.assertEqual(by_id["sql"]["root"], self.adapter)
        self.assertIsNone(by_id["stories"]["parent"])
        s, b, text, _ = self.c.get("/api/tags")  # Ollama's listing
        self.assertEqual(s, 200, text)
        tags = {m["name"]: m for m in b["models"]}
        self.assertEqual(tags["sql:latest"]["details"]["parent_model"], "stories")

    def test_unknown_names_and_wrong_routes(self):
        s, b, text, _ = self.c.post("/v1/completions", {"model": "nosuch", "prompt": "x"})
        self.assertEqual(s, 404, text)
        s, b, text, _ = self.c.post("/v1/embeddings", {"model": "sql", "input": "x"})
        self.assertEqual(s, 400, text)
        self.assertIn("LoRA adapter", b["error"]["message"])


class LoraRuntimeTest(ServerCase):
    """vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter: an adapter under --model-root
    loads at run time (refused, naming why, when it does not fit or lies outside the roots),
    serves under its name, and after unloading answers 404 and holds no memory."""

    @classmethod
    def setUpClass(cls):
        cls.model_dir = tempfile.mkdtemp(prefix="tf_lora_rt_")
        cls.adapter, _ = write_adapter_and_merged(cls.model_dir)
        cls.server_args = ("--threads", "1", "--model-root", cls.model_dir)
        super().setUpClass()

    def load(self, body, status):
        s, b, text, _ = self.c.post("/v1/load_lora_adapter", body)
        self.assertEqual(s, status, text)
        return text

    def test_load_serve_unload(self):
        self.assertIn("added successfully", self.load(
            {"lora_name": "rt", "lora_path": self.adapter}, 200))
        self.assertIn("already loaded", self.load({"lora_name": "rt", "lora_path": self.adapter},
                                                  400))
        s, b, text, _ = self.c.post("/v1/completions", {"model": "rt", "prompt": "The dog",
                                                         "max_tokens": 5, "temperature": 0})
        self.assertEqual(s, 200, text)
        self.assertEqual(b["model"], "rt")
        ids = [m["id"] for m in self.c.get("/v1/models")[1]["data"]]
        self.assertIn("rt", ids)
        self.assertGreater(metric(self.c, "tokenflow_lora_adapter_bytes"), 0)
        s, b, text, _ = self.c.post("/v1/unload_lora_adapter", {"lora_name": "rt"})
        self.assertEqual(s, 200, text)
        s, b, text, _ = self.c.post("/v1/completions", {"model": "rt", "prompt": "x"})
        self.assertEqual(s, 404, text)
        # Its memory is given back (once no request holds it: the answer above may reach the
        # client before the server lets go of its request).
        self.assertTrue(wait_for(lambda: not metric(self.c, "tokenflow_lora_adapter_bytes") and
                                 not metric(self.c, "tokenflow_lora_adapters_resident"), 30))
        s, b, text, _ = self.c.post("/v1/unload_lora_adapter", {"lora_name": "rt"})
        self.assertEqual(s, 404, text)
        self.assertNotIn("rt", [m["id"] for m in self.c.get("/v1/models")[1]["data"]])

    def test_refusals(self):
        outside = tempfile.mkdtemp(prefix="tf_lora_out_")
        try:
            shutil.copytree(self.adapter, os.path.join(outside, "a"))
            self.assertIn("--model-root", self.load(
                {"lora_name": "o", "lora_path": os.path.join(outside, "a")}, 403))
        finally:
            shutil.rmtree(outside)
        bad = os.path.join(self.model_dir, "bad")
        shutil.copytree(self.adapter, bad)
        w = safetensors_io.load(os.path.join(bad, "adapter_model.safetensors"))
        name = "base_model.model.model.layers.0.mlp.up_proj.lora_A.weight"
        w[name] = np.zeros((4, 3), np.float32)
        safetensors_io.save(os.path.join(bad, "adapter_model.safetensors"), w, "F32")
        self.assertIn(name, self.load({"lora_name": "bad", "lora_path": bad}, 400))
        self.assertIn("lora_path", self.load({"lora_name": "x"}, 400))
        self.assertIn("unknown field", self.load({"lora_name": "x", "lora_path": bad,
                                                  "nope": 1}, 400))
        self.load({"lora_name": "x", "lora_path": self.adapter, "base_model_name": "zz"}, 404)
        # Nothing of the refused loads is listed.
        ids = [m["id"] for m in self.c.get("/v1/models")[1]["data"]]
        self.assertEqual([i for i in ids if i in ("o", "bad", "x")], [])


class LoraEvictionTest(ServerCase):
    """--max-loras 1 with two adapters: naming one after the other evicts the idle one and
    reloads it when named again, with the same answers; /metrics counts the loads, evictions and
    the resident adapter's bytes."""

    @classmethod
    def setUpClass(cls):
        cls.model_dir = tempfile.mkdtemp(prefix="tf_lora_ev_")
        a, _ = write_adapter_and_merged(cls.model_dir)
        b = os.path.join(cls.model_dir, "copy")
        shutil.copytree(a, b)  # another path: another adapter to the cache
        cls.server_args = ("--threads", "1", "--lora", "a=" + a, "--lora", "b=" + b,
                           "--max-loras", "1")
        cls.elements = adapter_elements(a)
        super().setUpClass()

    def answer(self, model):
        s, body, text, _ = self.c.post("/v1/completions", {
            "model": model, "prompt": "The dog", "max_tokens": 8, "temperature": 0})
        self.assertEqual(s, 200, text)
        # The answer is out before the server lets go of the request (and of its adapter): an
        # adapter in use is never evicted, so the next request waits until nothing runs.
        def idle():
            st = self.c.get("/v1/admin/stats")[1]
            return st["jobs_in_flight"] == 0 and all(
                m["running"] == 0 and m["waiting"] == 0 for m in st["models"].values())
        self.assertTrue(wait_for(idle, 30))
        return body["choices"][0]["text"]

    def metric(self, name):
        value = metric(self.c, name)
        self.assertIsNotNone(value, name)
        return value

    def test_the_least_recently_used_idle_adapter_is_evicted(self):
        first = self.answer("a")
        self.assertEqual(self.answer("b"), first)  # the same weights under another path
        self.assertEqual(self.answer("a"), first)  # reloaded after its eviction
        self.assertEqual(self.metric("tokenflow_lora_loads_total"), 3)
        self.assertEqual(self.metric("tokenflow_lora_evictions_total"), 2)
        self.assertEqual(self.metric("tokenflow_lora_adapters_resident"), 1)
        # The resident adapter in f32 (its base's type): 4 bytes a number.
        self.assertEqual(self.metric("tokenflow_lora_adapter_bytes"), 4 * self.elements)


class LoraBf16Test(ServerCase):
    """Over a bf16 base (--dtype bf16) an adapter computes in half precision too (f16: as vLLM
    keeps adapters in the model's 16-bit dtype): half the bytes of f32, and its answers still
    those of its merged weights served in bf16."""

    @classmethod
    def setUpClass(cls):
        cls.model_dir = tempfile.mkdtemp(prefix="tf_lora_bf16_")
        cls.adapter, merged = write_adapter_and_merged(cls.model_dir)
        cls.elements = adapter_elements(cls.adapter)
        cls.model_flags = ("--model", "stories=" + STORIES_BIN, "--lora", "sql=" + cls.adapter,
                           "--model", "merged=" + merged)
        cls.server_args = ("--threads", "1", "--tokenizer", TOKENIZER, "--dtype", "bf16")
        super().setUpClass()

    def test_the_adapter_is_held_in_half_precision_and_answers_as_merged(self):
        # Teacher-forced: each model's log-probabilities of one text's tokens (echo), so a near
        # tie that bf16 rounding tips one way cannot send the two down different paths.
        text = "Once upon a time, there was a little girl named Lily. She loved to play outside."
        lps = {}
        for model in ("sql", "merged", "stories"):
            s, b, raw, _ = self.c.post("/v1/completions", {
                "model": model, "prompt": text, "max_tokens": 1, "temperature": 0, "echo": True,
                "logprobs": 0})
            self.assertEqual(s, 200, raw)
            lps[model] = np.array(b["choices"][0]["logprobs"]["token_logprobs"][1:-1])
        self.assertGreater(len(lps["sql"]), 15)
        # bf16 rounds W + sBA once, W (and f16 A, B) apart: a few percent of these (large) log-
        # probabilities; without the adapter the base is nats away.
        np.testing.assert_allclose(lps["sql"], lps["merged"], rtol=0.05, atol=0.05)
        self.assertGreater(np.abs(lps["stories"] - lps["merged"]).max(), 1.0)
        text = self.c.get("/metrics")[2]
        m = re.search(r'^tokenflow_lora_adapter_bytes\{[^}]*model="stories"[^}]*\} (\S+)$', text,
                      re.M)
        self.assertIsNotNone(m, text[-2000:])
        self.assertEqual(float(m.group(1)), 2 * self.elements)


if __name__ == "__main__":
    unittest.main()
