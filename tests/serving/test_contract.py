"""Issue 19: one request contract. The same request gets the same answer and the same status
class through every door: the OpenAI REST routes against a batch file (`tokenflow generate
--input-file`), which used to skip the HTTP planner's checks (unknown fields, beam-search and
echo rules, the context); one table of bad inputs through REST completions, the gRPC
GenerationService, REST Predict and gRPC Predict; and the deadline outcome through each.

Env: TOKENFLOW_BIN, TF_SHARED_DIR.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import (BIN, MODEL, STORIES_BIN, Client, SharedServerTest,  # noqa: E402
                         start_server, stop_server)

# (url, body, field the error names): each is refused by the HTTP API with a 400.
BAD = [
    ("/v1/completions", {"prompt": "Once", "bogus": 1}, "bogus"),
    ("/v1/completions", {"prompt": "Once", "temperature": -1}, "temperature"),
    ("/v1/completions", {"prompt": "Once", "echo": True, "logprobs": 1, "use_beam_search": True,
                         "best_of": 2}, "echo"),
    ("/v1/completions", {"prompt": "Once", "max_tokens": 100000}, "max_tokens"),
    ("/v1/completions", {"prompt": "Once upon a time " * 3500, "max_tokens": 1}, "prompt"),
    ("/v1/completions", {"prompt": [1, 4294967296]}, "prompt"),
    ("/v1/completions", {"prompt": "x", "use_beam_search": True, "n": 2, "best_of": 1}, "best_of"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "max_completion_tokens": "many"}, "max_completion_tokens"),
    ("/v1/chat/completions", {"messages": "hi"}, "messages"),
]


def batch_errors(test, requests):
    """Each (url, body) as a line of a batch file (`tokenflow generate --input-file`): the error
    message of its result line (the test fails if a line was answered)."""
    with tempfile.TemporaryDirectory() as d:
        inp, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
        with open(inp, "w") as f:
            for i, (url, body) in enumerate(requests):
                f.write(json.dumps({"custom_id": str(i), "url": url, "body": body}) + "\n")
        r = subprocess.run([BIN, "generate", "-m", STORIES_BIN, "--input-file", inp,
                            "--output-file", out], capture_output=True, text=True, timeout=120)
        test.assertEqual(r.returncode, 0, r.stderr[-1000:])
        with open(out) as f:
            lines = [json.loads(line) for line in f]
    test.assertEqual(len(lines), len(requests))
    for line in lines:
        test.assertIsNone(line["response"], line)
    return [line["error"]["message"] for line in lines]


class BatchEqualsRestTest(SharedServerTest):
    def test_bad_inputs_get_the_same_error_through_rest_and_a_batch_file(self):
        rest = []
        for url, body, field in BAD:
            status, resp, text, _ = self.c.post(url, body)
            with self.subTest(body=str(body)[:80]):
                self.assertEqual(status, 400, text[:300])
                self.assertIn(field, resp["error"]["message"] + str(resp["error"]["param"]))
            rest.append(resp["error"]["message"] if resp else text)
        for (url, body, _), error, message in zip(BAD, batch_errors(self, [(u, b) for u, b, _ in BAD]),
                                                  rest):
            with self.subTest(body=str(body)[:80]):
                self.assertEqual(error, message)


# One request in every door's words: (name, REST completions body, GenerateRequest fields,
# Predict instance, gRPC Predict inputs). Each is refused with a 400 / INVALID_ARGUMENT and the
# same message through REST completions, gRPC Generate and GenerateStream, REST Predict and gRPC
# Predict.
LONG = "Once upon a time " * 3500
EVERY_DOOR = [
    ("temperature", {"prompt": "Once", "temperature": -1},
     dict(text="Once", sampling=dict(temperature=-1)),
     {"prompt": "Once", "temperature": -1}, dict(prompt=["Once"], temperature=-1.0)),
    ("max_tokens past the context", {"prompt": "Once", "max_tokens": 100000},
     dict(text="Once", sampling=dict(max_tokens=100000)),
     {"prompt": "Once", "max_tokens": 100000}, dict(prompt=["Once"], max_tokens=100000)),
    ("prompt past the context", {"prompt": LONG, "max_tokens": 1},
     dict(text=LONG, sampling=dict(max_tokens=1)),
     {"prompt": LONG, "max_tokens": 1}, dict(prompt=[LONG], max_tokens=1)),
    ("token id outside the vocabulary", {"prompt": [1, 70000]},
     dict(token_ids=[1, 70000], sampling=dict()),
     {"input_ids": [1, 70000]}, dict(input_ids=[[1, 70000]])),
    ("top_p", {"prompt": "x", "top_p": 1.5}, dict(text="x", sampling=dict(top_p=1.5)),
     {"prompt": "x", "top_p": 1.5}, dict(prompt=["x"], top_p=1.5)),
    ("stop token id", {"prompt": "x", "stop_token_ids": [99999]},
     dict(text="x", sampling=dict(stop_token_ids=[99999])),
     {"prompt": "x", "stop_token_ids": [99999]}, dict(prompt=["x"], stop_token_ids=[99999])),
    ("min_tokens over max_tokens", {"prompt": "x", "max_tokens": 2, "min_tokens": 5},
     dict(text="x", sampling=dict(max_tokens=2, min_tokens=5)),
     {"prompt": "x", "max_tokens": 2, "min_tokens": 5},
     dict(prompt=["x"], max_tokens=2, min_tokens=5)),
]


def predict_tensors(tg, inputs):
    """gRPC Predict inputs from {name: value}: strings, ints or floats, lists become rank 1 (rank
    2 for lists of lists)."""
    T = tg.types_pb2
    req = tg.predict_pb2.PredictRequest()
    req.model_spec.name = MODEL
    for name, v in inputs.items():
        t = tg.tensor_pb2.TensorProto()
        flat, shape = v, []
        if isinstance(v, list) and v and isinstance(v[0], list):
            flat, shape = [x for row in v for x in row], [len(v), len(v[0])]
        elif isinstance(v, list):
            shape = [len(v)]
        else:
            flat = [v]
        for d in shape:
            t.tensor_shape.dim.add(size=d)
        if isinstance(flat[0], bool):
            t.dtype = T.DT_BOOL
            t.bool_val.extend(flat)
        elif isinstance(flat[0], str):
            t.dtype = T.DT_STRING
            t.string_val.extend(x.encode() for x in flat)
        elif isinstance(flat[0], float):
            t.dtype = T.DT_FLOAT
            t.float_val.extend(flat)
        else:
            t.dtype = T.DT_INT32
            t.int_val.extend(flat)
        req.inputs[name].CopyFrom(t)
    return req


# One chat request in the words of each chat door: (name, status, OpenAI chat body fields,
# Anthropic Messages fields, Ollama /api/chat fields); None where a door has no such field or
# another rule (Ollama's num_predict stops at the context instead of refusing). Each is refused
# with the same status and the same message through every door that has it.
CONV = [{"role": "user", "content": "Once"}]
LONG_CONV = [{"role": "user", "content": LONG}]
CHAT_DOORS = [
    ("temperature", 400, {"temperature": -1}, {"temperature": -1},
     {"options": {"temperature": -1}}),
    ("top_p", 400, {"top_p": 1.5}, {"top_p": 1.5}, {"options": {"top_p": 1.5}}),
    ("top_k", 400, {"top_k": -5}, {"top_k": -5}, {"options": {"top_k": -5}}),
    ("min_p", 400, {"min_p": 2}, None, {"options": {"min_p": 2}}),
    ("presence_penalty", 400, {"presence_penalty": 3}, None,
     {"options": {"presence_penalty": 3}}),
    ("frequency_penalty", 400, {"frequency_penalty": -3}, None,
     {"options": {"frequency_penalty": -3}}),
    ("too many stop strings", 400, {"stop": ["s%d" % i for i in range(40)]},
     {"stop_sequences": ["s%d" % i for i in range(40)]},
     {"options": {"stop": ["s%d" % i for i in range(40)]}}),
    ("max_tokens past the context", 400, {"max_tokens": 100000}, {"max_tokens": 100000}, None),
    ("prompt past the context", 400, {"messages": LONG_CONV}, {"messages": LONG_CONV},
     {"messages": LONG_CONV}),
    ("num_ctx past the model's", 400, None, None, {"options": {"num_ctx": 100000}}),
    ("unknown model", 404, {"model": "nope"}, {"model": "nope"}, {"model": "nope"}),
]


class ChatDoorsTest(SharedServerTest):
    def test_bad_inputs_get_the_same_message_through_every_chat_door(self):
        for name, status, chat, messages, ollama in CHAT_DOORS:
            got = {}
            for door, path, fields, base in (
                    ("openai", "/v1/chat/completions", chat, {"max_tokens": 4}),
                    ("anthropic", "/v1/messages", messages, {"max_tokens": 4}),
                    ("ollama", "/api/chat", ollama, {"stream": False})):
                if fields is None:
                    continue
                body = dict({"model": MODEL, "messages": CONV}, **base)
                body.update(fields)
                st, resp, text, _ = self.c.post(path, body)
                with self.subTest(case=name, door=door):
                    self.assertEqual(st, status, text[:300])
                    got[door] = (resp["error"] if door == "ollama" else
                                 resp["error"]["message"])
            with self.subTest(case=name):
                self.assertEqual(len(set(got.values())), 1, got)
                if name == "num_ctx past the model's":
                    self.assertIn("num_ctx", got["ollama"])


class EveryDoorTest(unittest.TestCase):
    """The same bad input gets the same message and status class through REST completions, a
    batch file, the gRPC GenerationService (unary and stream), REST Predict and gRPC Predict; a
    request stopped at its deadline is 504 / DEADLINE_EXCEEDED through each, with one message."""


    def test_bad_inputs_get_the_same_message_through_every_door(self):
        import test_grpc as tg  # generates the Python stubs from the repository's protos
        g = tg.g
        proc, port, channel = tg.start()
        try:
            c = Client(port)
            gen = tg.g_grpc.GenerationServiceStub(channel)
            predict = tg.prediction_service_pb2_grpc.PredictionServiceStub(channel)
            batch = batch_errors(self, [("/v1/completions", body) for _, body, _, _, _ in EVERY_DOOR])
            for (name, body, fields, instance, inputs), batch_error in zip(EVERY_DOOR, batch):
                with self.subTest(case=name):
                    status, resp, text, _ = c.post("/v1/completions", body)
                    self.assertEqual(status, 400, text[:300])
                    message = resp["error"]["message"]
                    self.assertEqual(batch_error, message)
                    fields = dict(fields)
                    sampling = tg.sampling(**fields.pop("sampling"))
                    if "token_ids" in fields:
                        fields["token_ids"] = g.TokenIds(ids=fields["token_ids"])
                    req = g.GenerateRequest(sampling=sampling, **fields)
                    for method in (gen.Generate, gen.GenerateStream):
                        with self.assertRaises(tg.grpc.RpcError) as cm:
                            r = method(req, timeout=60)
                            if not hasattr(r, "ListFields"):
                                list(r)
                        self.assertEqual(cm.exception.code(), tg.C.INVALID_ARGUMENT)
                        self.assertEqual(cm.exception.details(), message)
                    status, resp, text, _ = c.post("/v1/models/%s:predict" % MODEL,
                                                   {"instances": [instance]})
                    self.assertEqual(status, 400, text[:300])
                    self.assertEqual(resp["error"], message)
                    with self.assertRaises(tg.grpc.RpcError) as cm:
                        predict.Predict(predict_tensors(tg, inputs), timeout=60)
                    self.assertEqual(cm.exception.code(), tg.C.INVALID_ARGUMENT)
                    self.assertEqual(cm.exception.details(), message)
        finally:
            channel.close()
            stop_server(proc)

    def test_every_door_times_out_the_same(self):
        import test_grpc as tg
        g = tg.g
        proc, port, channel = tg.start("--request-timeout", "0.05")
        try:
            c = Client(port)
            long = {"max_tokens": 480, "ignore_eos": True}
            messages = []
            status, body, text, _ = c.post("/v1/completions", dict(prompt="Once", n=8, **long))
            self.assertEqual(status, 504, text[:300])
            self.assertEqual(body["error"]["code"], "timeout")
            messages.append(body["error"]["message"])
            status, body, text, _ = c.post(
                "/v1/chat/completions",
                dict(messages=[{"role": "user", "content": "Once"}], n=8, **long))
            self.assertEqual(status, 504, text[:300])
            messages.append(body["error"]["message"])
            status, body, text, _ = c.post("/v1/models/%s:predict" % MODEL,
                                           {"instances": [dict(prompt="Once", **long)] * 8})
            self.assertEqual(status, 504, text[:300])
            messages.append(body["error"])
            gen = tg.g_grpc.GenerationServiceStub(channel)
            req = g.GenerateRequest(text="Once", sampling=tg.sampling(n=8, **long))
            with self.assertRaises(tg.grpc.RpcError) as cm:
                gen.Generate(req, timeout=60)
            self.assertEqual(cm.exception.code(), tg.C.DEADLINE_EXCEEDED)
            messages.append(cm.exception.details())
            predict = tg.prediction_service_pb2_grpc.PredictionServiceStub(channel)
            with self.assertRaises(tg.grpc.RpcError) as cm:
                predict.Predict(predict_tensors(tg, dict(prompt=["Once"] * 8, max_tokens=480,
                                                     ignore_eos=True)),
                                timeout=60)
            self.assertEqual(cm.exception.code(), tg.C.DEADLINE_EXCEEDED)
            messages.append(cm.exception.details())
            self.assertIn("ran past its deadline", messages[0])
            self.assertEqual(set(messages), {messages[0]}, messages)
        finally:
            channel.close()
            stop_server(proc)


if __name__ == "__main__":
    unittest.main()
