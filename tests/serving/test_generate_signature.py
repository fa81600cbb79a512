"""TF Serving's generate signature (issue 23, item 1): a Hugging Face TF model exported with
`serving_fn(input_ids, attention_mask) = model.generate(...)` as its serving_default, asked as
TF Serving's clients ask it: REST row (`instances`) and columnar (`inputs`) bodies as TF
Serving's REST documentation writes them, gRPC `PredictRequest`s built with predict_pb2 /
tensor_pb2 in every TensorProto encoding (repeated int_val / int64_val and tensor_content).

The answer is checked against transformers' greedy generate() written here in numpy from its
documented behaviour (a padded batch: position ids from the attention mask's cumulative sum,
padded keys masked, rows that met an end-of-sequence id continued with the pad id until every
row has finished or max_length is reached) over stories260K's weights read by the reference
reader (tests/reference/np_model.py), not against tokenflow's own output.

Env: TOKENFLOW_BIN, TF_SHARED_DIR, TF_REFERENCE_DIR.
"""

import json
import math
import os
import shutil
import sys
import tempfile
import unittest

import numpy as np

import test_grpc
from test_grpc import C, predict_pb2, prediction_service_pb2_grpc, tensor_pb2, types_pb2
from test_grpc import get_model_metadata_pb2
from test_registry import make_version
from test_server import Client, stop_server

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("TF_REFERENCE_DIR",
                                  os.path.join(os.path.dirname(HERE), "reference")))
import np_model  # noqa: E402

STORIES_BIN = test_grpc.STORIES_BIN
EOS = 432  # the configured model's end-of-sequence id: a token greedy decoding meets early
PAD = 0


def masked_logits(m, ids, mask):
    """Logits of one padded row as transformers computes them: position ids are the mask's
    cumulative sum minus one (1 at padded positions, which no real position reads), and keys
    at padded positions are masked out."""
    ids = np.asarray(ids, dtype=np.int64)
    mask = np.asarray(mask, dtype=bool)
    T = len(ids)
    H, KV, hd = m.n_heads, m.n_kv_heads, m.head_dim
    pos = np.cumsum(mask) - 1
    pos[~mask] = 1
    allowed = np.tril(np.ones((T, T), dtype=bool)) & mask[None, :]
    x = m.embed[ids]
    for L in m.layers:
        h = np_model.rms_norm(x, L["input_layernorm.weight"], m.eps)
        q = (h @ L["q_proj.weight"].T).reshape(T, H, hd)
        k = (h @ L["k_proj.weight"].T).reshape(T, KV, hd)
        v = (h @ L["v_proj.weight"].T).reshape(T, KV, hd)
        q = m.rope(q, pos, m.rope_theta)
        k = m.rope(k, pos, m.rope_theta)
        out = np.empty((T, H, hd), dtype=np.float32)
        for head in range(H):
            g = head // (H // KV)
            s = (q[:, head, :] @ k[:, g, :].T) / math.sqrt(hd)
            s = np.where(allowed, s, np.finfo(np.float32).min)  # as transformers masks
            out[:, head, :] = np_model.softmax(s) @ v[:, g, :]
        x = x + out.reshape(T, H * hd) @ L["o_proj.weight"].T
        h = np_model.rms_norm(x, L["post_attention_layernorm.weight"], m.eps)
        x = x + (np_model.silu(h @ L["gate_proj.weight"].T) * (h @ L["up_proj.weight"].T)) @ \
            L["down_proj.weight"].T
    return np_model.rms_norm(x, m.norm, m.eps) @ m.head.T


def hf_greedy_generate(m, input_ids, attention_mask, max_new_tokens, eos_ids, pad_id):
    """transformers' greedy generate() over a padded batch. Returns the [batch, len] ids and the
    smallest top-1 / top-2 logit margin met (to tell a real mismatch from a near tie)."""
    ids = [list(r) for r in input_ids]
    mask = [list(r) for r in attention_mask]
    unfinished = [True] * len(ids)
    margin = float("inf")
    for _ in range(max_new_tokens):
        for b in range(len(ids)):
            t = pad_id
            if unfinished[b]:
                last = masked_logits(m, ids[b], mask[b])[-1]
                t = int(np.argmax(last))
                top2 = np.partition(last, -2)[-2:]
                margin = min(margin, float(top2[1] - top2[0]))
                if t in eos_ids:
                    unfinished[b] = False
            ids[b].append(t)
            mask[b].append(1)
        if not any(unfinished):
            break
    return ids, margin


def left_pad(rows, pad=PAD):
    width = max(len(r) for r in rows)
    return ([[pad] * (width - len(r)) + r for r in rows],
            [[0] * (width - len(r)) + [1] * len(r) for r in rows])


def right_pad(rows, pad=PAD):
    width = max(len(r) for r in rows)
    return ([r + [pad] * (width - len(r)) for r in rows],
            [[1] * len(r) + [0] * (width - len(r)) for r in rows])


PROMPTS = [[1, 403, 407], [1, 365, 283, 261, 399], [1, 267]]


class GenerateSignatureTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = np_model.load_llama2c(STORIES_BIN)
        cls.dir = tempfile.mkdtemp(prefix="tf_generate_")
        plain = os.path.join(cls.dir, "plain")
        make_version(plain, 1)
        configured = os.path.join(cls.dir, "configured")
        with open(os.path.join(make_version(configured, 1), "generation_config.json"), "w") as f:
            json.dump({"_from_model_config": True, "eos_token_id": EOS, "pad_token_id": PAD,
                       "max_length": 14, "transformers_version": "4.44.0",
                       "forced_eos_token_id": EOS}, f)  # not applied: logged
        config = os.path.join(cls.dir, "models.config")
        with open(config, "w") as f:
            f.write("model_config_list {\n"
                    "  config { name: 'plain' base_path: '%s' model_platform: 'tensorflow' }\n"
                    "  config { name: 'configured' base_path: '%s' }\n"
                    "  config { name: 'named' base_path: '%s'\n"
                    "    generate_signature { signature_name: 'generate' output_name: 'ids'\n"
                    "                         max_new_tokens: 4 } }\n"
                    "}\n" % (plain, configured, plain))
        cls.log = os.path.join(cls.dir, "server.log")
        cls.proc, port, cls.channel = test_grpc.start("--model_config_file", config, log=cls.log)
        cls.c = Client(port)
        cls.stub = prediction_service_pb2_grpc.PredictionServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        rc, _ = stop_server(cls.proc)
        with open(cls.log) as f:
            log = f.read()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert rc == 0, log[-3000:]
        assert "forced_eos_token_id" in log  # the setting it does not apply is named

    def predict(self, body, model="plain", status=200):
        s, b, text, _ = self.c.post("/v1/models/%s:predict" % model, body)
        self.assertEqual(s, status, text)
        return b

    def reference(self, rows, max_new, eos_ids, pad=PAD):
        ids, mask = left_pad(rows, pad)
        want, margin = hf_greedy_generate(self.model, ids, mask, max_new, eos_ids, pad)
        self.assertGreater(margin, 1e-3, "a near tie: choose other prompts")
        return want

    def test_left_padded_batch_is_what_generate_returns(self):
        ids, mask = left_pad(PROMPTS)
        want = self.reference(PROMPTS, 8, [1, 2], PAD)
        got = self.predict({"inputs": {"input_ids": ids, "attention_mask": mask,
                                       "max_new_tokens": 8}})
        self.assertEqual(got, {"outputs": want})  # one output: its value alone, as TF Serving
        # The row format: one instance per row; the same answer under "predictions".
        got = self.predict({"instances": [{"input_ids": i, "attention_mask": a,
                                           "max_new_tokens": [8]} for i, a in zip(ids, mask)]})
        self.assertEqual(got, {"predictions": want})
        # max_length counts the input's positions (padding included), as generate() does.
        width = len(ids[0])
        got = self.predict({"inputs": {"input_ids": ids, "attention_mask": mask,
                                       "max_length": width + 8}, "signature_name": "serving_default"})
        self.assertEqual(got["outputs"], want)
        # Without max_length: generate()'s default of 20.
        got = self.predict({"inputs": {"input_ids": ids, "attention_mask": mask}})
        self.assertEqual(got["outputs"], self.reference(PROMPTS, 20 - width, [1, 2], PAD))

    def test_right_padding_continues_after_the_real_positions(self):
        ids, mask = right_pad(PROMPTS, pad=7)
        want = self.reference(PROMPTS, 6, [1, 2], PAD)
        got = self.predict({"inputs": {"input_ids": ids, "attention_mask": mask,
                                       "max_new_tokens": 6, "pad_token_id": PAD}})["outputs"]
        width = len(ids[0])
        for row, prompt, ref in zip(got, PROMPTS, want):
            continuation = ref[width:]
            self.assertEqual(row[:len(prompt) + 6], prompt + continuation)
            self.assertEqual(row[len(prompt) + 6:], [PAD] * (len(row) - len(prompt) - 6))
        self.assertEqual(len(got[0]), max(len(p) for p in PROMPTS) + 6)

    def test_generation_config_eos_pad_and_max_length(self):
        # configured: generation_config.json says eos 432, pad 0, max_length 14.
        rows = [[1, 403, 407], [1, 267, 261]]
        ids, mask = left_pad(rows)
        want = self.reference(rows, 14 - len(ids[0]), [EOS], PAD)
        got = self.predict({"inputs": {"input_ids": ids, "attention_mask": mask}},
                           model="configured")["outputs"]
        self.assertEqual(got, want)
        self.assertIn(EOS, got[0][3:])  # the case under test: a row ends early, then pads
        end = got[0].index(EOS, 3)
        self.assertTrue(all(t == PAD for t in got[0][end + 1:]) and end + 1 < len(got[0]))
        # A request's own settings win over the file's.
        got = self.predict({"inputs": {"input_ids": ids, "attention_mask": mask,
                                       "eos_token_id": [2], "max_new_tokens": 5, "pad_token_id": 3}},
                           model="configured")["outputs"]
        self.assertEqual(got, self.reference(rows, 5, [2], 3))

    def test_a_configured_signature_name_output_and_settings(self):
        # named: generate_signature { signature_name: 'generate' output_name: 'ids'
        # max_new_tokens: 4 }; a request naming it with input_ids alone is a generate request.
        got = self.predict({"signature_name": "generate", "instances": [{"input_ids": [1, 403]}]},
                           model="named")
        self.assertEqual(got["predictions"], self.reference([[1, 403]], 4, [1, 2]))
        got = self.predict({"signature_name": "generate",
                            "inputs": {"input_ids": [[1, 403]], "max_new_tokens": 2}},
                           model="named")
        self.assertEqual(got["outputs"], self.reference([[1, 403]], 2, [1, 2]))
        req = predict_pb2.PredictRequest()
        req.model_spec.name = "named"
        req.model_spec.signature_name = "generate"
        req.inputs["input_ids"].CopyFrom(self.int_tensor([[1, 403]], types_pb2.DT_INT32))
        resp = self.stub.Predict(req, timeout=60)
        self.assertEqual(list(resp.outputs), ["ids"])
        self.assertEqual(resp.model_spec.signature_name, "generate")
        self.assertEqual(self.matrix(resp.outputs["ids"]), self.reference([[1, 403]], 4, [1, 2]))
        # The signature names what the model has: 'serving_default' is not this model's.
        b = self.predict({"signature_name": "other", "inputs": {"input_ids": [[1, 403]]}},
                         model="named", status=400)
        self.assertIn('"other" not found in signature def', b["error"])

    # ---- gRPC

    def int_tensor(self, rows, dtype, content=False):
        t = tensor_pb2.TensorProto(dtype=dtype)
        shape = np.asarray(rows).shape
        for d in shape:
            t.tensor_shape.dim.add(size=d)
        flat = np.asarray(rows).reshape(-1)
        if content:
            t.tensor_content = flat.astype("<i4" if dtype == types_pb2.DT_INT32 else "<i8").tobytes()
        elif dtype == types_pb2.DT_INT32:
            t.int_val.extend(int(v) for v in flat)
        else:
            t.int64_val.extend(int(v) for v in flat)
        return t

    @staticmethod
    def matrix(t):
        """tf.make_ndarray's reading of an int tensor (repeated field or tensor_content)."""
        shape = [d.size for d in t.tensor_shape.dim]
        if t.tensor_content:
            flat = np.frombuffer(t.tensor_content, dtype="<i4" if t.dtype == types_pb2.DT_INT32
                                 else "<i8")
        else:
            flat = np.array(t.int_val if t.dtype == types_pb2.DT_INT32 else t.int64_val)
        return flat.reshape(shape).tolist()

    def test_grpc_predict_in_every_tensor_encoding(self):
        ids, mask = left_pad(PROMPTS)
        want = self.reference(PROMPTS, 5, [1, 2])
        for dtype in (types_pb2.DT_INT32, types_pb2.DT_INT64):
            for content in (False, True):
                req = predict_pb2.PredictRequest()
                req.model_spec.name = "plain"
                req.model_spec.signature_name = "serving_default"
                req.inputs["input_ids"].CopyFrom(self.int_tensor(ids, dtype, content))
                req.inputs["attention_mask"].CopyFrom(self.int_tensor(mask, dtype, content))
                req.inputs["max_new_tokens"].CopyFrom(self.int_tensor([5], dtype, content))
                req.output_filter.append("output_0")
                resp = self.stub.Predict(req, timeout=60)
                self.assertEqual(list(resp.outputs), ["output_0"])
                out = resp.outputs["output_0"]
                self.assertEqual(out.dtype, types_pb2.DT_INT32)
                self.assertEqual(self.matrix(out), want, (dtype, content))
                self.assertEqual(resp.model_spec.signature_name, "serving_default")
                self.assertEqual(resp.model_spec.version.value, 1)
        req.output_filter[:] = ["text"]  # not an output of this signature
        with self.assertRaises(test_grpc.grpc.RpcError) as e:
            self.stub.Predict(req, timeout=60)
        self.assertEqual(e.exception.code(), C.INVALID_ARGUMENT)
        self.assertIn("output tensor alias not found in signature: text", e.exception.details())

    def test_metadata_describes_the_generate_signature(self):
        b = self.c.get("/v1/models/plain/metadata")[1]
        defs = b["metadata"]["signature_def"]["signature_def"]
        sig = defs["serving_default"]
        self.assertEqual(sorted(sig["inputs"]), ["attention_mask", "input_ids"])
        self.assertEqual(list(sig["outputs"]), ["output_0"])
        for t in list(sig["inputs"].values()) + list(sig["outputs"].values()):
            self.assertEqual(t["dtype"], "DT_INT32")
            self.assertEqual([d["size"] for d in t["tensor_shape"]["dim"]], ["-1", "-1"])
        self.assertEqual(sig["method_name"], "tensorflow/serving/predict")
        self.assertIn("prompt", defs["tokenflow"]["inputs"])  # tokenflow's own, by its name
        named = self.c.get("/v1/models/named/metadata")[1]["metadata"]["signature_def"]
        self.assertEqual(sorted(named["signature_def"]), ["generate", "tokenflow"])
        self.assertEqual(list(named["signature_def"]["generate"]["outputs"]), ["ids"])
        req = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        req.model_spec.name = "plain"
        r = self.stub.GetModelMetadata(req, timeout=30)
        grpc_defs = test_grpc.get_model_metadata_pb2.SignatureDefMap()
        self.assertTrue(r.metadata["signature_def"].Unpack(grpc_defs))
        g = grpc_defs.signature_def["serving_default"]
        self.assertEqual(sorted(g.inputs), ["attention_mask", "input_ids"])
        self.assertEqual(g.inputs["input_ids"].dtype, types_pb2.DT_INT32)
        self.assertEqual([d.size for d in g.outputs["output_0"].tensor_shape.dim], [-1, -1])

    # ---- sampling, beams, several sequences

    def test_sampling_and_beams_return_num_return_sequences_rows_per_row(self):
        ids, mask = left_pad(PROMPTS[:2])
        body = {"inputs": {"input_ids": ids, "attention_mask": mask, "max_new_tokens": 6,
                           "do_sample": True, "num_return_sequences": 3, "seed": 11,
                           "temperature": 1.5, "top_k": 0}}
        a = self.predict(body)["outputs"]
        self.assertEqual(len(a), 6)  # generate()'s order: row 0's three, then row 1's
        for k in range(6):
            self.assertEqual(a[k][:len(ids[0])], ids[k // 3])
        self.assertEqual(self.predict(body)["outputs"], a)  # seeded: the same answer
        self.assertGreater(len({tuple(r) for r in a}), 2)  # sampled, not one path
        # Beam search, stopping at a given end-of-sequence id.
        body = {"instances": [{"input_ids": [1, 403, 407], "attention_mask": [1, 1, 1],
                               "max_new_tokens": 6, "num_beams": 4, "num_return_sequences": 3,
                               "eos_token_id": EOS, "pad_token_id": PAD}]}
        beams = self.predict(body)["predictions"]
        self.assertEqual(len(beams), 3)
        self.assertEqual(len({tuple(r) for r in beams}), 3)
        self.assertTrue(any(EOS in r[3:] for r in beams), beams)  # the case under test
        for r in beams:
            self.assertEqual(r[:3], [1, 403, 407])
            if EOS in r[3:]:  # a finished hypothesis ends with it, then pads
                end = r.index(EOS, 3)
                self.assertTrue(all(t == PAD for t in r[end + 1:]))

    # ---- tokenflow's own signature and the errors

    def test_tokenflow_requests_keep_their_meaning(self):
        for sig in (None, "serving_default", "tokenflow"):
            body = {"instances": [{"input_ids": [1, 403, 407], "max_tokens": 3,
                                   "temperature": 0}]}
            if sig:
                body["signature_name"] = sig
            p = self.predict(body)["predictions"][0]
            self.assertEqual(sorted(p), ["finish_reason", "output_ids", "text"])
            self.assertEqual(p["output_ids"], self.reference([[1, 403, 407]], 3, [])[0][3:])
        # input_ids alone, a bare list of ids, a prompt: tokenflow's as before.
        for body in ({"instances": [{"input_ids": [1, 403]}]}, {"instances": [[1, 403]]},
                     {"inputs": {"input_ids": [[1, 403]]}}, {"instances": ["Once upon"]}):
            b = self.predict(body)
            out = b.get("predictions", [None])[0] if "predictions" in b else b["outputs"]
            self.assertIn("text", out, body)

    def test_bad_generate_requests_are_400_naming_the_input(self):
        cases = [
            ({"inputs": {"input_ids": [[1, 2, 3]], "attention_mask": [[1, 0, 1]]}},
             "padding between real positions"),
            ({"inputs": {"input_ids": [[1, 2, 3]], "attention_mask": [[1, 1]]}},
             "'attention_mask' row 0 must have the 3 positions"),
            ({"inputs": {"input_ids": [[1, 2], [3, 4]], "attention_mask": [[1, 1]]}},
             "must have the shape of 'input_ids'"),
            ({"inputs": {"input_ids": [[1, 2]], "attention_mask": [[0, 0]]}},
             "marks no real position"),
            ({"inputs": {"input_ids": [[1, 2]], "attention_mask": [[1, 2]]}}, "only 0 and 1"),
            ({"inputs": {"input_ids": [[1, 2]], "attention_mask": [[1, 1]], "max_length": 2}},
             "Input length of input_ids is 2, but `max_length` is set to 2"),
            ({"inputs": {"input_ids": [[1, 2]], "attention_mask": [[1, 1]], "foo": 1}},
             "unknown input 'foo'"),
            ({"inputs": {"input_ids": [[1, 2]], "attention_mask": [[1, 1]],
                         "suppress_tokens": [5]}}, "'suppress_tokens' is not supported"),
            ({"inputs": {"input_ids": [[1, 99999]], "attention_mask": [[1, 1]]}},
             "outside the vocabulary"),
            ({"inputs": {"input_ids": [[1, 2]], "attention_mask": [[1, 1]],
                         "num_return_sequences": 2}}, "Greedy methods without beam search"),
            ({"inputs": {"input_ids": [[1, 2]], "attention_mask": [[1, 1]], "do_sample": True,
                         "temperature": 0}}, "has to be a strictly positive float"),
            ({"inputs": {"input_ids": [[1, 2]], "attention_mask": [[1, 1]],
                         "max_new_tokens": 100000}}, "exceed the model's context"),
            ({"instances": [{"input_ids": [1, 2], "max_new_tokens": 2},
                            {"input_ids": [1, 2], "max_new_tokens": 3}]},
             "instances set generate() settings differently"),
            ({"instances": [{"input_ids": [1, 2], "attention_mask": [1, 1], "max_tokens": 2}]},
             "'attention_mask' is an input of the generate signature and 'max_tokens'"),
            ({"signature_name": "tokenflow",
              "inputs": {"input_ids": [[1, 2]], "attention_mask": [[1, 1]]}},
             "\"tokenflow\" not found in signature def"),
        ]
        for body, message in cases:
            b = self.predict(body, status=400)
            self.assertIn(message, b["error"], body)
            # The same request over gRPC (columnar inputs as tensors): INVALID_ARGUMENT with the
            # same message.
            if "inputs" in body:
                req = predict_pb2.PredictRequest()
                req.model_spec.name = "plain"
                req.model_spec.signature_name = body.get("signature_name", "")
                for name, value in body["inputs"].items():
                    req.inputs[name].CopyFrom(self.value_tensor(value))
                with self.assertRaises(test_grpc.grpc.RpcError) as e:
                    self.stub.Predict(req, timeout=60)
                self.assertEqual(e.exception.code(), C.INVALID_ARGUMENT, body)
                self.assertIn(message, e.exception.details(), body)
        self.assertEqual(self.c.get("/healthz")[0], 200)

    @staticmethod
    def value_tensor(value):
        """A JSON input as a client builds its tensor (tf.make_tensor_proto's choices)."""
        a = np.asarray(value)
        if a.dtype == bool:
            t = tensor_pb2.TensorProto(dtype=types_pb2.DT_BOOL)
            t.bool_val.extend(bool(v) for v in a.reshape(-1))
        elif a.dtype.kind == "f":
            t = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT)
            t.float_val.extend(float(v) for v in a.reshape(-1))
        else:
            t = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32)
            t.int_val.extend(int(v) for v in a.reshape(-1))
        for d in a.shape:
            t.tensor_shape.dim.add(size=d)
        return t


if __name__ == "__main__":
    unittest.main()
