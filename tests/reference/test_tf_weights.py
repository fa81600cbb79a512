"""TensorFlow weights (issue 23, item 4): a Hugging Face `tf_model.h5`, as TFGPT2LMHeadModel and
TFMistralForCausalLM's save_pretrained write it (tf_h5_io.py, h5py), and a SavedModel version
directory as tf.saved_model.save lays it out (tf_saved_model_io.py: the bundle index written by
libleveldb's TableBuilder, TensorFlow's bundle protos) load to the same model as the safetensors
checkpoint of the same random weights: the C++ logits of the directories are bitwise equal, and
equal to the numpy reference's within the usual tolerance. Both string forms of Keras's name
lists, the sharded form, the signature read from saved_model.pb, and malformed files (an error
naming the file, never a crash) are covered.

Env: TF_DUMP_LOGITS (the C++ dump-logits tool), TF_WRITE_TABLE (write_leveldb_table),
TOKENFLOW_BIN.
"""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

import h5py
import numpy as np

import make_checkpoints
import np_model
import safetensors_io
import tf_h5_io
import tf_saved_model_io
from test_reference import ToolCase

PROMPTS = [[1, 5, 9, 2, 7], [3, 3, 8]]
DECODE = [[4, 6], [11, 2]]


class TempDirCase(ToolCase):
    """A temporary directory for the class's checkpoints."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tf_weights_")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)


class TfH5WeightsTest(TempDirCase):

    def pair(self, kind, name, **kw):
        """A safetensors checkpoint of `kind` and a directory with the same weights as TF's."""
        st = make_checkpoints.write_checkpoint(os.path.join(self.dir, name + "_st"), kind, seed=3)
        w = safetensors_io.load(os.path.join(st, "model.safetensors"))
        tfw = (tf_h5_io.gpt2_tf_weights(w, kw.pop("embeddings_wte", False)) if kind == "gpt2"
               else tf_h5_io.mistral_tf_weights(w))
        tf_dir = os.path.join(self.dir, name + "_tf")
        os.makedirs(tf_dir)
        shutil.copy(os.path.join(st, "config.json"), tf_dir)
        if kw.pop("sharded", False):
            tf_h5_io.save_tf_h5_sharded(tf_dir, tfw)
        else:
            tf_h5_io.save_tf_h5(os.path.join(tf_dir, "tf_model.h5"), tfw, **kw)
        return st, tf_dir

    def same_logits(self, st, tf_dir):
        a = self.dump_logits(st, PROMPTS, DECODE)
        b = self.dump_logits(tf_dir, PROMPTS, DECODE)
        self.assertEqual(a.shape, b.shape)
        self.assertTrue(np.array_equal(a, b), "max |diff| %g" % np.abs(a - b).max())
        # And the numpy reference of the safetensors weights agrees (the model is right, not
        # only the same).
        self.check_logits(tf_dir, np_model.load_hf(st), PROMPTS, DECODE)

    def test_gpt2_keras_h5(self):
        self.same_logits(*self.pair("gpt2", "gpt2"))

    def test_gpt2_embedding_names_and_fixed_length_strings(self):
        self.same_logits(*self.pair("gpt2", "gpt2_fixed", embeddings_wte=True,
                                    fixed_strings=True))

    def test_mistral_keras_h5_transposes_dense_kernels(self):
        self.same_logits(*self.pair("mistral", "mistral"))

    def test_mistral_sharded(self):
        st, tf_dir = self.pair("mistral", "mistral_sharded", sharded=True)
        self.assertFalse(os.path.exists(os.path.join(tf_dir, "tf_model.h5")))
        self.same_logits(st, tf_dir)

    def test_t5_keras_h5(self):
        # TFT5ForConditionalGeneration's tf_model.h5 (issue 51): an encoder-decoder read through
        # the same name conversion, generating what its safetensors twin generates, token for
        # token and logprob for logprob.
        st = make_checkpoints.write_checkpoint(os.path.join(self.dir, "t5_st"), "t5_v1_1", seed=3)
        w = safetensors_io.load(os.path.join(st, "model.safetensors"))
        tf_dir = os.path.join(self.dir, "t5_tf")
        os.makedirs(tf_dir)
        shutil.copy(os.path.join(st, "config.json"), tf_dir)
        tf_h5_io.save_tf_h5(os.path.join(tf_dir, "tf_model.h5"), tf_h5_io.t5_tf_weights(w))
        bin_ = os.environ.get("TOKENFLOW_BIN")
        if not bin_:
            self.fail("TOKENFLOW_BIN is not set")

        def generate(model):
            r = subprocess.run([bin_, "generate", "-m", model, "--prompt-ids", "5,17,300,42,9",
                                "-n", "6", "-t", "0", "--ignore-eos", "--logprobs", "2",
                                "--no-echo"], capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            return [line for line in r.stderr.splitlines() if re.match(r"\s*\d+\s", line)]

        a, b = generate(st), generate(tf_dir)
        self.assertEqual(len(a), 6)
        self.assertEqual(a, b)

    def test_malformed_files_are_errors_naming_them(self):
        _, tf_dir = self.pair("gpt2", "broken")
        path = os.path.join(tf_dir, "tf_model.h5")
        with open(path, "rb") as f:
            good = f.read()

        def refused(why, expect):
            cmd = [self.tool(), "--model", tf_dir, "--prompts", "1,2", "--out",
                   os.path.join(self.dir, "x.f32")]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            self.assertNotEqual(r.returncode, 0, why)
            self.assertLess(r.returncode, 128, "%s: crashed\n%s" % (why, r.stderr[-2000:]))
            self.assertIn(expect, r.stderr, why)

        with open(path, "wb") as f:
            f.write(good[: len(good) // 2])  # truncated
        refused("truncated", "tf_model.h5")
        with open(path, "wb") as f:
            f.write(b"not hdf5 at all" * 10)
        refused("not HDF5", "is not an HDF5 file")
        with h5py.File(path, "w") as f:  # a weight listed but absent
            f.attrs["layer_names"] = [b"transformer"]
            f.create_group("transformer").attrs["weight_names"] = [
                b"tfgp_t2lm_head_model/transformer/wte/weight:0"]
        refused("missing weight", "is listed but not stored")
        with h5py.File(path, "w") as f:  # integers where weights are floats
            f.attrs["layer_names"] = [b"transformer"]
            g = f.create_group("transformer")
            g.attrs["weight_names"] = [b"m/transformer/wte/weight:0"]
            g.create_dataset("m/transformer/wte/weight:0", data=np.zeros((4, 4), np.int32))
        refused("int weights", "not stored as floating point")
        # A SavedModel without variables (a graph of constants): refused, saying what was found.
        for name in ("tf_model.h5", "config.json"):
            os.remove(os.path.join(tf_dir, name))
        open(os.path.join(tf_dir, "saved_model.pb"), "wb").close()
        os.makedirs(os.path.join(tf_dir, "variables"))
        refused("SavedModel", "has saved_model.pb but no variables/variables.index")


class SavedModelTest(TempDirCase):

    def export(self, kind, name, config_in="", output_name="output_0"):
        st = make_checkpoints.write_checkpoint(os.path.join(self.dir, name + "_st"), kind, seed=5)
        w = safetensors_io.load(os.path.join(st, "model.safetensors"))
        tfw = tf_h5_io.gpt2_tf_weights(w) if kind == "gpt2" else tf_h5_io.mistral_tf_weights(w)
        sm = tf_saved_model_io.save_saved_model(os.path.join(self.dir, name + "_sm", "1"), tfw,
                                                output_name=output_name)
        if config_in is not None:
            os.makedirs(os.path.join(sm, config_in), exist_ok=True)
            shutil.copy(os.path.join(st, "config.json"), os.path.join(sm, config_in))
        return st, sm

    def same_logits(self, st, sm):
        a = self.dump_logits(st, PROMPTS, DECODE)
        b = self.dump_logits(sm, PROMPTS, DECODE)
        self.assertTrue(np.array_equal(a, b), "max |diff| %g" % np.abs(a - b).max())
        self.check_logits(sm, np_model.load_hf(st), PROMPTS, DECODE)

    def test_gpt2_saved_model_variables(self):
        self.same_logits(*self.export("gpt2", "gpt2"))

    def test_t5_saved_model_variables(self):
        # A TF Serving version directory of TFT5ForConditionalGeneration (issue 51): its
        # variables under the TF names, its config in assets.extra; the same generation as the
        # safetensors weights.
        st = make_checkpoints.write_checkpoint(os.path.join(self.dir, "t5_st"), "t5", seed=5)
        w = safetensors_io.load(os.path.join(st, "model.safetensors"))
        sm = tf_saved_model_io.save_saved_model(os.path.join(self.dir, "t5_sm", "1"),
                                                tf_h5_io.t5_tf_weights(w))
        os.makedirs(os.path.join(sm, "assets.extra"), exist_ok=True)
        shutil.copy(os.path.join(st, "config.json"), os.path.join(sm, "assets.extra"))
        bin_ = os.environ.get("TOKENFLOW_BIN")
        if not bin_:
            self.fail("TOKENFLOW_BIN is not set")
        outs = []
        for model in (st, sm):
            r = subprocess.run([bin_, "generate", "-m", model, "--prompt-ids", "7,8,9,400",
                                "-n", "5", "-t", "0", "--ignore-eos", "--logprobs", "2",
                                "--no-echo"], capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            outs.append([ln for ln in r.stderr.splitlines() if re.match(r"\s*\d+\s", ln)])
        self.assertEqual(len(outs[0]), 5)
        self.assertEqual(outs[0], outs[1])

    def test_mistral_saved_model_with_its_config_in_assets_extra(self):
        self.same_logits(*self.export("mistral", "mistral", config_in="assets.extra"))

    def refused(self, path, expect):
        r = subprocess.run([self.tool(), "--model", path, "--prompts", "1,2", "--out",
                            os.path.join(self.dir, "x.f32")],
                           capture_output=True, text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertLess(r.returncode, 128, r.stderr[-2000:])  # an error, not a crash
        self.assertIn(expect, r.stderr)

    def test_what_cannot_be_read_is_refused_by_name(self):
        _, sm = self.export("gpt2", "noconfig", config_in=None)
        self.refused(sm, "without the model's config.json")
        _, sm = self.export("gpt2", "broken")
        index = os.path.join(sm, "variables", "variables.index")
        with open(index, "rb") as f:
            good = f.read()
        with open(index, "wb") as f:
            f.write(good[:-20])  # the table's footer cut
        self.refused(sm, "is not a tensor bundle index")
        with open(index, "wb") as f:
            f.write(good)
        data = os.path.join(sm, "variables", "variables.data-00000-of-00001")
        with open(data, "r+b") as f:
            f.truncate(100)  # entries now point past the shard's end
        self.refused(sm, "lies outside its data shard")

    def test_served_with_the_output_name_its_signature_has(self):
        _, sm = self.export("gpt2", "served", output_name="sequences")
        base = os.path.dirname(sm)  # a TF Serving base path: versions under it
        proc = subprocess.Popen([os.environ["TOKENFLOW_BIN"], "serve", "--model", "gpt=" + base,
                                 "--port", "0", "--kv-cache-memory", "8MiB", "--threads", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = proc.stdout.readline()
            port = int(line.rsplit(":", 1)[1])
            import http.client
            import json
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            c.request("GET", "/v1/models/gpt/metadata")
            meta = json.loads(c.getresponse().read())
            sig = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
            self.assertEqual(list(sig["outputs"]), ["sequences"])
            c.request("POST", "/v1/models/gpt:predict", json.dumps(
                {"inputs": {"input_ids": [[1, 5, 9]], "attention_mask": [[1, 1, 1]],
                            "max_new_tokens": 3}}), {"Content-Type": "application/json"})
            r = c.getresponse()
            body = json.loads(r.read())
            self.assertEqual(r.status, 200, body)
            self.assertEqual(len(body["outputs"][0]), 6)
            c.close()
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 0, "a graceful shutdown exits 0: " + err[-3000:])


if __name__ == "__main__":
    unittest.main()
