"""Integration tests of the gRPC API (`tokenflow serve --grpc-port`): the real binary serving
stories260K, driven by Debian's python3-grpcio with stubs generated here, by python3-grpc-tools,
from the repository's .proto files (and, for health and reflection, from the standard protocols'
messages in tests/serving/protos). Checked: generation equal to the REST API's for the same
seed (unary, streaming, chat, logprobs), tokenize / detokenize / list models, TF Serving's
ModelService (status, reload), health per model, reflection, every error code, cancellation
freeing KV blocks, deadlines, 32 concurrent streams, metrics and metadata, LoRA adapters.
API keys and limits, slow readers, reloads, TLS, start-up and shutdown: test_grpc_operations.py.

Env: TOKENFLOW_BIN, TF_SHARED_DIR.
"""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc

from test_server import Client, stop_server, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("TOKENFLOW_BIN", os.path.join(REPO, "build", "release", "tokenflow"))
SHARED = os.environ.get("TF_SHARED_DIR", os.path.join(os.path.dirname(REPO), "shared"))
STORIES = os.path.join(SHARED, "models", "stories260K")
STORIES_BIN = os.path.join(STORIES, "stories260K.bin")
MODEL = "stories260K"

STUBS = tempfile.mkdtemp(prefix="tf_grpc_stubs_")


def generate_stubs():
    """Python stubs from the same .proto files the server is built from."""
    protos = []
    for root in (os.path.join(REPO, "proto"), os.path.join(HERE, "protos")):
        for d, _, files in os.walk(root):
            protos += [(root, os.path.relpath(os.path.join(d, f), root))
                       for f in files if f.endswith(".proto")]
    for root in {r for r, _ in protos}:
        files = [p for r, p in protos if r == root]
        cmd = [sys.executable, "-m", "grpc_tools.protoc", "-I", os.path.join(REPO, "proto"),
               "-I", root, "--python_out", STUBS, "--grpc_python_out", STUBS, *files]
        subprocess.run(cmd, check=True, cwd=root)
    for d, _, _ in os.walk(STUBS):  # packages for the generated modules
        open(os.path.join(d, "__init__.py"), "a").close()
    sys.path.insert(0, STUBS)


generate_stubs()
from tokenflow.v1 import generation_pb2 as g  # noqa: E402
from tokenflow.v1 import generation_pb2_grpc as g_grpc  # noqa: E402
from tensorflow_serving.apis import get_model_status_pb2 as status_pb2  # noqa: E402
from tensorflow_serving.apis import model_service_pb2_grpc  # noqa: E402
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc  # noqa: E402
from tensorflow_serving.apis import get_model_metadata_pb2  # noqa: E402
from tensorflow.core.framework import tensor_pb2, types_pb2  # noqa: E402
from grpc_std import health_pb2, health_pb2_grpc  # noqa: E402
from grpc_std import reflection_pb2, reflection_pb2_grpc  # noqa: E402
from google.protobuf import descriptor_pb2  # noqa: E402

C = grpc.StatusCode


def start(*args, log=None, ca=None):
    """Starts `tokenflow serve` with gRPC on free ports; returns (process, http port, channel).
    ca: the certificate to trust (the server runs TLS)."""
    err = open(log, "w") if log else tempfile.TemporaryFile(mode="w+")
    base = [] if "--model_config_file" in args else ["--model", STORIES_BIN]
    proc = subprocess.Popen(
        [BIN, "--log-level", "info", "serve", *base, "--port", "0", "--grpc-port", "0",
         "--kv-cache-memory", "32MiB", "--threads", "1", *args],
        stdout=subprocess.PIPE, stderr=err, text=True)
    if log:
        err.close()  # the server has its own descriptor
        err = None
    proc.err_file = err
    http_port = grpc_port = None
    for _ in range(4):
        line = proc.stdout.readline()
        m = re.search(r"https?://127\.0\.0\.1:(\d+)", line)
        if m:
            http_port = int(m.group(1))
        m = re.search(r"gRPC on 127\.0\.0\.1:(\d+)", line)
        if m:
            grpc_port = int(m.group(1))
            break
    if not http_port or not grpc_port:
        proc.kill()
        proc.wait()
        raise RuntimeError("server did not start")
    proc.grpc_port = grpc_port
    if ca:
        with open(ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        channel = grpc.secure_channel("127.0.0.1:%d" % grpc_port, creds)
    else:
        channel = grpc.insecure_channel("127.0.0.1:%d" % grpc_port)
    grpc.channel_ready_future(channel).result(timeout=30)
    return proc, http_port, channel


def sampling(**kw):
    return g.SamplingParameters(**kw)


def tensor(dtype, values=None, shape=None, content=None):
    """A TensorProto of dtype: values (or raw content) and the shape (default: [len(values)])."""
    t = tensor_pb2.TensorProto(dtype=dtype)
    for d in (shape if shape is not None else ([len(values)] if values is not None else [])):
        t.tensor_shape.dim.add(size=d)
    if content is not None:
        t.tensor_content = content
    elif dtype == types_pb2.DT_STRING:
        t.string_val.extend(values)
    elif dtype == types_pb2.DT_INT32:
        t.int_val.extend(values)
    elif dtype == types_pb2.DT_INT64:
        t.int64_val.extend(values)
    elif dtype == types_pb2.DT_FLOAT:
        t.float_val.extend(values)
    elif dtype == types_pb2.DT_BOOL:
        t.bool_val.extend(values)
    return t


def rest_completion(c, body, path="/v1/completions"):
    status, resp, text, _ = c.post(path, body)
    assert status == 200, text
    return resp


class GrpcApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tf_grpc_")
        cls.log = os.path.join(cls.dir, "server.log")
        cls.proc, port, cls.channel = start("--access-log", os.path.join(cls.dir, "access.log"),
                                            "--max-prompt-tokens", "400", log=cls.log)
        cls.c = Client(port)
        cls.gen = g_grpc.GenerationServiceStub(cls.channel)
        cls.models = model_service_pb2_grpc.ModelServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        rc, _ = stop_server(cls.proc)
        with open(cls.log) as f:
            log = f.read()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert rc == 0, log[-3000:]

    def assertCode(self, code, fn, *args, **kw):
        with self.assertRaises(grpc.RpcError) as cm:
            r = fn(*args, **kw)
            if hasattr(r, "__iter__") and not hasattr(r, "ListFields"):
                list(r)
        self.assertEqual(cm.exception.code(), code, cm.exception.details())
        return cm.exception

    # --- generation equal to REST -------------------------------------------------------------

    def test_unary_equals_rest_for_the_same_seed(self):
        cases = [
            dict(temperature=0.0),
            dict(temperature=0.9, seed=7),
            dict(temperature=1.2, seed=123, top_k=40, top_p=0.9, repetition_penalty=1.1),
            dict(temperature=0.8, seed=5, n=3, stop=["."], presence_penalty=0.5),
        ]
        for kw in cases:
            with self.subTest(**kw):
                rest = rest_completion(self.c, {"prompt": "Once upon a time", "max_tokens": 24,
                                                **kw})
                r = self.gen.Generate(g.GenerateRequest(
                    text="Once upon a time", sampling=sampling(max_tokens=24, **kw)))
                self.assertEqual(len(r.sequences), len(rest["choices"]))
                for seq, choice in zip(r.sequences, rest["choices"]):
                    self.assertEqual(seq.index, choice["index"])
                    self.assertEqual(seq.text, choice["text"])
                    self.assertEqual(g.FinishReason.Name(seq.finish_reason),
                                     "FINISH_REASON_" + choice["finish_reason"].upper())
                self.assertEqual(r.usage.prompt_tokens, rest["usage"]["prompt_tokens"])
                self.assertEqual(r.usage.completion_tokens, rest["usage"]["completion_tokens"])
                self.assertEqual(r.model, MODEL)
                self.assertEqual(r.model_version, 1)
                self.assertTrue(r.id.startswith("cmpl-"))
                # The token ids say the same text (a stop string is cut from the text only).
                d = self.gen.Detokenize(g.DetokenizeRequest(token_ids=r.sequences[0].token_ids))
                self.assertTrue(d.text.startswith(r.sequences[0].text))
                if not kw.get("stop"):
                    self.assertEqual(d.text, r.sequences[0].text)

    def test_structured_output_equals_rest(self):
        schema = {"type": "object", "properties": {
            "n": {"type": "integer", "minimum": 0, "maximum": 99},
            "w": {"type": "string", "pattern": "^[a-z]{2,5}$"}}, "required": ["n", "w"]}
        cases = [
            (g.StructuredOutput(json_schema=json.dumps(schema)), {"guided_json": schema}),
            (g.StructuredOutput(regex="(yes|no)[.!]"), {"guided_regex": "(yes|no)[.!]"}),
            (g.StructuredOutput(choice=g.StructuredOutput.Choices(choices=["up", "down"])),
             {"guided_choice": ["up", "down"]}),
        ]
        for so, field in cases:
            with self.subTest(field=field):
                rest = rest_completion(self.c, {"prompt": "Once upon a time", "max_tokens": 60,
                                                "temperature": 1.0, "seed": 4, **field})
                r = self.gen.Generate(g.GenerateRequest(
                    text="Once upon a time", structured_output=so,
                    sampling=sampling(max_tokens=60, temperature=1.0, seed=4)))
                self.assertEqual(r.sequences[0].text, rest["choices"][0]["text"])
        text = r.sequences[0].text
        self.assertIn(text, ("up", "down"))
        e = self.assertCode(C.INVALID_ARGUMENT, self.gen.Generate, g.GenerateRequest(
            text="Once", structured_output=g.StructuredOutput(json_schema='{"not": {}}')))
        self.assertIn("'not' is not supported", e.details())

    def test_logprobs_equal_rest(self):
        rest = rest_completion(self.c, {"prompt": "The cat", "max_tokens": 8, "temperature": 0.7,
                                        "seed": 3, "logprobs": 2})
        r = self.gen.Generate(g.GenerateRequest(
            text="The cat", sampling=sampling(max_tokens=8, temperature=0.7, seed=3, logprobs=2)))
        lp = rest["choices"][0]["logprobs"]
        got = r.sequences[0].logprobs
        self.assertEqual(len(got), len(lp["token_logprobs"]))
        for mine, token, value, top in zip(got, lp["tokens"], lp["token_logprobs"],
                                           lp["top_logprobs"]):
            self.assertEqual(mine.token.decode("utf-8", "replace"), token)
            self.assertAlmostEqual(mine.logprob, value, places=5)
            self.assertEqual(len(mine.top_logprobs), 2)
            self.assertEqual({t.token.decode("utf-8", "replace"): round(t.logprob, 4)
                              for t in mine.top_logprobs},
                             {k: round(v, 4) for k, v in top.items()})
        self.assertLess(r.sequences[0].cumulative_logprob, 0)

    def test_chat_and_token_prompts_equal_rest(self):
        messages = [{"role": "user", "content": "Tell me a story"}]
        rest = rest_completion(self.c, {"messages": messages, "max_tokens": 12,
                                        "temperature": 0.5, "seed": 11}, "/v1/chat/completions")
        r = self.gen.Generate(g.GenerateRequest(
            chat=g.Chat(messages=[g.ChatMessage(role="user", content="Tell me a story")]),
            sampling=sampling(max_tokens=12, temperature=0.5, seed=11)))
        self.assertEqual(r.sequences[0].text, rest["choices"][0]["message"]["content"])
        self.assertTrue(r.id.startswith("chatcmpl-"))
        # The chat prompt Tokenize renders is the one generation used.
        t = self.gen.Tokenize(g.TokenizeRequest(
            chat=g.Chat(messages=[g.ChatMessage(role="user", content="Tell me a story")])))
        self.assertEqual(t.count, rest["usage"]["prompt_tokens"])
        # Token ids as the prompt.
        ids = [1, 415, 281]
        rest = rest_completion(self.c, {"prompt": ids, "max_tokens": 10, "temperature": 0})
        r = self.gen.Generate(g.GenerateRequest(token_ids=g.TokenIds(ids=ids),
                                                sampling=sampling(max_tokens=10, temperature=0)))
        self.assertEqual(r.sequences[0].text, rest["choices"][0]["text"])

    def test_stream_is_one_message_per_step_and_equals_unary(self):
        req = g.GenerateRequest(text="Once upon a time",
                                sampling=sampling(max_tokens=20, temperature=0.8, seed=42,
                                                  logprobs=1, ignore_eos=True))
        unary = self.gen.Generate(req)
        call = self.gen.GenerateStream(req, metadata=[("x-request-id", "my-stream-1")])
        msgs = list(call)
        steps = [m.step for m in msgs if m.WhichOneof("event") == "step"]
        ends = [m.end for m in msgs if m.WhichOneof("event") == "end"]
        self.assertEqual(len(ends), 1)
        self.assertEqual(msgs[-1].WhichOneof("event"), "end")
        # One engine step, one token (no speculative decoding): one message per token.
        self.assertEqual(len(steps), 20)
        self.assertTrue(all(len(s.token_ids) == 1 and len(s.logprobs) == 1 for s in steps))
        self.assertEqual([t for s in steps for t in s.token_ids],
                         list(unary.sequences[0].token_ids))
        self.assertEqual("".join(s.text for s in steps), unary.sequences[0].text)
        self.assertEqual(steps[-1].finish_reason, g.FINISH_REASON_LENGTH)
        self.assertTrue(all(s.finish_reason == g.FINISH_REASON_UNSPECIFIED for s in steps[:-1]))
        end = ends[0]
        self.assertEqual(list(end.finish_reasons), [g.FINISH_REASON_LENGTH])
        self.assertEqual(end.usage.completion_tokens, 20)
        self.assertEqual(end.usage.prompt_tokens, unary.usage.prompt_tokens)
        self.assertEqual((end.model, end.model_version), (MODEL, 1))
        md = dict(call.initial_metadata())
        self.assertEqual(md.get("x-request-id"), "my-stream-1")
        self.assertEqual(md.get("x-model-version"), "1")

    def test_stream_with_n_sequences_equals_rest_stream(self):
        body = {"prompt": "Once", "max_tokens": 10, "temperature": 1.0, "seed": 9, "n": 2}
        rest = rest_completion(self.c, body)
        msgs = list(self.gen.GenerateStream(g.GenerateRequest(
            text="Once", sampling=sampling(max_tokens=10, temperature=1.0, seed=9, n=2))))
        texts = {0: "", 1: ""}
        for m in msgs:
            if m.WhichOneof("event") == "step":
                texts[m.step.index] += m.step.text
        self.assertEqual(texts[0], rest["choices"][0]["text"])
        self.assertEqual(texts[1], rest["choices"][1]["text"])
        self.assertEqual(len(msgs[-1].end.finish_reasons), 2)

    # --- tokenize, detokenize, models -------------------------------------------------------------

    def test_tokenize_and_detokenize(self):
        t = self.gen.Tokenize(g.TokenizeRequest(text="Hello there", return_tokens=True))
        self.assertEqual(t.count, len(t.token_ids))
        self.assertEqual(t.token_ids[0], 1)  # BOS
        self.assertEqual(t.max_model_len, 512)
        self.assertEqual(b"".join(t.tokens).decode().strip(), "Hello there")
        t2 = self.gen.Tokenize(g.TokenizeRequest(text="Hello there", add_special_tokens=False))
        self.assertEqual(list(t2.token_ids), list(t.token_ids[1:]))
        d = self.gen.Detokenize(g.DetokenizeRequest(token_ids=t.token_ids))
        self.assertEqual(d.text.strip(), "Hello there")
        # The same count as the REST usage for that prompt.
        rest = rest_completion(self.c, {"prompt": "Hello there", "max_tokens": 1})
        self.assertEqual(t.count, rest["usage"]["prompt_tokens"])
        self.assertCode(C.INVALID_ARGUMENT, self.gen.Detokenize,
                        g.DetokenizeRequest(token_ids=[5, 99999]))
        self.assertCode(C.INVALID_ARGUMENT, self.gen.Tokenize, g.TokenizeRequest())
        self.assertCode(C.NOT_FOUND, self.gen.Tokenize, g.TokenizeRequest(model="nope", text="x"))

    def test_list_models_matches_rest(self):
        r = self.gen.ListModels(g.ListModelsRequest())
        _, rest, _, _ = self.c.get("/v1/models")
        self.assertEqual([m.id for m in r.models], [m["id"] for m in rest["data"]])
        m = r.models[0]
        self.assertEqual((m.id, m.name, m.version, m.max_model_len), (MODEL, MODEL, 1, 512))
        self.assertGreater(m.created, 0)

    # --- TF Serving's ModelService ------------------------------------------------------------

    def test_model_status_has_tf_serving_semantics(self):
        r = self.models.GetModelStatus(status_pb2.GetModelStatusRequest(
            model_spec={"name": MODEL}))
        self.assertEqual(len(r.model_version_status), 1)
        v = r.model_version_status[0]
        self.assertEqual((v.version, v.state), (1, status_pb2.ModelVersionStatus.AVAILABLE))
        self.assertEqual((v.status.error_code, v.status.error_message), (0, ""))
        r = self.models.GetModelStatus(status_pb2.GetModelStatusRequest(
            model_spec={"name": MODEL, "version": {"value": 1}}))
        self.assertEqual(r.model_version_status[0].version, 1)
        e = self.assertCode(C.NOT_FOUND, self.models.GetModelStatus,
                            status_pb2.GetModelStatusRequest(model_spec={"name": "nope"}))
        self.assertIn("Could not find any versions of model nope", e.details())
        self.assertCode(C.NOT_FOUND, self.models.GetModelStatus,
                        status_pb2.GetModelStatusRequest(
                            model_spec={"name": MODEL, "version": {"value": 7}}))
        self.assertCode(C.NOT_FOUND, self.models.GetModelStatus,
                        status_pb2.GetModelStatusRequest(
                            model_spec={"name": MODEL, "version_label": "stable"}))
        self.assertCode(C.INVALID_ARGUMENT, self.models.GetModelStatus,
                        status_pb2.GetModelStatusRequest())

    # --- TF Serving's Predict ---------------------------------------------------------------

    def tensor(self, *args, **kw):
        return tensor(*args, **kw)

    def test_predict_equals_rest_predict(self):
        stub = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        T = types_pb2
        req = predict_pb2.PredictRequest()
        req.model_spec.name = MODEL
        req.inputs["prompt"].CopyFrom(self.tensor(T.DT_STRING, [b"Once upon a time", b"The cat"]))
        req.inputs["max_tokens"].CopyFrom(self.tensor(T.DT_INT32, [12], shape=[]))
        req.inputs["temperature"].CopyFrom(self.tensor(T.DT_FLOAT, [0.8], shape=[1]))
        req.inputs["seed"].CopyFrom(self.tensor(T.DT_INT64, [5], shape=[]))
        req.inputs["logprobs"].CopyFrom(self.tensor(T.DT_INT32, [0], shape=[]))
        r = stub.Predict(req)
        status, rest, text, _ = self.c.post("/v1/models/%s:predict" % MODEL, {"inputs": {
            "prompt": ["Once upon a time", "The cat"], "max_tokens": 12, "temperature": 0.8,
            "seed": 5, "logprobs": 0}})
        self.assertEqual(status, 200, text)
        out = rest["outputs"]
        self.assertEqual([s.decode() for s in r.outputs["text"].string_val], out["text"])
        self.assertEqual([s.decode() for s in r.outputs["finish_reason"].string_val],
                         out["finish_reason"])
        lengths = list(r.outputs["output_lengths"].int_val)
        self.assertEqual(lengths, [len(x) for x in out["output_ids"]])
        width = r.outputs["output_ids"].tensor_shape.dim[1].size
        self.assertEqual([d.size for d in r.outputs["output_ids"].tensor_shape.dim],
                         [2, max(lengths)])
        ids = list(r.outputs["output_ids"].int_val)
        for i, row in enumerate(out["output_ids"]):
            self.assertEqual(ids[i * width:i * width + len(row)], row)
            self.assertTrue(all(x == -1 for x in ids[i * width + len(row):(i + 1) * width]))
        lp = list(r.outputs["logprobs"].float_val)
        self.assertAlmostEqual(lp[0], out["logprobs"][0][0], places=5)
        self.assertEqual((r.model_spec.name, r.model_spec.version.value), (MODEL, 1))

        # Token ids packed in tensor_content (as tf.make_tensor_proto writes them), an output
        # filter, a version.
        import struct
        req = predict_pb2.PredictRequest()
        req.model_spec.name = MODEL
        req.model_spec.version.value = 1
        req.inputs["input_ids"].CopyFrom(self.tensor(
            T.DT_INT64, shape=[1, 3], content=struct.pack("<3q", 1, 415, 281)))
        req.inputs["max_tokens"].CopyFrom(self.tensor(T.DT_INT32, [6], shape=[]))
        req.inputs["temperature"].CopyFrom(self.tensor(T.DT_FLOAT, [0.0], shape=[]))
        req.output_filter.append("text")
        r = stub.Predict(req)
        self.assertEqual(list(r.outputs.keys()), ["text"])
        rest = rest_completion(self.c, {"prompt": [1, 415, 281], "max_tokens": 6,
                                        "temperature": 0})
        self.assertEqual(r.outputs["text"].string_val[0].decode(), rest["choices"][0]["text"])

    def test_model_metadata_describes_the_signature_as_rest_does(self):
        stub = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        req = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        req.model_spec.name = MODEL
        r = stub.GetModelMetadata(req)
        self.assertEqual((r.model_spec.name, r.model_spec.version.value), (MODEL, 1))
        defs = get_model_metadata_pb2.SignatureDefMap()
        self.assertTrue(r.metadata["signature_def"].Unpack(defs))
        self.assertEqual(sorted(defs.signature_def), ["serving_default", "tokenflow"])
        sig = defs.signature_def["tokenflow"]
        self.assertEqual(sig.method_name, "tensorflow/serving/predict")
        _, rest, _, _ = self.c.get("/v1/models/%s/metadata" % MODEL)
        want = rest["metadata"]["signature_def"]["signature_def"]["tokenflow"]
        self.assertEqual(set(sig.inputs), set(want["inputs"]))
        self.assertEqual(set(sig.outputs), set(want["outputs"]) | {"output_lengths"})
        self.assertEqual(sig.inputs["prompt"].dtype, types_pb2.DT_STRING)
        self.assertEqual(sig.inputs["max_tokens"].dtype, types_pb2.DT_INT32)
        self.assertEqual([d.size for d in sig.outputs["output_ids"].tensor_shape.dim], [-1, -1])
        # TF Serving's rules: signature_def must be asked for; nothing else is known.
        for fields, code in (([], C.INVALID_ARGUMENT), (["signature_def", "x"], C.INVALID_ARGUMENT)):
            bad = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=fields)
            bad.model_spec.name = MODEL
            self.assertCode(code, stub.GetModelMetadata, bad)
        req.model_spec.name = "nope"
        self.assertCode(C.NOT_FOUND, stub.GetModelMetadata, req)

    def test_predict_errors(self):
        stub = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        T = types_pb2

        def req(name=MODEL, **inputs):
            r = predict_pb2.PredictRequest()
            r.model_spec.name = name
            for k, v in inputs.items():
                r.inputs[k].CopyFrom(v)
            return r

        prompt = self.tensor(T.DT_STRING, [b"Hi"])
        e = self.assertCode(C.NOT_FOUND, stub.Predict, req("nope", prompt=prompt))
        self.assertIn("Servable not found for request: Latest(nope)", e.details())
        self.assertCode(C.INVALID_ARGUMENT, stub.Predict, req(""))
        self.assertCode(C.INVALID_ARGUMENT, stub.Predict, req())  # no prompt
        self.assertCode(C.INVALID_ARGUMENT, stub.Predict,
                        req(prompt=self.tensor(T.DT_HALF, shape=[1])))
        self.assertCode(C.INVALID_ARGUMENT, stub.Predict,
                        req(prompt=prompt, bogus=self.tensor(T.DT_INT32, [1])))
        self.assertCode(C.INVALID_ARGUMENT, stub.Predict,  # 3 values for a shape of 4
                        req(input_ids=self.tensor(T.DT_INT32, [1, 2, 3], shape=[2, 2])))
        self.assertCode(C.INVALID_ARGUMENT, stub.Predict,  # a partial value in the content
                        req(input_ids=self.tensor(T.DT_INT32, shape=[1], content=b"abc")))
        self.assertCode(C.INVALID_ARGUMENT, stub.Predict,
                        req(prompt=prompt, temperature=self.tensor(T.DT_FLOAT, [-1.0])))
        r = req(prompt=prompt)
        r.output_filter.append("scores")
        self.assertCode(C.INVALID_ARGUMENT, stub.Predict, r)

    def test_predict_shapes_are_bounded(self):
        # Issue 49: a shape whose element count overflows int64 (40 bytes, no values) crashed the
        # process; one value filling [1, 20000000] allocated gigabytes before any limit. Both
        # are refused from the shape alone, and the server goes on answering.
        stub = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        T = types_pb2

        def req(**inputs):
            r = predict_pb2.PredictRequest()
            r.model_spec.name = MODEL
            for k, v in inputs.items():
                r.inputs[k].CopyFrom(v)
            return r

        overflow = req(input_ids=self.tensor(T.DT_INT32, shape=[1 << 62, 4]))
        self.assertLess(len(overflow.SerializeToString()), 64)  # the 40 bytes + the name
        e = self.assertCode(C.INVALID_ARGUMENT, stub.Predict, overflow)
        self.assertIn("more than 1048576 elements", e.details())
        for shape in ([1 << 62, 0], [0, 1 << 62], [1 << 31, 1 << 31, 4], [-1, 2]):
            self.assertCode(C.INVALID_ARGUMENT, stub.Predict,
                            req(input_ids=self.tensor(T.DT_INT32, shape=shape)))
        started = time.monotonic()
        e = self.assertCode(C.INVALID_ARGUMENT, stub.Predict,
                            req(input_ids=self.tensor(T.DT_INT32, [5], shape=[1, 20000000])))
        self.assertIn("more than 1048576 elements", e.details())
        # A one-string shorthand is bounded by its bytes, not only its count.
        e = self.assertCode(C.INVALID_ARGUMENT, stub.Predict,
                            req(prompt=self.tensor(T.DT_STRING, [b"x" * 4096], shape=[1, 65536])))
        self.assertIn("MiB", e.details())
        # tensor_content must match the shape exactly (TF Serving's rule; one packed value is
        # not the shorthand), and is not mixed with typed values.
        e = self.assertCode(C.INVALID_ARGUMENT, stub.Predict, req(input_ids=self.tensor(
            T.DT_INT32, shape=[1, 4], content=struct.pack("<i", 7))))
        self.assertIn("1 values for a shape of 4 elements", e.details())
        both = self.tensor(T.DT_INT32, shape=[1, 2], content=struct.pack("<2i", 3, 4))
        both.int_val.extend([1, 2])
        e = self.assertCode(C.INVALID_ARGUMENT, stub.Predict, req(input_ids=both))
        self.assertIn("both tensor_content and typed values", e.details())
        self.assertLess(time.monotonic() - started, 30)
        # The one-value shorthand within the limit still fills its shape.
        r = stub.Predict(req(input_ids=self.tensor(T.DT_INT32, [1], shape=[2, 3]),
                             max_tokens=self.tensor(T.DT_INT32, [2], shape=[])))
        self.assertEqual([d.size for d in r.outputs["output_ids"].tensor_shape.dim][0], 2)

    # --- health and reflection ----------------------------------------------------------------

    def test_health_per_model(self):
        h = health_pb2_grpc.HealthStub(self.channel)
        S = health_pb2.HealthCheckResponse
        self.assertEqual(h.Check(health_pb2.HealthCheckRequest(service="")).status, S.SERVING)
        self.assertEqual(h.Check(health_pb2.HealthCheckRequest(service=MODEL)).status, S.SERVING)
        self.assertEqual(h.Check(health_pb2.HealthCheckRequest(
            service="tokenflow.v1.GenerationService")).status, S.SERVING)
        self.assertCode(C.NOT_FOUND, h.Check, health_pb2.HealthCheckRequest(service="nope"))
        watch = h.Watch(health_pb2.HealthCheckRequest(service=MODEL), timeout=5)
        self.assertEqual(next(watch).status, S.SERVING)
        watch.cancel()

    def test_reflection_lists_and_describes_the_services(self):
        stub = reflection_pb2_grpc.ServerReflectionStub(self.channel)
        R = reflection_pb2.ServerReflectionRequest
        out = list(stub.ServerReflectionInfo(iter([
            R(list_services=""),
            R(file_containing_symbol="tokenflow.v1.GenerationService"),
            R(file_containing_symbol="tensorflow.serving.ModelService"),
        ]), timeout=10))
        names = {s.name for s in out[0].list_services_response.service}
        self.assertTrue({"tokenflow.v1.GenerationService", "tensorflow.serving.ModelService",
                         "grpc.health.v1.Health"} <= names, names)
        files = {}
        for resp in out[1:]:
            for raw in resp.file_descriptor_response.file_descriptor_proto:
                fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
                files[fd.name] = fd
        gen = files["tokenflow/v1/generation.proto"]
        self.assertEqual([m.name for m in gen.service[0].method],
                         ["Generate", "GenerateStream", "Tokenize", "Detokenize", "ListModels"])
        self.assertTrue(gen.service[0].method[1].server_streaming)
        self.assertIn("tensorflow_serving/apis/model_service.proto", files)

    # --- errors -------------------------------------------------------------------------------

    def test_invalid_arguments_name_the_field(self):
        bad = [
            (g.GenerateRequest(text="x", sampling=sampling(temperature=-1)), "temperature"),
            (g.GenerateRequest(text="x", sampling=sampling(top_p=1.5)), "top_p"),
            (g.GenerateRequest(text="x", sampling=sampling(max_tokens=100000)), "max_tokens"),
            (g.GenerateRequest(text="x", sampling=sampling(logprobs=99)), "logprobs"),
            (g.GenerateRequest(sampling=sampling(max_tokens=1)), "prompt"),
            (g.GenerateRequest(token_ids=g.TokenIds(ids=[1, 70000])), "prompt"),
            (g.GenerateRequest(text="x " * 450), "prompt"),  # --max-prompt-tokens 400
        ]
        for req, field in bad:
            with self.subTest(field=field):
                for method in (self.gen.Generate, self.gen.GenerateStream):
                    e = self.assertCode(C.INVALID_ARGUMENT, method, req)
                    self.assertIn(field, e.details() + str(dict(e.trailing_metadata())))
        # best_of > n cannot stream, as in REST; unary takes it.
        e = self.assertCode(C.INVALID_ARGUMENT, self.gen.GenerateStream, g.GenerateRequest(
            text="x", sampling=sampling(best_of=3, n=1, max_tokens=2)))
        self.assertIn("best_of", e.details())
        self.gen.Generate(g.GenerateRequest(text="x", sampling=sampling(best_of=3, n=1,
                                                                          max_tokens=2)))

    def test_messages_that_do_not_parse_are_invalid_argument(self):
        # Bytes that are no protobuf message (field 31, a wire type that does not exist); gRPC's
        # callback API answers them UNIMPLEMENTED before any handler runs (issue 18).
        junk = b"\xff\xff\xff"
        raw = dict(request_serializer=lambda x: x, response_deserializer=lambda x: x)
        for method in ("/tokenflow.v1.GenerationService/Generate",
                       "/tokenflow.v1.GenerationService/Tokenize",
                       "/tensorflow.serving.PredictionService/Predict",
                       "/tensorflow.serving.PredictionService/Classify",
                       "/tensorflow.serving.ModelService/GetModelStatus"):
            with self.subTest(method=method):
                e = self.assertCode(C.INVALID_ARGUMENT, self.channel.unary_unary(method, **raw),
                                    junk, timeout=30)
                self.assertIn("does not parse", e.details())
        self.assertCode(C.INVALID_ARGUMENT, self.channel.unary_stream(
            "/tokenflow.v1.GenerationService/GenerateStream", **raw), junk, timeout=30)
        # What is really not implemented stays UNIMPLEMENTED: a method without a handler, and
        # a method that does not exist.
        self.assertCode(C.UNIMPLEMENTED, self.channel.unary_unary(
            "/tensorflow.serving.PredictionService/MultiInference", **raw), b"", timeout=30)
        self.assertCode(C.UNIMPLEMENTED, self.channel.unary_unary("/no.Such/Method", **raw), b"",
                        timeout=30)
        # And a well-formed message still works.
        self.assertTrue(self.gen.ListModels(g.ListModelsRequest()).models)

    def test_unknown_model_is_not_found(self):
        for name in ("nope", MODEL + ":9", MODEL + "@canary"):
            with self.subTest(name=name):
                e = self.assertCode(C.NOT_FOUND, self.gen.Generate,
                                    g.GenerateRequest(model=name, text="x"))
                self.assertEqual(dict(e.trailing_metadata()).get("error-code"), "model_not_found")
        self.assertEqual(self.gen.Generate(g.GenerateRequest(
            model=MODEL + ":1", text="x", sampling=sampling(max_tokens=1))).model_version, 1)

    # 8 sequences of 480 tokens: about half a second here, far longer than the deadlines.
    LONG = dict(max_tokens=480, n=8, ignore_eos=True)

    def test_client_deadline_cancels_the_engine_request(self):
        self.assertTrue(wait_for(self.idle), self.stats())
        before = self.stats()["models"][MODEL]["generated_tokens"]
        for method in (self.gen.Generate, self.gen.GenerateStream):
            t0 = time.time()
            self.assertCode(C.DEADLINE_EXCEEDED, method,
                            g.GenerateRequest(text="Once", sampling=sampling(**self.LONG)),
                            timeout=0.05)
            self.assertLess(time.time() - t0, 5)
            self.assertTrue(wait_for(self.idle), self.stats())
        # The deadline reached the engine: it stopped long before 2 x 8 x 480 tokens.
        made = self.stats()["models"][MODEL]["generated_tokens"] - before
        self.assertLess(made, 2 * 8 * 480)

    def stats(self):
        return self.c.get("/v1/admin/stats")[1]

    def idle(self):
        s = self.stats()
        m = s["models"][MODEL]
        return s["jobs_in_flight"] == 0 and m["kv_blocks_used"] == 0 and m["running"] == 0

    def test_cancelled_stream_frees_its_kv_blocks(self):
        self.assertTrue(wait_for(self.idle), self.stats())
        before = self.stats()["models"][MODEL]["generated_tokens"]
        call = self.gen.GenerateStream(g.GenerateRequest(
            text="Once upon a time", sampling=sampling(**self.LONG)))
        got = 0
        for m in call:
            got += len(m.step.token_ids)
            if got >= 3:
                break
        # The engine's gauges are its state at the end of a step, and a step's tokens go out
        # before it ends: the blocks show in use a moment later.
        self.assertTrue(wait_for(lambda: self.stats()["models"][MODEL]["kv_blocks_used"] > 0),
                        self.stats())
        call.cancel()
        self.assertTrue(wait_for(self.idle), self.stats())
        s = self.stats()["models"][MODEL]
        self.assertEqual(s["kv_blocks_used"], 0)
        # Cancelled in the engine, not run to the end.
        self.assertLess(s["generated_tokens"] - before, 8 * 480)
        with open(os.path.join(self.dir, "access.log")) as f:
            lines = [ln for ln in f if "GenerateStream" in ln and '"status":499' in ln]
        self.assertTrue(lines, "the cancelled call is logged as 499")

    def test_32_concurrent_streams(self):
        results = {}
        errors = []

        def run(i):
            try:
                req = g.GenerateRequest(text="Once upon a time",
                                        sampling=sampling(max_tokens=24, temperature=1.0,
                                                          seed=1000 + i, ignore_eos=True))
                text, ends = "", []
                for m in self.gen.GenerateStream(req, timeout=120):
                    if m.WhichOneof("event") == "step":
                        text += m.step.text
                    else:
                        ends.append(m.end)
                results[i] = (text, ends)
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        self.assertEqual(errors, [])
        self.assertEqual(len(results), 32)
        for i in (0, 17, 31):  # batched or alone, a seed gives the same text
            alone = self.gen.Generate(g.GenerateRequest(
                text="Once upon a time",
                sampling=sampling(max_tokens=24, temperature=1.0, seed=1000 + i,
                                  ignore_eos=True)))
            self.assertEqual(results[i][0], alone.sequences[0].text)
        for text, ends in results.values():
            self.assertEqual(len(ends), 1)
            self.assertEqual(ends[0].usage.completion_tokens, 24)
        self.assertGreater(len({r[0] for r in results.values()}), 16)
        self.assertTrue(wait_for(self.idle), self.stats())

    def streams_ok(self):
        _, _, text, _ = self.c.get("/metrics")
        m = re.search(r'grpc_server_handled_total\{grpc_service="tokenflow.v1.GenerationService",'
                      r'grpc_method="GenerateStream",grpc_type="server_stream",grpc_code="OK"\} '
                      r'(\d+)', text)
        return int(m.group(1)) if m else 0

    def test_bench_url_over_grpc(self):
        before = self.streams_ok()
        out = os.path.join(self.dir, "bench.json")
        p = subprocess.run([BIN, "bench", "--url", "grpc://127.0.0.1:%d" % self.proc.grpc_port,
                            "--sweep", "1,4", "--num-prompts", "8", "--input-len", "16",
                            "--output-len", "8", "--json-out", out],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        import json
        with open(out) as f:
            res = json.load(f)
        self.assertEqual([lv["concurrency"] for lv in res["levels"]], [1, 4])
        for lv in res["levels"]:
            self.assertEqual((lv["completed"], lv["output_tokens"], lv["errors"]), (8, 64, {}))
            self.assertTrue(0 <= lv["ttft_ms"]["p50"] <= lv["e2e_ms"]["p99"], lv)
        self.assertEqual(self.streams_ok() - before, 16)
        # A server that is not there: every request fails, and says so.
        p = subprocess.run([BIN, "bench", "--url", "grpc://127.0.0.1:1", "--num-prompts", "2"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("2 requests failed", p.stderr)

    def test_metrics_count_grpc_calls(self):
        self.gen.ListModels(g.ListModelsRequest())
        self.assertCode(C.NOT_FOUND, self.gen.Generate, g.GenerateRequest(model="nope", text="x"))
        _, _, text, _ = self.c.get("/metrics")
        self.assertRegex(text, r'grpc_server_handled_total\{grpc_service="tokenflow.v1.'
                               r'GenerationService",grpc_method="ListModels",grpc_type="unary",'
                               r'grpc_code="OK"\} [1-9]')
        self.assertRegex(text, r'grpc_server_handled_total\{[^}]*grpc_method="Generate"[^}]*'
                               r'grpc_code="NOT_FOUND"\} [1-9]')
        self.assertRegex(text, r'grpc_server_started_total\{[^}]*grpc_method="GenerateStream"')
        # Generation over gRPC shows in the same request series as REST.
        self.assertRegex(text, r'tokenflow_requests_total\{model="stories260K",version="1",'
                               r'code="200",outcome="success",task="generate"\}')


class GrpcSpeculationTest(unittest.TestCase):
    """GenerateRequest.speculative: false turns a server's speculative decoding off for one
    request (docs/speculative.md); unset, the request speculates, with the same greedy tokens."""

    def test_speculative_false_proposes_nothing(self):
        proc, port, channel = start("--speculative", "ngram")
        try:
            gen = g_grpc.GenerationServiceStub(channel)
            c = Client(port)

            def drafts():
                m = re.search(r"^tokenflow_spec_decode_num_drafts_total\{[^}]*\} (\S+)$",
                              c.get("/metrics")[2], re.M)
                return float(m.group(1))

            req = dict(text="Once upon a time", sampling=sampling(
                max_tokens=150, temperature=0.0, ignore_eos=True))
            off = gen.Generate(g.GenerateRequest(speculative=False, **req), timeout=60)
            self.assertEqual(drafts(), 0)
            on = gen.Generate(g.GenerateRequest(**req), timeout=60)
            self.assertGreater(drafts(), 0)
            self.assertEqual(list(on.sequences[0].token_ids), list(off.sequences[0].token_ids))
        finally:
            channel.close()
            stop_server(proc)




class GrpcLoraTest(unittest.TestCase):
    """A LoRA adapter (issue 54) through the gRPC doors: GenerationService.Generate and TF
    Serving's Predict with the adapter's name answer as the REST door does with it, Predict's
    model_spec names the adapter on its base's version; a key limited to the adapter is refused
    its base."""

    @classmethod
    def setUpClass(cls):
        from test_lora import write_adapter_and_merged
        cls.dir = tempfile.mkdtemp(prefix="tf_grpc_lora_")
        adapter, _ = write_adapter_and_merged(cls.dir)
        keys = os.path.join(cls.dir, "keys.txt")
        with open(keys, "w") as f:
            f.write("sk-all\nsk-sql models=sql\n")
        cls.proc, port, cls.channel = start("--lora", "sql=" + adapter, "--api-keys-file", keys)
        cls.c = Client(port)
        cls.gen = g_grpc.GenerationServiceStub(cls.channel)
        cls.auth = [("authorization", "Bearer sk-all")]

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        rc, err = stop_server(cls.proc)
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert rc == 0, err[-3000:]

    def rest_text(self, model):
        status, r, text, _ = self.c.post(
            "/v1/completions", {"model": model, "prompt": "The dog", "max_tokens": 10,
                                "temperature": 0}, headers={"Authorization": "Bearer sk-all"})
        self.assertEqual(status, 200, text)
        return r["choices"][0]["text"]

    def test_generate_and_predict_reach_the_adapter(self):
        want = self.rest_text("sql")
        self.assertNotEqual(want, self.rest_text(MODEL))
        for name in ("sql", MODEL + "@sql"):
            r = self.gen.Generate(g.GenerateRequest(
                model=name, text="The dog", sampling=sampling(max_tokens=10, temperature=0)),
                metadata=self.auth)
            self.assertEqual(r.sequences[0].text, want, name)
            self.assertEqual((r.model, r.model_version), ("sql", 1))
        stub = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        req = predict_pb2.PredictRequest()
        req.model_spec.name = "sql"
        T = types_pb2
        req.inputs["prompt"].CopyFrom(tensor(T.DT_STRING, [b"The dog"]))
        req.inputs["max_tokens"].CopyFrom(tensor(T.DT_INT32, [10], shape=[]))
        req.inputs["temperature"].CopyFrom(tensor(T.DT_FLOAT, [0.0], shape=[]))
        r = stub.Predict(req, metadata=self.auth)
        self.assertEqual([x.decode() for x in r.outputs["text"].string_val], [want])
        self.assertEqual((r.model_spec.name, r.model_spec.version.value), ("sql", 1))

    def test_a_key_for_the_adapter_only(self):
        only = [("authorization", "Bearer sk-sql")]
        r = self.gen.Generate(g.GenerateRequest(
            model="sql", text="The dog", sampling=sampling(max_tokens=4, temperature=0)),
            metadata=only)
        self.assertEqual(r.model, "sql")
        with self.assertRaises(grpc.RpcError) as cm:
            self.gen.Generate(g.GenerateRequest(model=MODEL, text="The dog",
                                                sampling=sampling(max_tokens=4)), metadata=only)
        self.assertEqual(cm.exception.code(), C.PERMISSION_DENIED, cm.exception.details())
        for model, want in (("sql", 200), (MODEL + "@sql", 200), (MODEL, 403)):
            status, _, text, _ = self.c.post(
                "/v1/completions", {"model": model, "prompt": "The dog", "max_tokens": 2},
                headers={"Authorization": "Bearer sk-sql"})
            self.assertEqual(status, want, model + ": " + text)


if __name__ == "__main__":
    unittest.main()
