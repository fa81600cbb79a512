"""TensorFlow weights (issue 23, item 4): a Hugging Face `tf_model.h5`, as TFGPT2LMHeadModel and
TFMistralForCausalLM's save_pretrained write it (tf_h5_io.py, h5py), loads to the same model as
the safetensors checkpoint of the same random weights: the C++ logits of both directories are
bitwise equal, and equal to the numpy reference's within the usual tolerance. Both string forms
of Keras's name lists, the sharded form, and malformed files (an error naming the file, never a
crash) are covered.

Env: TF_DUMP_LOGITS (the C++ dump-logits tool).
"""

import os
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
from test_reference import ToolCase

PROMPTS = [[1, 5, 9, 2, 7], [3, 3, 8]]
DECODE = [[4, 6], [11, 2]]


class TfH5WeightsTest(ToolCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tf_h5_")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

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
        # A SavedModel export (not read yet): refused, saying what was found.
        for name in ("tf_model.h5", "config.json"):
            os.remove(os.path.join(tf_dir, name))
        open(os.path.join(tf_dir, "saved_model.pb"), "wb").close()
        os.makedirs(os.path.join(tf_dir, "variables"))
        refused("SavedModel", "is a TensorFlow SavedModel (saved_model.pb, variables/)")


if __name__ == "__main__":
    unittest.main()
