"""Writes Hugging Face TensorFlow checkpoints (`tf_model.h5`) with h5py, independently of
tokenflow's reader, in the layout `TF*ForCausalLM.save_pretrained` produces:

- one file: Keras's HDF5 weights (tf_keras `save_weights_to_hdf5_group`): the root attributes
  `layer_names`, `backend`, `keras_version`; per top-level layer a group with the attribute
  `weight_names` (the variables' full TF names) and one dataset per weight at
  `<layer>/<full TF name>` (the name's slashes nest groups);
- shards (transformers' `tf_shard_checkpoint`): `tf_model-0000i-of-0000n.h5` with only a root
  `layer_names` listing dataset paths (the TF names without the model's own name), and
  `tf_model.h5.index.json` mapping full names to shards.

The TF names are transformers' TF classes' variables: TFGPT2LMHeadModel (`tfgp_t2lm_head_model/
transformer/h_._0/attn/c_attn/weight:0`, TFConv1D weights [in, out] and biases [1, out], Keras
Embedding `wpe/embeddings`, LayerNormalization `gamma` / `beta`) and TFMistralForCausalLM
(`tf_mistral_for_causal_lm/model/layers.0/self_attn/q_proj/kernel:0`, Keras Dense kernels
[in, out], i.e. PyTorch's weight transposed; `lm_head` a layer of its own).
"""

import json
import os
import re

import h5py
import numpy as np

GPT2_MODEL = "tfgp_t2lm_head_model"
MISTRAL_MODEL = "tf_mistral_for_causal_lm"


def gpt2_tf_weights(w, embeddings_wte=False):
    """PyTorch GPT-2 weights ('transformer.' names or legacy bare ones) -> {full TF name: array},
    all in the top-level layer 'transformer'. embeddings_wte: the newer Keras Embedding name
    (wte/embeddings) instead of TFSharedEmbeddings' wte/weight."""
    out = {}
    for name, a in w.items():
        n = name[len("transformer."):] if name.startswith("transformer.") else name
        if re.fullmatch(r"h\.\d+\.attn\.bias", n):
            continue  # the causal mask buffer, not a variable
        parts = n.split(".")
        if parts[0] == "h":
            parts = ["h_._" + parts[1]] + parts[2:]
        last = parts[-1]
        if parts[0] == "wte":
            last = "embeddings" if embeddings_wte else "weight"
        elif parts[0] == "wpe":
            last = "embeddings"
        elif parts[-2].startswith("ln_"):
            last = {"weight": "gamma", "bias": "beta"}[last]
        elif last == "bias":
            a = a.reshape(1, -1)  # TFConv1D's bias
        tf_name = "/".join([GPT2_MODEL, "transformer"] + parts[:-1] + [last]) + ":0"
        out[tf_name] = ("transformer", a)
    return out


def mistral_tf_weights(w):
    """PyTorch Mistral weights -> {full TF name: (top-level layer, array)}."""
    out = {}
    for name, a in w.items():
        parts = name.split(".")
        if parts[0] == "lm_head":
            out[MISTRAL_MODEL + "/lm_head/kernel:0"] = ("lm_head", np.ascontiguousarray(a.T))
            continue
        assert parts[0] == "model", name
        if parts[1] == "layers":
            parts = ["model", "layers." + parts[2]] + parts[3:]
        last = parts[-1]
        if parts[1] == "embed_tokens":
            last = "embeddings"
        elif parts[-2].endswith("_proj"):
            last = "kernel"
            a = np.ascontiguousarray(a.T)  # Dense kernel [in, out]
        out["/".join([MISTRAL_MODEL] + parts[:-1] + [last]) + ":0"] = ("model", a)
    return out


T5_MODEL = "tft5_for_conditional_generation"


def t5_tf_weights(w):
    """PyTorch T5 weights -> {full TF name: (top-level layer, array)}, as
    TFT5ForConditionalGeneration names them: blocks and layers as block_._N / layer_._N, Dense
    kernels [in, out], the shared embedding and the position biases as Embedding 'embeddings',
    the norms' own 'weight'; top-level layers shared, encoder, decoder and lm_head."""
    out = {}
    for name, a in w.items():
        parts = name.split(".")
        if parts[0] == "shared":
            out[T5_MODEL + "/shared/embeddings:0"] = ("shared", a)
            continue
        if parts[0] == "lm_head":
            out[T5_MODEL + "/lm_head/kernel:0"] = ("lm_head", np.ascontiguousarray(a.T))
            continue
        tf = []
        i = 0
        while i < len(parts) - 1:
            if parts[i] in ("block", "layer"):
                tf.append("%s_._%s" % (parts[i], parts[i + 1]))
                i += 2
            else:
                tf.append(parts[i])
                i += 1
        last = "weight"
        if tf[-1] == "relative_attention_bias":
            last = "embeddings"
        elif tf[-1] in ("q", "k", "v", "o", "wi", "wi_0", "wi_1", "wo"):
            last = "kernel"
            a = np.ascontiguousarray(a.T)
        out["/".join([T5_MODEL] + tf + [last]) + ":0"] = (parts[0], a)
    return out


def _names(names, fixed):
    """A list attribute as h5py writes it: variable-length ASCII (h5py 3, a list of bytes) or
    fixed-length null-padded (h5py 2, an 'S' array)."""
    encoded = [n.encode("utf8") for n in names]
    return np.array(encoded, dtype="S") if fixed else encoded


def save_tf_h5(path, tf_weights, fixed_strings=False):
    """One tf_model.h5 in Keras's layout."""
    layers = sorted({layer for layer, _ in tf_weights.values()})
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = _names(layers, fixed_strings)
        f.attrs["backend"] = b"tensorflow"
        f.attrs["keras_version"] = b"2.15.0"
        for layer in layers:
            g = f.create_group(layer)
            names = [n for n, (lay, _) in tf_weights.items() if lay == layer]
            g.attrs["weight_names"] = _names(names, fixed_strings)
            for n in names:
                a = np.asarray(tf_weights[n][1], dtype=np.float32)
                g.create_dataset(n, data=a)
        # Newer tf_keras also writes the model's own top-level weights (none here).
        f.create_group("top_level_model_weights").attrs["weight_names"] = _names([], False)


def save_tf_h5_sharded(out_dir, tf_weights, n_shards=2):
    """tf_model-0000i-of-0000n.h5 shards and tf_model.h5.index.json, as tf_shard_checkpoint."""
    names = sorted(tf_weights)
    weight_map, total = {}, 0
    for i in range(n_shards):
        shard = "tf_model-%05d-of-%05d.h5" % (i + 1, n_shards)
        part = names[i::n_shards]
        with h5py.File(os.path.join(out_dir, shard), "w") as f:
            layers = []
            for n in part:
                a = np.asarray(tf_weights[n][1], dtype=np.float32)
                # transformers: the name without the model's own (unless it holds "model.").
                stored = n if "model." in n else "/".join(n.split("/")[1:])
                f.create_dataset(stored, data=a)
                layers.append(stored)
                weight_map[n] = shard
                total += a.nbytes
            f.attrs["layer_names"] = _names(layers, False)
    with open(os.path.join(out_dir, "tf_model.h5.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
