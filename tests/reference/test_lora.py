"""LoRA adapters (issue 54) against the numpy reference: an adapter in PEFT's layout
(adapter_config.json + adapter_model.safetensors, tensors base_model.model.<base name>.lora_A /
lora_B) applied unmerged by the C++ model equals the numpy model of its base with the adapter
merged in, W + s * B @ A (s = lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA; a module's
own rank where rank_pattern gives it one), for every target module; sequences with different
adapters (and none) in one batch equal each run alone; adapters that do not fit their base are
refused naming the tensor or field.

Env: TF_DUMP_LOGITS (the C++ tool), TF_REFERENCE_DIR.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import make_checkpoints  # noqa: E402
import np_model  # noqa: E402
import safetensors_io  # noqa: E402
from test_reference import ToolCase, _fmt, _random_batch  # noqa: E402

TARGETS = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn",
           "o_proj": "self_attn", "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
# The fused projections of a Phi-3 base.
FUSED = {"qkv_proj": "self_attn", "gate_up_proj": "mlp"}
MODULE_BLOCK = dict(TARGETS, **FUSED)
LENGTHS = (5, 1, 9)


def write_adapter(base_dir, out_dir, targets, r=4, alpha=8.0, rslora=False, seed=0,
                  rank_pattern=None, config=None):
    """A random adapter for the checkpoint in base_dir on `targets` (every layer that has the
    projection): writes PEFT's files to out_dir and returns the merged weights
    {base name: W + s B A} over the base's."""
    w = safetensors_io.load_dir(base_dir)
    rng = np.random.default_rng(seed)
    lora, merged = {}, dict(w)
    for name in sorted(w):
        parts = name.split(".")
        if len(parts) != 6 or parts[:2] != ["model", "layers"] or parts[4] not in targets:
            continue
        if parts[3] != MODULE_BLOCK[parts[4]] or parts[5] != "weight":
            continue
        rank = (rank_pattern or {}).get(parts[4], r)
        out, inn = w[name].shape
        a = (rng.standard_normal((rank, inn)) * 0.2).astype(np.float32)
        b = (rng.standard_normal((out, rank)) * 0.2).astype(np.float32)
        s = alpha / (np.sqrt(rank) if rslora else rank)
        stem = "base_model.model." + name[:-len(".weight")]
        lora[stem + ".lora_A.weight"] = a
        lora[stem + ".lora_B.weight"] = b
        merged[name] = (w[name].astype(np.float64) + s * (b.astype(np.float64) @ a)).astype(
            np.float32)
    os.makedirs(out_dir, exist_ok=True)
    cfg = {"peft_type": "LORA", "r": r, "lora_alpha": alpha, "use_rslora": rslora,
           "target_modules": sorted(targets), "bias": "none", "lora_dropout": 0.05,
           "task_type": "CAUSAL_LM", "base_model_name_or_path": "random-" + os.path.basename(
               base_dir), "modules_to_save": None, "rank_pattern": rank_pattern or {},
           "alpha_pattern": {}}
    cfg.update(config or {})
    with open(os.path.join(out_dir, "adapter_config.json"), "w") as f:
        json.dump(cfg, f)
    safetensors_io.save(os.path.join(out_dir, "adapter_model.safetensors"), lora, "F32")
    return merged


def write_merged(base_dir, merged, out_dir):
    """The base checkpoint with the merged weights: what numpy runs as the reference."""
    os.makedirs(out_dir, exist_ok=True)
    shutil.copy(os.path.join(base_dir, "config.json"), out_dir)
    safetensors_io.save(os.path.join(out_dir, "model.safetensors"), merged, "F32")
    return np_model.load_hf(out_dir)


class LoraReference(ToolCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="tf_lora_")
        cls.bases = {}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def base(self, kind):
        if kind not in self.bases:
            path = make_checkpoints.write_checkpoint(os.path.join(self.tmp.name, kind), kind,
                                                     dtype="F32", seed=0)
            self.bases[kind] = (path, np_model.load_hf(path))
        return self.bases[kind]

    def adapter(self, kind, name, targets, **kw):
        base_dir, _ = self.base(kind)
        d = os.path.join(self.tmp.name, "%s_%s" % (kind, name))
        merged = write_adapter(base_dir, d, targets, **kw)
        return d, write_merged(base_dir, merged, d + "_merged")

    def check_adapter(self, kind, targets, **kw):
        base_dir, base_model = self.base(kind)
        d, merged_model = self.adapter(kind, "all", targets, **kw)
        prompts, decode = _random_batch(3, LENGTHS, base_model.vocab_size)
        self.check_logits(base_dir, merged_model, prompts, decode, lora=d)
        # The adapter moves the logits (a check that cannot pass by ignoring it).
        plain = self.dump_logits(base_dir, prompts, decode)
        ours = self.dump_logits(base_dir, prompts, decode, lora=d)
        self.assertGreater(np.abs(plain - ours).max() / np.abs(plain).max(), 1e-2)

    def test_every_target_of_a_dense_model(self):
        self.check_adapter("llama_gqa", TARGETS)

    def test_each_target_alone(self):
        base_dir, _ = self.base("llama_gqa")
        for t in TARGETS:
            with self.subTest(target=t):
                d, merged_model = self.adapter("llama_gqa", t, [t], r=2, alpha=3.0)
                prompts, decode = _random_batch(4, (3, 6), merged_model.vocab_size)
                self.check_logits(base_dir, merged_model, prompts, decode, lora=d)

    def test_rslora_and_rank_pattern(self):
        self.check_adapter("llama_gqa", ["q_proj", "v_proj", "down_proj"], r=8, alpha=16.0,
                           rslora=True, rank_pattern={"v_proj": 2})

    def test_post_norms_and_gated_attention(self):
        # Gemma 2's norms after attention and MLP; Qwen3-Next's q_proj of [q; gate] per head,
        # its Gated DeltaNet layers (no attention projections there) and MoE MLPs (none).
        self.check_adapter("gemma2", TARGETS)
        self.check_adapter("qwen3_next", TARGETS)

    def test_fused_projections(self):
        # Phi-3 fuses q/k/v into qkv_proj and gate/up into gate_up_proj: its adapters correct
        # those (B's rows split into the parts the model applies), in PEFT's form and as
        # llama.cpp writes them (attn_qkv; ffn_up holding gate and up) for a GGUF phi3 base.
        targets = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]
        self.check_adapter("phi3", targets)
        import gguf_io
        import test_gguf
        base_dir, base_model = self.base("phi3")
        d, merged_model = self.adapter("phi3", "for_gguf", targets, r=3, alpha=6.0, seed=5)
        names = {"qkv_proj": "attn_qkv", "o_proj": "attn_output", "gate_up_proj": "ffn_up",
                 "down_proj": "ffn_down"}
        tensors = []
        for name, a in sorted(safetensors_io.load(
                os.path.join(d, "adapter_model.safetensors")).items()):
            parts = name.split(".")  # base_model.model.model.layers.N.block.module.lora_X.weight
            a = np.ascontiguousarray(a, dtype=np.float32)
            tensors.append(("blk.%s.%s.weight.lora_%s" % (parts[4], names[parts[6]],
                                                         parts[7][-1].lower()),
                            list(a.shape[::-1]), 0, a.tobytes()))
        path = os.path.join(self.tmp.name, "phi3_adapter.gguf")
        gguf_io.write_gguf(path, {"general.architecture": "phi3", "general.type": "adapter",
                                  "adapter.type": "lora",
                                  "adapter.lora.alpha": gguf_io.F32(6.0)}, tensors)
        gguf_base = os.path.join(self.tmp.name, "phi3.gguf")
        test_gguf.hf_to_gguf("phi3", 0, gguf_base)
        prompts, decode = _random_batch(2, LENGTHS, base_model.vocab_size)
        self.check_logits(gguf_base, merged_model, prompts, decode, lora=path)
        self.check_logits(base_dir, merged_model, prompts, decode, lora=d)

    def test_adapters_mixed_in_one_batch_equal_each_alone(self):
        base_dir, base_model = self.base("llama_gqa")
        a, _ = self.adapter("llama_gqa", "mix_a", ["q_proj", "v_proj"], seed=1)
        b, _ = self.adapter("llama_gqa", "mix_b", list(TARGETS), r=6, seed=2)
        prompts, decode = _random_batch(5, (4, 7, 2, 5), base_model.vocab_size)
        which = [a, "-", b, a]
        mixed = self.dump_logits(base_dir, prompts, decode, lora=";".join(which))
        # Rows: every sequence's prefill, then each decode step's row per sequence.
        n_pre = sum(len(p) for p in prompts)
        starts = np.cumsum([0] + [len(p) for p in prompts])
        for s, (p, d, ad) in enumerate(zip(prompts, decode, which)):
            alone = self.dump_logits(base_dir, [p], [d], lora=None if ad == "-" else ad)
            rows = list(range(starts[s], starts[s + 1])) + [
                n_pre + j * len(prompts) + s for j in range(len(d))]
            err = np.abs(mixed[rows] - alone).max() / np.abs(alone).max()
            self.assertLess(err, 1e-5, "sequence %d (adapter %s)" % (s, ad))

    def test_gguf_adapters_and_gguf_bases(self):
        # llama.cpp's layouts: a "llama" GGUF keeps each head's q/k rows interleaved for its
        # adjacent-pair RoPE, and convert_lora_to_gguf.py writes an adapter's B rows the same
        # way. A PEFT adapter on a GGUF base, and a GGUF adapter on a safetensors base, must
        # both equal the merged safetensors model.
        import gguf_io
        import test_gguf
        base_dir, base_model = self.base("llama_gqa")
        d, merged_model = self.adapter("llama_gqa", "for_gguf", TARGETS, r=3, alpha=6.0, seed=7)
        prompts, decode = _random_batch(8, LENGTHS, base_model.vocab_size)
        gguf_base = os.path.join(self.tmp.name, "llama_gqa.gguf")
        test_gguf.hf_to_gguf("llama_gqa", 0, gguf_base)
        self.check_logits(gguf_base, merged_model, prompts, decode, lora=d)
        # The same adapter as llama.cpp writes it.
        with open(os.path.join(base_dir, "config.json")) as f:
            cfg = json.load(f)
        hd = cfg["hidden_size"] // cfg["num_attention_heads"]
        names = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj":
                 "attn_output", "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj":
                 "ffn_down"}
        tensors = []
        for name, a in sorted(safetensors_io.load(
                os.path.join(d, "adapter_model.safetensors")).items()):
            parts = name.split(".")  # base_model.model.model.layers.N.block.module.lora_X.weight
            layer, module, which = parts[4], parts[6], parts[7][-1].lower()
            if which == "b" and module in ("q_proj", "k_proj"):  # halves -> adjacent pairs
                n = a.shape[0] // hd
                a = a.reshape(n, 2, hd // 2, a.shape[1]).swapaxes(1, 2).reshape(a.shape)
            a = np.ascontiguousarray(a, dtype=np.float32)
            tensors.append(("blk.%s.%s.weight.lora_%s" % (layer, names[module], which),
                            list(a.shape[::-1]), 0, a.tobytes()))
        path = os.path.join(self.tmp.name, "adapter.gguf")
        gguf_io.write_gguf(path, {"general.architecture": "llama", "general.type": "adapter",
                                  "adapter.type": "lora",
                                  "adapter.lora.alpha": gguf_io.F32(6.0)}, tensors)
        self.check_logits(base_dir, merged_model, prompts, decode, lora=path)
        self.check_logits(gguf_base, merged_model, prompts, decode, lora=path)
        # A GGUF that is not an adapter is refused by name.
        self.assertIn("general.type", self.tool_error(base_dir, gguf_base))

    def tool_error(self, base_dir, adapter_dir):
        r = subprocess.run([self.tool(), "--model", base_dir, "--prompts", _fmt([[1, 2]]),
                            "--out", os.path.join(self.tmp.name, "x.f32"), "--lora",
                            adapter_dir], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=120)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertNotIn("Traceback", r.stderr)
        return r.stderr

    def test_adapters_that_do_not_fit_are_refused_by_name(self):
        base_dir, _ = self.base("llama_gqa")
        good, _ = self.adapter("llama_gqa", "good", ["q_proj"])
        st = os.path.join(good, "adapter_model.safetensors")
        w = safetensors_io.load(st)
        q_a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"

        def variant(name, tensors=None, config=None):
            d = os.path.join(self.tmp.name, "bad_" + name)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(good, "adapter_config.json")) as f:
                cfg = json.load(f)
            cfg.update(config or {})
            with open(os.path.join(d, "adapter_config.json"), "w") as f:
                json.dump(cfg, f)
            safetensors_io.save(os.path.join(d, "adapter_model.safetensors"),
                                w if tensors is None else tensors, "F32")
            return d

        cases = [
            (variant("shape", dict(w, **{q_a: np.zeros((4, 7), np.float32)})), q_a),
            (variant("embed", dict(w, **{
                "base_model.model.model.embed_tokens.lora_embedding_A": np.zeros((4, 8),
                                                                                 np.float32)})),
             "lora_embedding_A"),
            (variant("half", {k: v for k, v in w.items() if k != q_a}), "lora_B but not lora_A"),
            (variant("layer", dict(w, **{q_a.replace("layers.0", "layers.99"): w[q_a]})),
             "layers.99"),
            (variant("save", config={"modules_to_save": ["lm_head"]}), "modules_to_save"),
            (variant("dora", config={"use_dora": True}), "use_dora"),
            (variant("bias", config={"bias": "all"}), "bias"),
            (variant("rank", config={"r": 0}), "'r'"),
            (variant("type", config={"peft_type": "IA3"}), "peft_type"),
            (os.path.join(self.tmp.name, "nowhere"), "adapter_config.json"),
        ]
        for d, want in cases:
            with self.subTest(case=os.path.basename(d)):
                self.assertIn(want, self.tool_error(base_dir, d))
        # A fused base (Phi-3's qkv_proj) has no q_proj to correct; an unfused one no qkv_proj.
        phi_dir, _ = self.base("phi3")
        for base, module, want in ((phi_dir, "q_proj", "fuses q/k/v into qkv_proj"),
                                   (base_dir, "qkv_proj", "no fused qkv_proj")):
            bad = os.path.join(self.tmp.name, "fused_" + module)
            a = np.zeros((4, 64), np.float32)
            os.makedirs(bad, exist_ok=True)
            with open(os.path.join(bad, "adapter_config.json"), "w") as f:
                json.dump({"peft_type": "LORA", "r": 4, "lora_alpha": 8}, f)
            stem = "base_model.model.model.layers.0.self_attn.%s." % module
            safetensors_io.save(os.path.join(bad, "adapter_model.safetensors"), {
                stem + "lora_A.weight": a, stem + "lora_B.weight": a.T.copy()}, "F32")
            with self.subTest(module=module):
                self.assertIn(want, self.tool_error(base, bad))

if __name__ == "__main__":
    unittest.main()
