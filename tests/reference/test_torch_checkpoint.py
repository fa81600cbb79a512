"""PyTorch checkpoints (pytorch_model.bin, issue 53): the same weights written as safetensors and
as torch.save's zip archive (by torch_io, from the format's description) give the same logits,
bit for bit, through every layout a state dict can take (tied storages, tensors at offsets in one
storage, strided views, integer buffers, a wrapped training checkpoint, shards), and against the
numpy reference; what is not a state dict of tensors is refused by name, and nothing in the file
runs.

Needs TF_DUMP_LOGITS.
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
import torch_io  # noqa: E402

PROMPTS = "5,17,300,42,7;999,1,2;64"


class TorchCheckpoints(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.exe = os.environ.get("TF_DUMP_LOGITS")
        if not cls.exe:
            raise unittest.SkipTest("TF_DUMP_LOGITS is not set")
        cls.tmp = tempfile.TemporaryDirectory(prefix="tf_torch_")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_tool(self, model, extra=()):
        out = os.path.join(self.tmp.name, "logits")
        return subprocess.run([self.exe, "--model", model, "--prompts", PROMPTS, "--out", out,
                               *extra], capture_output=True, text=True, timeout=120), out

    def logits(self, model, extra=()):
        r, out = self.run_tool(model, extra)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        return np.fromfile(out, dtype="<f4")

    def error_of(self, model):
        r, _ = self.run_tool(model)
        self.assertNotEqual(r.returncode, 0, "loading %s should fail" % model)
        self.assertNotIn("Traceback", r.stderr)
        return r.stderr

    def pair(self, kind, dtype="F32", **options):
        """(safetensors dir, .bin dir) of the same random checkpoint."""
        name = "%s_%s_%s" % (kind, dtype, "_".join(sorted(options)) or "plain")
        st = make_checkpoints.write_checkpoint(os.path.join(self.tmp.name, name + "_st"), kind,
                                               dtype=dtype, seed=3)
        tensors = safetensors_io.load_dir(st)
        pt = os.path.join(self.tmp.name, name + "_pt")
        os.makedirs(pt, exist_ok=True)
        shutil.copy(os.path.join(st, "config.json"), pt)
        if options.pop("sharded", False):
            torch_io.save_sharded(pt, tensors, 3, dtype)
        else:
            torch_io.save(os.path.join(pt, "pytorch_model.bin"), tensors, dtype, **options)
        return st, pt

    def test_architectures_and_dtypes_equal_their_safetensors_bit_for_bit(self):
        for kind, dtype in (("llama_gqa", "F32"), ("gptj", "F32"), ("codegen", "BF16"),
                            ("gpt_neox", "F16"), ("qwen2moe", "F32")):
            with self.subTest(kind=kind, dtype=dtype):
                st, pt = self.pair(kind, dtype)
                self.assertTrue(np.array_equal(self.logits(pt), self.logits(st)))

    def test_logits_equal_numpy(self):
        st, pt = self.pair("gpt_neox_seq")
        model = np_model.load_hf(st)
        got = self.logits(pt).reshape(-1, model.vocab_size)
        rows = []
        for p in PROMPTS.split(";"):
            ids = [int(t) for t in p.split(",")]
            rows.append(model.logits(ids))
        ref = np.concatenate(rows)
        self.assertEqual(got.shape, ref.shape)
        self.assertLess(np.abs(got - ref).max() / np.abs(ref).max(), 1e-4)

    def test_state_dict_layouts(self):
        # One storage for every tensor (each at its offset), transposed views (strides (1, n))
        # copied into place, integer buffers skipped, a training checkpoint's wrapper, shards.
        layouts = {
            "pack": dict(pack=True),
            "transposed": dict(transposed={"model.layers.0.self_attn.q_proj.weight",
                                           "model.layers.2.mlp.down_proj.weight",
                                           "lm_head.weight"}),
            "buffers": dict(buffers={"model.rotary_emb.position_ids": np.arange(128)[None]}),
            "wrap": dict(wrap=True),
            "sharded": dict(sharded=True),
        }
        ref = None
        for name, options in layouts.items():
            with self.subTest(layout=name):
                st, pt = self.pair("llama_gqa", **options)
                if ref is None:
                    ref = self.logits(st)
                self.assertTrue(np.array_equal(self.logits(pt), ref))
                if name == "sharded":
                    self.assertEqual(len([f for f in os.listdir(pt) if f.endswith(".bin")]), 3)

    def test_tied_weights_share_one_storage(self):
        # torch.save writes a tied head as a second view of the embedding's storage.
        st = make_checkpoints.write_checkpoint(os.path.join(self.tmp.name, "tied_st"),
                                               "llama_tied", seed=3)
        tensors = safetensors_io.load_dir(st)
        self.assertNotIn("lm_head.weight", tensors)
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
        pt = os.path.join(self.tmp.name, "tied_pt")
        os.makedirs(pt)
        shutil.copy(os.path.join(st, "config.json"), pt)
        torch_io.save(os.path.join(pt, "pytorch_model.bin"), tensors,
                      tie={"lm_head.weight": "model.embed_tokens.weight"})
        self.assertTrue(np.array_equal(self.logits(pt), self.logits(st)))

    def test_safetensors_is_preferred_when_both_are_there(self):
        st, pt = self.pair("llama_gqa")
        both = os.path.join(self.tmp.name, "both")
        shutil.copytree(st, both)
        # A .bin of other weights beside the safetensors: the safetensors are read.
        other = make_checkpoints.write_checkpoint(os.path.join(self.tmp.name, "other"),
                                                  "llama_gqa", seed=9)
        torch_io.save(os.path.join(both, "pytorch_model.bin"), safetensors_io.load_dir(other))
        self.assertTrue(np.array_equal(self.logits(both), self.logits(st)))

    def test_what_is_not_a_state_dict_is_refused_by_name_and_never_run(self):
        st, _ = self.pair("llama_gqa")
        d = os.path.join(self.tmp.name, "bad")

        def fresh():
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            shutil.copy(os.path.join(st, "config.json"), d)
            return os.path.join(d, "pytorch_model.bin")

        torch_io.hostile(fresh())
        e = self.error_of(d)
        self.assertIn("'os.system'", e)
        self.assertIn("refused", e)
        self.assertFalse(os.path.exists(os.path.join(d, "pytorch_model.bin.pwned")))
        torch_io.hostile(fresh(), "builtins", "eval")
        self.assertIn("'builtins.eval'", self.error_of(d))

        torch_io.legacy(fresh())
        self.assertIn("legacy (pre-1.6) format", self.error_of(d))

        # Truncated anywhere: a clear error, never a crash.
        path = fresh()
        torch_io.save(path, safetensors_io.load_dir(st))
        with open(path, "rb") as f:
            whole = f.read()
        for cut in (len(whole) // 2, len(whole) - 10, 100):
            with open(path, "wb") as f:
                f.write(whole[:cut])
            self.assertIn(path, self.error_of(d))

        # A compressed entry (not what torch.save writes) is named.
        import zipfile
        path = fresh()
        torch_io.save(path, safetensors_io.load_dir(st))
        with zipfile.ZipFile(path) as z:
            items = [(i.filename, z.read(i)) for i in z.infolist()]
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
            for n, b in items:
                z.writestr(n, b)
        self.assertIn("is compressed", self.error_of(d))

        # A storage shorter than the tensors viewing it.
        path = fresh()
        torch_io.save(path, safetensors_io.load_dir(st))
        with zipfile.ZipFile(path) as z:
            items = [(i.filename, z.read(i)) for i in z.infolist()]
        with zipfile.ZipFile(path, "w") as z:
            for n, b in items:
                z.writestr(n, b[:len(b) // 2] if n.endswith("/data/0") else b)
        self.assertIn("storage '0' holds", self.error_of(d))

        # A tensor the model needs with the wrong shape, and one missing.
        tensors = safetensors_io.load_dir(st)
        tensors["model.norm.weight"] = np.ones(5, np.float32)
        torch_io.save(fresh(), tensors)
        self.assertIn("model.norm.weight", self.error_of(d))
        del tensors["model.norm.weight"]
        torch_io.save(fresh(), tensors)
        self.assertIn("model.norm.weight", self.error_of(d))

        # The file named on its own, and a directory with no config.json.
        torch_io.save(fresh(), safetensors_io.load_dir(st))
        self.assertIn("pass its directory", self.error_of(os.path.join(d, "pytorch_model.bin")))
        os.remove(os.path.join(d, "config.json"))
        self.assertIn("no config.json", self.error_of(d))

        # A sharded index naming a tensor its shard lacks.
        _, pt = self.pair("llama_gqa", sharded=True)
        index = os.path.join(pt, "pytorch_model.bin.index.json")
        with open(index) as f:
            j = json.load(f)
        j["weight_map"]["model.extra.weight"] = "pytorch_model-00001-of-00003.bin"
        with open(index, "w") as f:
            json.dump(j, f)
        self.assertIn("'model.extra.weight' is listed", self.error_of(pt))


if __name__ == "__main__":
    unittest.main()
