"""Encoder models (issue 52): BERT and XLM-RoBERTa, their sequence classifiers, against the
independent numpy encoder (np_model.Bert, written from the papers and transformers' model
description).

Random-weight checkpoints (make_checkpoints kinds bert, bert_cls, xlmr, xlmr_cls: 3 layers, 4
heads, token types, RoBERTa's offset positions) run through `tokenflow embed`: every token's
hidden state, the pooled embeddings (CLS, mean, max, last; sentence-transformers' config with
Normalize), the classifiers' scores for texts and text pairs (BERT's token types from its
WordPiece pair template), each input the same bit for bit alone and in a batch of others.

Needs TOKENFLOW_BIN (the tokenflow binary).
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import numpy as np

import make_checkpoints
import np_model

TIMEOUT_S = 300


def write_bert_vocab(path, n):
    """A BERT vocab.txt of n tokens: the specials, then words w3 .. and their ## forms."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "house", "is", "small", "big",
             "query", "document", "about", "cats", "dogs", "and", "or", "not", ",", "."]
    tokens += words + ["##s", "##ed", "##ing"]
    k = 0
    while len(tokens) < n:
        tokens.append("w%d" % k)
        k += 1
    with open(path, "w") as f:
        f.write("\n".join(tokens[:n]) + "\n")
    return {t: i for i, t in enumerate(tokens[:n])}


def bert_to_gguf(model_dir, path, vocab=None, pooling_type=None):
    """A BERT-family checkpoint as llama.cpp's converter writes it (BertModel / RobertaModel):
    "bert" names without the bert./roberta. prefix, RoBERTa's first pad_token_id + 1 position
    rows dropped (positions count from 0), the pooler dropped, a classifier as cls (BERT's pooler
    dense, RoBERTa's classifier.dense) and cls.output; a WordPiece vocabulary in phantom-space
    form (a word's first piece with U+2581, continuations without "##")."""
    import gguf_io
    import safetensors_io
    from test_gguf import _f32_tensor
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    w = safetensors_io.load_dir(model_dir)
    roberta = cfg["model_type"] == "xlm-roberta"
    off = cfg["pad_token_id"] + 1 if roberta else 0
    cls = cfg["architectures"][0].endswith("SequenceClassification")
    top = {"embeddings.word_embeddings.weight": "token_embd.weight",
           "embeddings.token_type_embeddings.weight": "token_types.weight",
           "embeddings.position_embeddings.weight": "position_embd.weight",
           "embeddings.LayerNorm.weight": "token_embd_norm.weight",
           "embeddings.LayerNorm.bias": "token_embd_norm.bias",
           "classifier.dense.weight": "cls.weight", "classifier.dense.bias": "cls.bias",
           "classifier.out_proj.weight": "cls.output.weight", "classifier.out_proj.bias": "cls.output.bias",
           "classifier.weight": "cls.output.weight", "classifier.bias": "cls.output.bias"}
    if cls and not roberta:
        top.update({"pooler.dense.weight": "cls.weight", "pooler.dense.bias": "cls.bias"})
    block = {"attention.self.query": "attn_q", "attention.self.key": "attn_k",
             "attention.self.value": "attn_v", "attention.output.dense": "attn_output",
             "attention.output.LayerNorm": "attn_output_norm", "intermediate.dense": "ffn_up",
             "output.dense": "ffn_down", "output.LayerNorm": "layer_output_norm"}
    tensors = []
    for name, a in w.items():
        for p in ("bert.", "roberta."):
            if name.startswith(p):
                name = name[len(p):]
        if name == "embeddings.position_embeddings.weight":
            a = a[off:]
        if name in top:
            _f32_tensor(tensors, top[name], a)
        elif name.startswith("encoder.layer."):
            _, _, layer, rest = name.split(".", 3)
            base, kind = rest.rsplit(".", 1)
            _f32_tensor(tensors, "blk.%s.%s.%s" % (layer, block[base], kind), a)
    meta = {"general.architecture": "bert",
            "bert.context_length": gguf_io.U32(cfg["max_position_embeddings"] - off),
            "bert.embedding_length": gguf_io.U32(cfg["hidden_size"]),
            "bert.feed_forward_length": gguf_io.U32(cfg["intermediate_size"]),
            "bert.block_count": gguf_io.U32(cfg["num_hidden_layers"]),
            "bert.attention.head_count": gguf_io.U32(cfg["num_attention_heads"]),
            "bert.attention.layer_norm_epsilon": gguf_io.F32(cfg["layer_norm_eps"]),
            "bert.attention.causal": False}
    if pooling_type is not None:
        meta["bert.pooling_type"] = gguf_io.U32(pooling_type)
    if vocab is not None:
        phantom = [t if t.startswith("[") and t.endswith("]") else t[2:] if t.startswith("##")
                   else "\u2581" + t for t in sorted(vocab, key=vocab.get)]
        meta.update({"tokenizer.ggml.model": "bert", "tokenizer.ggml.pre": "default",
                     "tokenizer.ggml.tokens": gguf_io.Typed(gguf_io.ARRAY, (gguf_io.STRING, phantom)),
                     "tokenizer.ggml.token_type_count": gguf_io.U32(cfg["type_vocab_size"]),
                     "tokenizer.ggml.bos_token_id": gguf_io.U32(vocab["[CLS]"]),
                     "tokenizer.ggml.seperator_token_id": gguf_io.U32(vocab["[SEP]"]),
                     "tokenizer.ggml.unknown_token_id": gguf_io.U32(vocab["[UNK]"]),
                     "tokenizer.ggml.padding_token_id": gguf_io.U32(vocab["[PAD]"])})
    gguf_io.write_gguf(path, meta, tensors)


def nomic_to_gguf(model_dir, path, pooling_type=1):
    """A NomicBertModel checkpoint as llama.cpp's converter writes it ("nomic-bert"): attn_qkv,
    attn_output, attn_output_norm, ffn_up (fc11) / ffn_gate (fc12) / ffn_down, layer_output_norm,
    token_embd_norm (emb_ln), rope.freq_base; no position table."""
    import gguf_io
    import safetensors_io
    from test_gguf import _f32_tensor
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    w = safetensors_io.load_dir(model_dir)
    top = {"embeddings.word_embeddings.weight": "token_embd.weight",
           "embeddings.token_type_embeddings.weight": "token_types.weight",
           "emb_ln.weight": "token_embd_norm.weight", "emb_ln.bias": "token_embd_norm.bias"}
    block = {"attn.Wqkv": "attn_qkv", "attn.out_proj": "attn_output", "norm1": "attn_output_norm",
             "mlp.fc11": "ffn_up", "mlp.fc12": "ffn_gate", "mlp.fc2": "ffn_down",
             "norm2": "layer_output_norm"}
    tensors = []
    for name, a in w.items():
        if name in top:
            _f32_tensor(tensors, top[name], a)
        else:
            _, _, layer, rest = name.split(".", 3)
            base, kind = rest.rsplit(".", 1)
            _f32_tensor(tensors, "blk.%s.%s.%s" % (layer, block[base], kind), a)
    a = "nomic-bert."
    meta = {"general.architecture": "nomic-bert",
            a + "context_length": gguf_io.U32(cfg["n_positions"]),
            a + "embedding_length": gguf_io.U32(cfg["n_embd"]),
            a + "feed_forward_length": gguf_io.U32(cfg["n_inner"]),
            a + "block_count": gguf_io.U32(cfg["n_layer"]),
            a + "attention.head_count": gguf_io.U32(cfg["n_head"]),
            a + "attention.layer_norm_epsilon": gguf_io.F32(cfg["layer_norm_epsilon"]),
            a + "attention.causal": False,
            a + "rope.freq_base": gguf_io.F32(cfg["rotary_emb_base"]),
            a + "pooling_type": gguf_io.U32(pooling_type)}
    gguf_io.write_gguf(path, meta, tensors)


def jina_to_gguf(model_dir, path, pooling_type=1):
    """A JinaBertModel checkpoint as llama.cpp's converter writes it ("jina-bert-v2"): BERT's
    names without position_embd, gated_layers split into ffn_gate (its first half) and ffn_up,
    mlp.wo as ffn_down, mlp.layernorm as layer_output_norm."""
    import gguf_io
    import safetensors_io
    from test_gguf import _f32_tensor
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    w = safetensors_io.load_dir(model_dir)
    ff = cfg["intermediate_size"]
    top = {"embeddings.word_embeddings.weight": "token_embd.weight",
           "embeddings.token_type_embeddings.weight": "token_types.weight",
           "embeddings.LayerNorm.weight": "token_embd_norm.weight",
           "embeddings.LayerNorm.bias": "token_embd_norm.bias"}
    block = {"attention.self.query": "attn_q", "attention.self.key": "attn_k",
             "attention.self.value": "attn_v", "attention.output.dense": "attn_output",
             "attention.output.LayerNorm": "attn_output_norm", "mlp.wo": "ffn_down",
             "mlp.layernorm": "layer_output_norm"}
    tensors = []
    for name, a in w.items():
        if name in top:
            _f32_tensor(tensors, top[name], a)
            continue
        _, _, layer, rest = name.split(".", 3)
        base, kind = rest.rsplit(".", 1)
        if base == "mlp.gated_layers":
            _f32_tensor(tensors, "blk.%s.ffn_gate.weight" % layer, a[:ff])
            _f32_tensor(tensors, "blk.%s.ffn_up.weight" % layer, a[ff:])
        else:
            _f32_tensor(tensors, "blk.%s.%s.%s" % (layer, block[base], kind), a)
    a = "jina-bert-v2."
    meta = {"general.architecture": "jina-bert-v2",
            a + "context_length": gguf_io.U32(cfg["max_position_embeddings"]),
            a + "embedding_length": gguf_io.U32(cfg["hidden_size"]),
            a + "feed_forward_length": gguf_io.U32(ff),
            a + "block_count": gguf_io.U32(cfg["num_hidden_layers"]),
            a + "attention.head_count": gguf_io.U32(cfg["num_attention_heads"]),
            a + "attention.layer_norm_epsilon": gguf_io.F32(cfg["layer_norm_eps"]),
            a + "attention.causal": False,
            a + "pooling_type": gguf_io.U32(pooling_type)}
    gguf_io.write_gguf(path, meta, tensors)


class EncoderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.bin = os.environ["TOKENFLOW_BIN"]
        cls.tmp = tempfile.TemporaryDirectory(prefix="tf_enc_")
        cls.models = {}
        for kind in ("bert", "bert_cls", "xlmr", "xlmr_cls", "nomic", "jina"):
            d = make_checkpoints.write_checkpoint(os.path.join(cls.tmp.name, kind), kind, seed=5)
            cls.models[kind] = (d, np_model.load_hf(d))
        cls.vocab = write_bert_vocab(os.path.join(cls.models["bert_cls"][0], "vocab.txt"), 300)
        rng = np.random.default_rng(3)
        # Lengths 1 .. 64 (BERT's whole context; XLM-R's is 64 too: 66 positions from 2).
        cls.inputs = [[int(t) for t in rng.integers(5, 300, size=n)] for n in (1, 7, 16, 33, 64, 5)]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def embed(self, model, lines, *args):
        path = os.path.join(self.tmp.name, "inputs.jsonl")
        with open(path, "w") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
        r = subprocess.run([self.bin, "embed", "-m", model, "--input-file", path, *args],
                           capture_output=True, text=True, timeout=TIMEOUT_S)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        out = [json.loads(l) for l in r.stdout.splitlines()]
        self.assertEqual([o["index"] for o in out], list(range(len(lines))))
        return out

    def test_hidden_states_match_numpy(self):
        for kind in ("bert", "xlmr"):
            model, ref = self.models[kind]
            out = self.embed(model, [{"ids": ids} for ids in self.inputs], "--hidden")
            for ids, o in zip(self.inputs, out):
                want = ref.hidden(ids)
                got = np.array(o["hidden"])
                self.assertEqual(got.shape, want.shape)
                np.testing.assert_allclose(got, want, rtol=0, atol=2e-4, err_msg="%s len %d" % (kind, len(ids)))

    def test_nomic_bert_rotary_swiglu_matches_numpy(self):
        # Rotary positions in an encoder: every input from position 0 whatever its batch, so the
        # same tokens give the same states alone and together; types from the pair template.
        model, ref = self.models["nomic"]
        lines = [{"ids": ids} for ids in self.inputs]
        out = self.embed(model, lines, "--hidden", "--batch", "6")
        for ids, o in zip(self.inputs, out):
            np.testing.assert_allclose(np.array(o["hidden"]), ref.hidden(ids), rtol=0, atol=2e-4,
                                       err_msg="len %d" % len(ids))
        alone = self.embed(model, lines, "--hidden", "--batch", "1")
        self.assertEqual([o["hidden"] for o in out], [o["hidden"] for o in alone])
        types = [0] * 3 + [1] * 4
        out = self.embed(model, [{"ids": self.inputs[1], "types": types}], "--hidden")
        np.testing.assert_allclose(np.array(out[0]["hidden"]), ref.hidden(self.inputs[1], types),
                                   rtol=0, atol=2e-4)
        # Dynamic NTK scaling past max_trained_positions (32): inputs of 33 and 64 tokens take a
        # larger base, shorter ones none.
        scaled = os.path.join(self.tmp.name, "nomic_scaled")
        shutil.copytree(model, scaled)
        with open(os.path.join(scaled, "config.json")) as f:
            cfg = json.load(f)
        cfg["rotary_scaling_factor"] = 2.0
        with open(os.path.join(scaled, "config.json"), "w") as f:
            json.dump(cfg, f)
        sref = np_model.load_hf(scaled)
        out = self.embed(scaled, lines, "--hidden")
        for ids, o in zip(self.inputs, out):
            np.testing.assert_allclose(np.array(o["hidden"]), sref.hidden(ids), rtol=0, atol=2e-4,
                                       err_msg="scaled, len %d" % len(ids))
        self.assertGreater(np.abs(sref.hidden(self.inputs[4]) - ref.hidden(self.inputs[4])).max(), 1e-3)
        # llama.cpp's nomic-bert GGUF, mean pooling from the file.
        g = os.path.join(self.tmp.name, "nomic.gguf")
        nomic_to_gguf(model, g, pooling_type=1)
        out = self.embed(g, lines)
        for ids, o in zip(self.inputs, out):
            np.testing.assert_allclose(o["embedding"], ref.hidden(ids).mean(0), rtol=0, atol=2e-4)

    def test_jina_bert_alibi_geglu_matches_numpy(self):
        # ALiBi in an encoder (6 heads: the interleaved slopes), each input's distances its own;
        # inputs past 64 tokens too (ALiBi has no position table: 128 here).
        model, ref = self.models["jina"]
        inputs = self.inputs + [[int(t) for t in np.random.default_rng(4).integers(5, 300, size=100)]]
        lines = [{"ids": ids} for ids in inputs]
        out = self.embed(model, lines, "--hidden", "--batch", "7")
        for ids, o in zip(inputs, out):
            np.testing.assert_allclose(np.array(o["hidden"]), ref.hidden(ids), rtol=0, atol=2e-4,
                                       err_msg="len %d" % len(ids))
        alone = self.embed(model, lines, "--hidden", "--batch", "1")
        self.assertEqual([o["hidden"] for o in out], [o["hidden"] for o in alone])
        # 6 heads: the 4-head slopes 2^-2 .. 2^-8, then the 8-head ones 2^-1 and 2^-3.
        self.assertEqual(np_model.JinaBert.slopes(6), [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3])
        # llama.cpp's jina-bert-v2 GGUF, mean pooling from the file.
        g = os.path.join(self.tmp.name, "jina.gguf")
        jina_to_gguf(model, g, pooling_type=1)
        out = self.embed(g, lines)
        for ids, o in zip(inputs, out):
            np.testing.assert_allclose(o["embedding"], ref.hidden(ids).mean(0), rtol=0, atol=2e-4)

    def test_pooling_modes(self):
        model, ref = self.models["bert"]
        pools = {"cls": lambda h: h[0], "mean": lambda h: h.mean(0), "max": lambda h: h.max(0),
                 "last": lambda h: h[-1]}
        for name, f in pools.items():
            out = self.embed(model, [{"ids": ids} for ids in self.inputs], "--pooling", name)
            for ids, o in zip(self.inputs, out):
                np.testing.assert_allclose(o["embedding"], f(ref.hidden(ids)), rtol=0, atol=2e-4,
                                           err_msg=name)
        # sentence-transformers' files: mean pooling, then Normalize, as the model's default.
        with open(os.path.join(model, "modules.json"), "w") as fh:
            json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                       {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                       {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}], fh)
        os.makedirs(os.path.join(model, "1_Pooling"), exist_ok=True)
        with open(os.path.join(model, "1_Pooling", "config.json"), "w") as fh:
            json.dump({"word_embedding_dimension": 48, "pooling_mode_cls_token": False,
                       "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
                       "pooling_mode_mean_sqrt_len_tokens": False}, fh)
        try:
            out = self.embed(model, [{"ids": ids} for ids in self.inputs])
            for ids, o in zip(self.inputs, out):
                m = ref.hidden(ids).mean(0)
                np.testing.assert_allclose(o["embedding"], m / np.linalg.norm(m), rtol=0, atol=1e-5)
        finally:
            os.remove(os.path.join(model, "modules.json"))

    def test_classifiers_score_texts_and_pairs(self):
        # XLM-R's head over ids; BERT's over a query/document pair through its WordPiece pair
        # template: [CLS] query [SEP] document [SEP], the document's tokens of type 1.
        model, ref = self.models["xlmr_cls"]
        out = self.embed(model, [{"ids": ids} for ids in self.inputs])
        for ids, o in zip(self.inputs, out):
            self.assertEqual(o["labels"], ["negative", "neutral", "positive"])
            np.testing.assert_allclose(o["scores"], ref.scores(ids), rtol=0, atol=2e-4)
        model, ref = self.models["bert_cls"]
        v = self.vocab
        pairs = [("the cat sat", "a dog ran on the mat"), ("query", "document about cats and dogs")]
        out = self.embed(model, [{"text": q, "pair": d} for q, d in pairs])
        for (q, d), o in zip(pairs, out):
            qi, di = [v[t] for t in q.split()], [v[t] for t in d.split()]
            ids = [v["[CLS]"]] + qi + [v["[SEP]"]] + di + [v["[SEP]"]]
            types = [0] * (len(qi) + 2) + [1] * (len(di) + 1)
            self.assertEqual(o["tokens"], len(ids))
            np.testing.assert_allclose(o["scores"], ref.scores(ids, types), rtol=0, atol=2e-4)
            # The token types matter: scoring the same ids as one segment differs.
            self.assertGreater(np.abs(np.array(o["scores"]) - ref.scores(ids)).max(), 1e-3)

    def test_gguf_as_llama_cpp_writes_it(self):
        # BERT with its WordPiece vocabulary and mean pooling in the file; XLM-R's classifier.
        model, ref = self.models["bert_cls"]
        g = os.path.join(self.tmp.name, "bert_cls.gguf")
        bert_to_gguf(model, g, vocab=self.vocab, pooling_type=4)
        pairs = [("the cat sat", "a dog ran on the mat")]
        v = self.vocab
        out = self.embed(g, [{"text": q, "pair": d} for q, d in pairs])
        q, d = pairs[0]
        ids = [v["[CLS]"]] + [v[t] for t in q.split()] + [v["[SEP]"]] + [v[t] for t in d.split()] + [v["[SEP]"]]
        types = [0] * 5 + [1] * 7
        np.testing.assert_allclose(out[0]["scores"], ref.scores(ids, types), rtol=0, atol=2e-4)
        model, ref = self.models["bert"]
        g = os.path.join(self.tmp.name, "bert.gguf")
        bert_to_gguf(model, g, pooling_type=1)
        out = self.embed(g, [{"ids": ids} for ids in self.inputs])
        for ids, o in zip(self.inputs, out):
            np.testing.assert_allclose(o["embedding"], ref.hidden(ids).mean(0), rtol=0, atol=2e-4)
        model, ref = self.models["xlmr_cls"]
        g = os.path.join(self.tmp.name, "xlmr_cls.gguf")
        bert_to_gguf(model, g)
        out = self.embed(g, [{"ids": ids} for ids in self.inputs])
        for ids, o in zip(self.inputs, out):
            np.testing.assert_allclose(o["scores"], ref.scores(ids), rtol=0, atol=2e-4)

    def test_an_input_is_the_same_alone_and_in_any_batch(self):
        model, _ = self.models["xlmr"]
        lines = [{"ids": ids} for ids in self.inputs]
        alone = self.embed(model, lines, "--hidden", "--batch", "1")
        together = self.embed(model, lines, "--hidden", "--batch", "6")
        pairs = self.embed(model, lines, "--hidden", "--batch", "2")
        for a, b, c in zip(alone, together, pairs):
            self.assertEqual(a["hidden"], b["hidden"])
            self.assertEqual(a["hidden"], c["hidden"])

    def test_bad_inputs_are_clear_errors(self):
        model, _ = self.models["bert"]
        for line, message in (({"ids": list(range(5, 70))}, "has 65 tokens; the model takes at most 64"),
                              ({"ids": [5, 300]}, "token id 300 is outside the vocabulary"),
                              ({"ids": []}, "input 0 is empty")):
            path = os.path.join(self.tmp.name, "bad.jsonl")
            with open(path, "w") as f:
                f.write(json.dumps(line) + "\n")
            r = subprocess.run([self.bin, "embed", "-m", model, "--input-file", path],
                               capture_output=True, text=True, timeout=TIMEOUT_S)
            self.assertEqual(r.returncode, 1)
            self.assertIn(message, r.stderr)
        # An encoder does not generate; a generator is not an encoder.
        r = subprocess.run([self.bin, "generate", "-m", model, "--prompt-ids", "5,6", "-n", "2"],
                           capture_output=True, text=True, timeout=TIMEOUT_S)
        self.assertEqual(r.returncode, 1)
        self.assertIn("is an encoder", r.stderr)
        gpt2 = make_checkpoints.write_checkpoint(os.path.join(self.tmp.name, "gpt2"), "gpt2")
        r = subprocess.run([self.bin, "embed", "-m", gpt2, "--input-file", path],
                           capture_output=True, text=True, timeout=TIMEOUT_S)
        self.assertEqual(r.returncode, 1)
        self.assertIn("is a generator, not an encoder", r.stderr)


if __name__ == "__main__":
    unittest.main()
