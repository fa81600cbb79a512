"""Issue 19: one request contract. The same request gets the same answer and the same status
class through every door: here the OpenAI REST routes against a batch file (`tokenflow generate
--input-file`), which used to skip the HTTP planner's checks (unknown fields, beam-search and
echo rules, the context), the gRPC GenerationService against REST, and the deadline outcome
through completions and TF Serving's Predict.

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
    ("/v1/completions", {"prompt": "Once", "echo": True, "logprobs": 1}, "echo"),
    ("/v1/completions", {"prompt": "Once", "max_tokens": 100000}, "max_tokens"),
    ("/v1/completions", {"prompt": "Once upon a time " * 3500, "max_tokens": 1}, "prompt"),
    ("/v1/completions", {"prompt": [1, 4294967296]}, "prompt"),
    ("/v1/completions", {"prompt": "x", "use_beam_search": True, "n": 2, "best_of": 1}, "best_of"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                              "max_completion_tokens": "many"}, "max_completion_tokens"),
    ("/v1/chat/completions", {"messages": "hi"}, "messages"),
]


class BatchEqualsRestTest(SharedServerTest):
    def test_bad_inputs_get_the_same_error_through_rest_and_a_batch_file(self):
        rest = []
        for url, body, field in BAD:
            status, resp, text, _ = self.c.post(url, body)
            with self.subTest(body=str(body)[:80]):
                self.assertEqual(status, 400, text[:300])
                self.assertIn(field, resp["error"]["message"] + str(resp["error"]["param"]))
            rest.append(resp["error"]["message"] if resp else text)
        with tempfile.TemporaryDirectory() as d:
            inp, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
            with open(inp, "w") as f:
                for i, (url, body, _) in enumerate(BAD):
                    f.write(json.dumps({"custom_id": str(i), "url": url, "body": body}) + "\n")
            r = subprocess.run([BIN, "generate", "-m", STORIES_BIN, "--input-file", inp,
                                "--output-file", out], capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr[-1000:])
            with open(out) as f:
                lines = [json.loads(line) for line in f]
        self.assertEqual(len(lines), len(BAD))
        for (url, body, _), line, message in zip(BAD, lines, rest):
            with self.subTest(body=str(body)[:80]):
                self.assertIsNone(line["response"], line)
                self.assertEqual(line["error"]["message"], message)


class GrpcEqualsRestTest(unittest.TestCase):
    """The gRPC GenerationService is planned by the same code: the same bad input is
    INVALID_ARGUMENT with REST's message, word for word."""

    def test_bad_inputs_get_the_same_message_through_grpc(self):
        import test_grpc as tg  # generates the Python stubs from the repository's protos
        g = tg.g
        proc, port, channel = tg.start()
        try:
            c = Client(port)
            gen = tg.g_grpc.GenerationServiceStub(channel)
            long_text = "Once upon a time " * 3500
            cases = [
                ({"prompt": "Once", "temperature": -1},
                 g.GenerateRequest(text="Once", sampling=tg.sampling(temperature=-1))),
                ({"prompt": "Once", "max_tokens": 100000},
                 g.GenerateRequest(text="Once", sampling=tg.sampling(max_tokens=100000))),
                ({"prompt": long_text, "max_tokens": 1},
                 g.GenerateRequest(text=long_text, sampling=tg.sampling(max_tokens=1))),
                ({"prompt": [1, 70000]}, g.GenerateRequest(token_ids=g.TokenIds(ids=[1, 70000]))),
                ({"prompt": "x", "top_p": 1.5},
                 g.GenerateRequest(text="x", sampling=tg.sampling(top_p=1.5))),
            ]
            for body, req in cases:
                with self.subTest(body=str(body)[:60]):
                    status, resp, text, _ = c.post("/v1/completions", body)
                    self.assertEqual(status, 400, text[:300])
                    for method in (gen.Generate, gen.GenerateStream):
                        with self.assertRaises(tg.grpc.RpcError) as cm:
                            r = method(req, timeout=60)
                            if not hasattr(r, "ListFields"):
                                list(r)
                        self.assertEqual(cm.exception.code(), tg.C.INVALID_ARGUMENT)
                        self.assertEqual(cm.exception.details(), resp["error"]["message"])
        finally:
            channel.close()
            stop_server(proc)


class DeadlineTest(unittest.TestCase):
    """A request stopped at its deadline is a 504 through completions and Predict alike (Predict
    answered 200 with finish_reason "abort")."""

    def test_every_door_times_out_the_same(self):
        proc, port = start_server("--request-timeout", "0.05")
        try:
            c = Client(port)
            long = {"max_tokens": 480, "ignore_eos": True}
            status, body, text, _ = c.post("/v1/completions", dict(prompt="Once", n=8, **long))
            self.assertEqual(status, 504, text[:300])
            self.assertEqual(body["error"]["code"], "timeout")
            status, body, text, _ = c.post("/v1/models/%s:predict" % MODEL,
                                           {"instances": [dict(prompt="Once", **long)] * 8})
            self.assertEqual(status, 504, text[:300])
            self.assertIn("ran past its deadline", body["error"])
        finally:
            stop_server(proc)


if __name__ == "__main__":
    unittest.main()
