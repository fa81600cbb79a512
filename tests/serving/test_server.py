"""Integration tests of `tokenflow serve`: the real binary on 127.0.0.1 serving stories260K,
driven with raw sockets (to check SSE framing byte for byte), Python's http.client, the official
`openai` npm client, and TF Serving's documented REST shapes. Every test is bounded in time.

Env: TOKENFLOW_BIN, TF_SHARED_DIR, TF_NODE_MODULES (tests/js/node_modules).
"""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("TOKENFLOW_BIN", os.path.join(REPO, "build", "release", "tokenflow"))
SHARED = os.environ.get("TF_SHARED_DIR", os.path.join(os.path.dirname(REPO), "shared"))
STORIES_BIN = os.path.join(SHARED, "models", "stories260K", "stories260K.bin")
NODE_MODULES = os.environ.get("TF_NODE_MODULES", os.path.join(REPO, "tests", "js", "node_modules"))
MODEL = "stories260K"


def start_server(*extra, model=("--model", STORIES_BIN), preexec_fn=None, kv_cache="32MiB"):
    """Starts the server on a free port; returns (process, port). Its stderr goes to a temporary
    file (a pipe nobody reads would fill up with the access log and stall the server). model:
    the flags that say what it serves; kv_cache: its --kv-cache-memory."""
    err = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(
        [BIN, "--log-level", "info", "serve", *model, "--port", "0",
         "--kv-cache-memory", kv_cache, *extra],
        stdout=subprocess.PIPE, stderr=err, text=True, preexec_fn=preexec_fn)
    proc.err_file = err
    line = proc.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not m:
        proc.kill()
        proc.wait()
        err.seek(0)
        raise RuntimeError("server did not start: %r %s" % (line, err.read()))
    return proc, int(m.group(1))


def stop_server(proc, sig=signal.SIGTERM, timeout=30, expect=0):
    """Signals the server and waits; returns (exit code, its stderr). A server told to shut down
    gracefully must exit with `expect` (0): anything else (a crash, a sanitizer's exit code, a
    hang past timeout) fails the calling test with the end of the server's stderr. Pass
    expect=None where the test judges the exit code itself."""
    proc.send_signal(sig)
    try:
        proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    err = ""
    if getattr(proc, "err_file", None) is not None:
        proc.err_file.seek(0)
        err = proc.err_file.read()
        proc.err_file.close()
    if expect is not None and proc.returncode != expect:
        raise AssertionError("the server exited with %s after signal %d, expected %s; its stderr "
                             "ends:\n%s" % (proc.returncode, sig, expect, err[-3000:]))
    return proc.returncode, err


def raw_post(port, path, body, timeout=60):
    """Sends a POST over a raw socket and returns the open socket (to read or drop)."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: "
              b"application/json\r\nConnection: close\r\nContent-Length: " +
              str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


def wait_for(pred, timeout=20):
    """Polls pred every 50 ms; True once it holds, False after timeout seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def self_signed_cert(directory):
    """Writes a certificate for 127.0.0.1 and its key into directory; returns (cert, key)."""
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    return cert, key


def read_all(s):
    """Everything the server sends until it closes (or resets) the connection; closes s."""
    buf = b""
    while True:
        try:
            got = s.recv(65536)
        except ConnectionResetError:
            break
        if not got:
            break
        buf += got
    s.close()
    return buf


class Client:
    def __init__(self, port):
        self.port = port

    def request(self, method, path, body=None, headers=None, raw=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        text = r.read().decode()
        conn.close()
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        return r.status, parsed, text, dict(r.getheaders())

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def raw_stream(self, path, body):
        """POSTs over a raw socket; returns (status line + headers, decoded chunked body)."""
        buf = read_all(raw_post(self.port, path, body))
        head, _, rest = buf.partition(b"\r\n\r\n")
        self.assert_chunked = b"transfer-encoding: chunked" in head.lower()
        body_bytes = b""
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                break
            body_bytes += rest[:size]
            rest = rest[size + 2:]
        return head.decode(), body_bytes.decode()


class ServerCase(unittest.TestCase):
    """One server for all of a class's tests, stopped (exit code 0 checked) after them:
    server_args after serve's own, model_flags (None: stories260K) and model_dir (a directory
    the class made, removed afterwards)."""
    server_args = ("--threads", "1")
    model_flags = None
    model_dir = None

    @classmethod
    def setUpClass(cls):
        kw = {"model": cls.model_flags} if cls.model_flags else {}
        cls.proc, port = start_server(*cls.server_args, **kw)
        cls.c = Client(port)

    @classmethod
    def tearDownClass(cls):
        code, err = stop_server(cls.proc)
        if cls.model_dir:
            shutil.rmtree(cls.model_dir, ignore_errors=True)
        assert code == 0, err[-3000:]


def sse_events(body):
    """Splits an SSE body into its data payloads, checking the framing byte for byte."""
    events = body.split("\n\n")
    assert events[-1] == "", "the stream must end with a blank line: %r" % body[-40:]
    payloads = []
    for e in events[:-1]:
        assert e.startswith("data: ") and "\n" not in e, "bad SSE event %r" % e
        payloads.append(e[len("data: "):])
    assert payloads[-1] == "[DONE]", "the stream must end with data: [DONE]"
    return [json.loads(p) for p in payloads[:-1]]


def story_with_tokens(test, **extra):
    """A greedy 30-token chat answer to "Tell me a story" with logprobs: (its message, the text
    of each token it generated). test: a ServerCase."""
    st, out, text, _ = test.c.post("/v1/chat/completions", dict(
        {"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 30,
         "temperature": 0, "logprobs": True}, **extra))
    test.assertEqual(st, 200, text)
    c = out["choices"][0]
    return c["message"], [t["token"] for t in c["logprobs"]["content"]]


def cli_greedy(prompt, max_tokens):
    """What `tokenflow generate` prints for a greedy run (an independent path: no server)."""
    p = subprocess.run([BIN, "generate", "-m", STORIES_BIN, "-p", prompt, "-t", "0", "-n",
                        str(max_tokens), "--no-echo"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.rstrip("\n")


class SharedServerTest(unittest.TestCase):
    """One server for the whole class (started with SERVER_ARGS), which must exit 0 at the end."""
    SERVER_ARGS = ()

    @classmethod
    def setUpClass(cls):
        cls.proc, cls.port = start_server(*cls.SERVER_ARGS)
        cls.c = Client(cls.port)

    @classmethod
    def tearDownClass(cls):
        rc, err = stop_server(cls.proc)
        assert rc == 0, "server exited with %d: %s" % (rc, err[-2000:])


class ServerTest(SharedServerTest):
    SERVER_ARGS = ("--max-body-bytes", "65536")

    def stats(self):
        return self.c.get("/v1/admin/stats")[1]["models"][MODEL]

    # --- health and models ---------------------------------------------------------------

    def test_health(self):
        self.assertEqual(self.c.get("/healthz")[0], 200)
        status, body, _, _ = self.c.get("/readyz")
        self.assertEqual((status, body["status"]), (200, "ready"))

    def test_models(self):
        status, body, _, _ = self.c.get("/v1/models")
        self.assertEqual(status, 200)
        self.assertEqual(body["object"], "list")
        self.assertEqual([m["id"] for m in body["data"]], [MODEL])
        m = body["data"][0]
        self.assertEqual(m["object"], "model")
        self.assertIsInstance(m["created"], int)
        self.assertEqual(m["owned_by"], "tokenflow")
        # /v1/models/{id}: OpenAI's model object and TF Serving's status in one answer.
        status, one, _, _ = self.c.get("/v1/models/" + MODEL)
        self.assertEqual(status, 200)
        self.assertEqual(one["id"], MODEL)
        self.assertEqual(one["model_version_status"], [
            {"version": "1", "state": "AVAILABLE",
             "status": {"error_code": "OK", "error_message": ""}}])
        status, body, _, _ = self.c.get("/v1/models/nope")
        self.assertEqual(status, 404)
        self.assertEqual(body["error"], "Could not find any versions of model nope")

    def test_request_id(self):
        _, _, _, h = self.c.get("/healthz", headers={"X-Request-Id": "abc-123"})
        self.assertEqual(h.get("X-Request-Id"), "abc-123")
        _, _, _, h = self.c.get("/healthz")
        self.assertTrue(h.get("X-Request-Id", "").startswith("req-"))

    def test_keep_alive(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        for _ in range(3):
            conn.request("POST", "/v1/completions", body=json.dumps(
                {"prompt": "Once", "max_tokens": 4, "temperature": 0}))
            r = conn.getresponse()
            self.assertEqual(r.status, 200)
            json.loads(r.read())
        conn.close()

    # --- completions ---------------------------------------------------------------------

    def test_completion_greedy_equals_generate(self):
        status, body, _, _ = self.c.post("/v1/completions", {
            "model": MODEL, "prompt": "Once upon a time", "max_tokens": 40, "temperature": 0})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["object"], "text_completion")
        self.assertTrue(body["id"].startswith("cmpl-"))
        self.assertEqual(body["model"], MODEL)
        ch = body["choices"]
        self.assertEqual(len(ch), 1)
        self.assertEqual(ch[0]["index"], 0)
        self.assertIn(ch[0]["finish_reason"], ("length", "stop"))
        self.assertEqual(ch[0]["text"], cli_greedy("Once upon a time", 40))
        u = body["usage"]
        self.assertEqual(u["prompt_tokens"], 5)  # BOS + 4
        self.assertEqual(u["total_tokens"], u["prompt_tokens"] + u["completion_tokens"])
        self.assertLessEqual(u["completion_tokens"], 40)

    def test_completion_stream_framing_and_usage(self):
        req = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 30, "temperature": 0,
               "ignore_eos": True}
        _, whole, _, _ = self.c.post("/v1/completions", req)
        head, body = self.c.raw_stream("/v1/completions", dict(req, stream=True,
                                       stream_options={"include_usage": True}))
        self.assertIn("200 OK", head.splitlines()[0])
        self.assertIn("content-type: text/event-stream", head.lower())
        self.assertTrue(self.c.assert_chunked)
        events = sse_events(body)
        text = "".join(e["choices"][0]["text"] for e in events if e["choices"])
        self.assertEqual(text, whole["choices"][0]["text"])
        for e in events:
            self.assertEqual(e["object"], "text_completion")
            self.assertEqual(e["id"], events[0]["id"])
        finals = [e for e in events if e["choices"] and e["choices"][0]["finish_reason"]]
        self.assertEqual(len(finals), 1)
        self.assertEqual(finals[0]["choices"][0]["finish_reason"], "length")
        self.assertEqual(events[-1]["choices"], [])
        self.assertEqual(events[-1]["usage"]["completion_tokens"], 30)
        self.assertGreater(len(events), 10, "one event per token, not one at the end")

    def test_prompt_forms_and_n(self):
        status, body, _, _ = self.c.post("/v1/completions", {
            "prompt": ["Once upon a time", "The dog"], "max_tokens": 8, "n": 2,
            "temperature": 1.0, "seed": 3})
        self.assertEqual(status, 200, body)
        self.assertEqual([c["index"] for c in body["choices"]], [0, 1, 2, 3])
        # Token ids give the same as the text they encode.
        _, by_text, _, _ = self.c.post("/v1/completions", {
            "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})
        ids = [1, 403, 407, 261, 378]  # BOS + "Once upon a time" in stories260K's vocabulary
        _, by_ids, _, _ = self.c.post("/v1/completions", {
            "prompt": ids, "max_tokens": 8, "temperature": 0})
        self.assertEqual(by_ids["usage"]["prompt_tokens"], 5)
        _, lists, _, _ = self.c.post("/v1/completions", {
            "prompt": [ids, ids], "max_tokens": 8, "temperature": 0})
        self.assertEqual(len(lists["choices"]), 2)
        self.assertEqual(lists["choices"][0]["text"], lists["choices"][1]["text"])
        self.assertEqual(by_ids["choices"][0]["text"], by_text["choices"][0]["text"])

    def test_usage_counts_prompt_tokens_found_in_the_prefix_cache(self):
        prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside"
        req = {"prompt": prompt, "max_tokens": 2, "temperature": 0}
        first = self.c.post("/v1/completions", req)[1]["usage"]
        again = self.c.post("/v1/completions", req)[1]["usage"]
        self.assertGreaterEqual(first["prompt_tokens"], 17)
        self.assertGreaterEqual(again["prompt_tokens_details"]["cached_tokens"], 16)
        self.assertEqual(again["prompt_tokens_details"]["cached_tokens"] % 16, 0)

    def test_seed_reproducible_and_best_of(self):
        req = {"prompt": "Once", "max_tokens": 16, "temperature": 1.0, "seed": 11}
        a = self.c.post("/v1/completions", req)[1]["choices"][0]["text"]
        b = self.c.post("/v1/completions", req)[1]["choices"][0]["text"]
        self.assertEqual(a, b)
        status, body, _, _ = self.c.post("/v1/completions", dict(req, best_of=3, n=1))
        self.assertEqual(status, 200, body)
        self.assertEqual(len(body["choices"]), 1)

    def test_logprobs_stop_echo(self):
        status, body, _, _ = self.c.post("/v1/completions", {
            "prompt": "Once upon a time", "max_tokens": 6, "temperature": 0, "logprobs": 3})
        self.assertEqual(status, 200, body)
        lp = body["choices"][0]["logprobs"]
        n = body["usage"]["completion_tokens"]
        self.assertEqual(len(lp["tokens"]), n)
        self.assertEqual(len(lp["token_logprobs"]), n)
        self.assertEqual(len(lp["text_offset"]), n)
        for top, chosen in zip(lp["top_logprobs"], lp["token_logprobs"]):
            self.assertEqual(len(top), 3)
            self.assertLessEqual(chosen, 0.0)
            self.assertAlmostEqual(max(top.values()), chosen, places=4)  # greedy: the best
        full = self.c.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 40,
                                               "temperature": 0})[1]["choices"][0]["text"]
        word = full.split()[3]
        cut = self.c.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 40,
                                              "temperature": 0, "stop": [word]})[1]
        self.assertEqual(cut["choices"][0]["finish_reason"], "stop")
        self.assertEqual(cut["choices"][0]["text"], full[:full.index(word)])
        echo = self.c.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 5,
                                               "temperature": 0, "echo": True})[1]
        self.assertTrue(echo["choices"][0]["text"].startswith("Once upon a time"))

    # --- chat ----------------------------------------------------------------------------

    def test_chat_whole_and_streamed(self):
        req = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story"}],
               "max_completion_tokens": 20, "temperature": 0, "logprobs": True,
               "top_logprobs": 2}
        status, body, _, _ = self.c.post("/v1/chat/completions", req)
        self.assertEqual(status, 200, body)
        self.assertEqual(body["object"], "chat.completion")
        self.assertTrue(body["id"].startswith("chatcmpl-"))
        msg = body["choices"][0]["message"]
        self.assertEqual(msg["role"], "assistant")
        content = body["choices"][0]["logprobs"]["content"]
        self.assertEqual(len(content), body["usage"]["completion_tokens"])
        self.assertEqual(set(content[0]), {"token", "logprob", "bytes", "top_logprobs"})
        self.assertEqual(len(content[0]["top_logprobs"]), 2)
        _, raw = self.c.raw_stream("/v1/chat/completions", dict(req, stream=True))
        events = sse_events(raw)
        self.assertEqual(events[0]["object"], "chat.completion.chunk")
        self.assertEqual(events[0]["choices"][0]["delta"]["role"], "assistant")
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
        self.assertEqual(text, msg["content"])
        self.assertEqual(events[-1]["choices"][0]["finish_reason"],
                         body["choices"][0]["finish_reason"])

    # --- errors --------------------------------------------------------------------------

    def assert_openai_error(self, status, body, want_status, param=None):
        self.assertEqual(status, want_status, body)
        self.assertEqual(set(body["error"]), {"message", "type", "param", "code"})
        self.assertTrue(body["error"]["message"])
        if param:
            self.assertEqual(body["error"]["param"], param)

    def test_bad_requests_get_errors_and_the_server_goes_on(self):
        c = self.c
        s, b, _, _ = c.request("POST", "/v1/completions", raw='{"prompt": "Once", ')
        self.assert_openai_error(s, b, 400)
        self.assertIn("JSON", b["error"]["message"])
        s, b, _, _ = c.post("/v1/completions", {"prompt": "Once", "temperature": "hot"})
        self.assert_openai_error(s, b, 400, "temperature")
        s, b, _, _ = c.post("/v1/completions", {"prompt": "Once", "temprature": 0.5})
        self.assert_openai_error(s, b, 400, "temprature")
        s, b, _, _ = c.post("/v1/completions", {"prompt": "Once", "top_p": 1.5})
        self.assert_openai_error(s, b, 400, "top_p")
        s, b, _, _ = c.post("/v1/completions", {"model": "gpt-9", "prompt": "Once"})
        self.assert_openai_error(s, b, 404, "model")
        self.assertEqual(b["error"]["code"], "model_not_found")
        s, b, _, _ = c.post("/v1/completions", {"prompt": "Once", "max_tokens": 100000})
        self.assert_openai_error(s, b, 400, "max_tokens")
        s, b, _, _ = c.post("/v1/completions", {"prompt": [99999], "max_tokens": 4})
        self.assert_openai_error(s, b, 400)
        s, b, _, _ = c.post("/v1/completions", {"max_tokens": 4})
        self.assert_openai_error(s, b, 400, "prompt")
        s, b, _, _ = c.post("/v1/chat/completions", {"messages": []})
        self.assert_openai_error(s, b, 400, "messages")
        s, b, _, _ = c.post("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]})
        self.assert_openai_error(s, b, 400)
        s, b, _, _ = c.post("/v1/completions", ["not", "an", "object"])
        self.assert_openai_error(s, b, 400)
        s, b, _, _ = c.post("/v1/completions", {"prompt": "x" * 70000})
        self.assert_openai_error(s, b, 413)
        s, b, _, _ = c.get("/v1/completions")
        self.assert_openai_error(s, b, 405)
        s, b, _, _ = c.get("/nowhere")
        self.assert_openai_error(s, b, 404)
        # Still serving, and nothing leaked.
        s, b, _, _ = c.post("/v1/completions", {"prompt": "Once", "max_tokens": 4})
        self.assertEqual(s, 200, b)
        self.wait_idle()

    def test_malformed_http(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.sendall(b"GARBAGE\r\n\r\n")
        reply = s.recv(4096)
        s.close()
        self.assertTrue(reply.startswith(b"HTTP/1.1 400"), reply)

    def wait_idle(self, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st = self.stats()
            if st["kv_blocks_used"] == 0 and st["running"] == 0 and st["waiting"] == 0:
                return st
            time.sleep(0.05)
        self.fail("the engine did not become idle: %r" % self.stats())

    # --- TF Serving REST -----------------------------------------------------------------

    def test_tfserving_status_and_metadata(self):
        s, b, _, _ = self.c.get("/v1/models/%s/versions/1" % MODEL)
        self.assertEqual(s, 200)
        self.assertEqual(b, {"model_version_status": [
            {"version": "1", "state": "AVAILABLE",
             "status": {"error_code": "OK", "error_message": ""}}]})
        s, b, _, _ = self.c.get("/v1/models/%s/versions/7" % MODEL)
        self.assertEqual(s, 404)
        self.assertEqual(list(b), ["error"])
        s, b, _, _ = self.c.get("/v1/models/%s/labels/stable" % MODEL)
        self.assertEqual(s, 404)
        s, b, _, _ = self.c.get("/v1/models/%s/metadata" % MODEL)
        self.assertEqual(s, 200)
        self.assertEqual(b["model_spec"], {"name": MODEL, "signature_name": "", "version": "1"})
        # tokenflow's own signature under its name (serving_default is the generate signature,
        # tests/serving/test_generate_signature.py).
        sig = b["metadata"]["signature_def"]["signature_def"]["tokenflow"]
        self.assertEqual(sig["method_name"], "tensorflow/serving/predict")
        self.assertEqual(sig["inputs"]["prompt"]["dtype"], "DT_STRING")
        self.assertEqual(set(sig["outputs"]), {"text", "output_ids", "finish_reason", "logprobs"})

    def test_tfserving_predict(self):
        path = "/v1/models/%s:predict" % MODEL
        greedy = cli_greedy("Once upon a time", 12)
        s, b, _, _ = self.c.post(path, {"instances": [
            "Once upon a time",
            {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0},
            {"input_ids": [1, 403, 407, 261, 378], "max_tokens": 3, "temperature": 0,
             "logprobs": 0}]})
        self.assertEqual(s, 200, b)
        preds = b["predictions"]
        self.assertEqual(len(preds), 3)
        self.assertEqual(preds[1]["text"], greedy)
        self.assertEqual(len(preds[2]["output_ids"]), 3)
        self.assertEqual(len(preds[2]["logprobs"]), 3)
        self.assertIn(preds[0]["finish_reason"], ("length", "stop"))
        s, b, _, _ = self.c.post("/v1/models/%s/versions/1:predict" % MODEL, {
            "inputs": {"prompt": ["Once upon a time", "Once upon a time"], "max_tokens": 12,
                       "temperature": 0}})
        self.assertEqual(s, 200, b)
        self.assertEqual(b["outputs"]["text"], [greedy, greedy])
        self.assertEqual(len(b["outputs"]["output_ids"]), 2)
        for bad in ({}, {"instances": []}, {"instances": ["a"], "inputs": ["b"]},
                    {"instances": [{"prompt": "a", "bogus": 1}]}, {"instances": [3.5]},
                    {"signature_name": "other", "instances": ["a"]}):
            s, b, _, _ = self.c.post(path, bad)
            self.assertEqual(s, 400, bad)
            self.assertIsInstance(b["error"], str)
        s, b, _, _ = self.c.post("/v1/models/nope:predict", {"instances": ["a"]})
        self.assertEqual(s, 404)
        self.assertEqual(b, {"error": "Servable not found for request: Latest(nope)"})

    # --- many clients, vanishing clients -------------------------------------------------

    def test_64_concurrent_streams(self):
        results = [None] * 64

        def one(i):
            _, body = self.c.raw_stream("/v1/completions", {
                "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0.8, "seed": i,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
            events = sse_events(body)
            results[i] = (events[-1]["usage"]["completion_tokens"],
                          sum(1 for e in events if e["choices"] and e["choices"][0]["text"]))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertTrue(all(r is not None for r in results), results)
        for r in results:
            self.assertEqual(r[0], 24)
        self.wait_idle()

    def test_kv_cache_groups_are_reported(self):
        # A plain decoder stack has one cache group of every layer (issue 51): the stats page
        # shows it per version, and Prometheus its share of the pool.
        self.c.post("/v1/completions", {"prompt": "Once", "max_tokens": 2})
        version = next(iter(self.stats()["versions"].values()))
        # stories260K: 5 layers, kv_dim 32, an f32 cache: 5 x 2 x 32 x 4 bytes a token.
        self.assertEqual(version["kv_groups"], [{"kind": "full_attention", "window": 0,
                                                 "layers": 5,
                                                 "blocks_used": version["kv_blocks_used"],
                                                 "bytes_per_token": 1280, "dtype": "f32"}])
        metrics = self.c.get("/metrics")[2]
        self.assertRegex(metrics, r'tokenflow_kv_cache_group_usage_ratio\{model="%s",version="\d+",'
                                  r'group="0",kind="full_attention"\} [0-9.e-]+\n' % MODEL)
        self.assertRegex(metrics, r'tokenflow_kv_cache_bytes_per_token\{model="%s",version="\d+",'
                                  r'group="0",kind="full_attention",dtype="f32"\} 1280\n' % MODEL)

    def test_client_killed_mid_stream_frees_its_blocks(self):
        for kill_after in (1, 5):
            s = raw_post(self.port, "/v1/completions", {
                "prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": True,
                "stream": True})
            got = b""
            while got.count(b"data: ") < kill_after:
                got += s.recv(4096)
            # The counters land at the end of the step that streamed the first token.
            deadline = time.time() + 10
            while self.stats()["kv_blocks_used"] == 0 and time.time() < deadline:
                time.sleep(0.002)
            self.assertGreater(self.stats()["kv_blocks_used"], 0)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()  # RST: the client is gone
            st = self.wait_idle()
            self.assertEqual(st["kv_blocks_used"], 0)
        # A non-streaming request whose client disconnects is cancelled too.
        s = raw_post(self.port, "/v1/completions",
                     {"prompt": "Once", "max_tokens": 400, "ignore_eos": True})
        time.sleep(0.05)
        s.close()
        self.wait_idle()

    # --- curl, as the docs show it -------------------------------------------------------

    def curl(self, *args):
        p = subprocess.run(["curl", "-sS", "--max-time", "60", "-w", "\n%{http_code}", *args],
                           capture_output=True, text=True, timeout=90)
        self.assertEqual(p.returncode, 0, p.stderr)
        body, _, code = p.stdout.rpartition("\n")
        return int(code), body

    def test_curl_every_route(self):
        base = "http://127.0.0.1:%d" % self.port
        j = ["-H", "Content-Type: application/json", "-d"]
        gets = ["/healthz", "/readyz", "/v1/models", "/v1/models/" + MODEL,
                "/v1/models/%s/versions/1" % MODEL, "/v1/models/%s/metadata" % MODEL,
                "/v1/admin/stats"]
        for path in gets:
            code, body = self.curl(base + path)
            self.assertEqual(code, 200, path)
            json.loads(body)
        posts = [("/v1/completions", {"prompt": "Once", "max_tokens": 8}),
                 ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                           "max_tokens": 8}),
                 ("/v1/models/%s:predict" % MODEL, {"instances": ["Once"]}),
                 ("/v1/models/%s/versions/1:predict" % MODEL, {"inputs": ["Once"]})]
        for path, req in posts:
            code, body = self.curl(base + path, *j, json.dumps(req))
            self.assertEqual(code, 200, (path, body))
            json.loads(body)
        for path, req in posts[:2]:
            code, body = self.curl("-N", base + path, *j, json.dumps(dict(req, stream=True)))
            self.assertEqual(code, 200, path)
            self.assertTrue(sse_events(body + ""))

    # --- the official openai client ------------------------------------------------------

    def test_openai_npm_client(self):
        script = os.path.join(os.path.dirname(NODE_MODULES), "openai_client.mjs")
        env = dict(os.environ, TF_BASE_URL="http://127.0.0.1:%d/v1" % self.port, TF_MODEL=MODEL)
        p = subprocess.run(["node", script], capture_output=True, text=True, timeout=120,
                           env=env, cwd=os.path.dirname(NODE_MODULES))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("all openai client checks passed", p.stdout)


class OverloadTest(unittest.TestCase):
    def test_queue_limit_answers_503_with_retry_after(self):
        proc, port = start_server("--max-num-seqs", "1", "--max-waiting-requests", "2",
                                  "--threads", "1")
        try:
            c = Client(port)
            long = {"prompt": "Once", "max_tokens": 480, "ignore_eos": True, "temperature": 0}
            results = []

            def one():
                results.append(c.post("/v1/completions", long))

            # One runs at a time and each takes a while: a burst of 8 overfills the queue.
            threads = [threading.Thread(target=one) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            statuses = sorted(r[0] for r in results)
            self.assertEqual(len(statuses), 8)
            self.assertEqual(set(statuses), {200, 503}, statuses)
            for status, body, _, headers in results:
                if status == 503:
                    self.assertEqual(body["error"]["type"], "overloaded_error")
                    self.assertEqual(headers.get("Retry-After"), "1")
                else:
                    self.assertEqual(body["usage"]["completion_tokens"], 480)
            s, b, _, _ = c.post("/v1/completions", {"prompt": "Once", "max_tokens": 4})
            self.assertEqual(s, 200, b)
        finally:
            rc, err = stop_server(proc)
        self.assertEqual(rc, 0, err[-2000:])


class ShutdownTest(unittest.TestCase):
    def test_sigterm_lets_requests_finish_then_exits_zero(self):
        proc, port = start_server("--shutdown-timeout", "20", "--threads", "1")
        c = Client(port)
        out = {}

        def whole_request():
            out["whole"] = c.post("/v1/completions", {"prompt": "Once", "max_tokens": 400,
                                                      "ignore_eos": True, "temperature": 0})

        # A streamed request that has started, and a whole one in flight, when SIGTERM comes.
        s = raw_post(port, "/v1/completions", {
            "prompt": "Once", "max_tokens": 450, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}})
        t = threading.Thread(target=whole_request)
        t.start()
        got = b""
        while b"data: " not in got:
            got += s.recv(4096)
        deadline = time.time() + 10  # both requests received (a later one would get 503)
        while time.time() < deadline and c.get("/v1/admin/stats")[1]["models"][MODEL]["running"] < 2:
            time.sleep(0.001)
        proc.send_signal(signal.SIGTERM)
        got += read_all(s)
        t.join(60)
        rc, err = stop_server(proc)
        self.assertEqual(rc, 0, err[-2000:])
        self.assertIn(b"data: [DONE]", got)
        usage = [json.loads(line[6:]) for line in got.split(b"\r\n")
                 if line.startswith(b"data: {") and b'"usage"' in line]
        self.assertEqual(usage[-1]["usage"]["completion_tokens"], 450)
        status, body, _, _ = out["whole"]
        self.assertEqual(status, 200, body)
        self.assertEqual(body["usage"]["completion_tokens"], 400)
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()

    def test_bad_flags(self):
        for args in (["--port", "70000"], ["--served-model-name", "a", "--served-model-name", "b"]):
            p = subprocess.run([BIN, "serve", "-m", STORIES_BIN, *args], capture_output=True,
                               text=True, timeout=30)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("error", p.stderr.lower())
        p = subprocess.run([BIN, "serve", "-m", "/nonexistent/model"], capture_output=True,
                           text=True, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("nonexistent", p.stderr)


class Q8KvCacheTest(ServerCase):
    """--kv-cache-dtype q8_0 (issue 55): requests run on the 8-bit cache, which the stats page and
    /metrics report with its bytes per token (int8 K and V plus an f16 scale per token and head:
    stories260K's 5 layers x (2 x 32 + 2 x 4 x 2) = 400, against 1,280 in f32)."""
    server_args = ("--threads", "1", "--kv-cache-dtype", "q8_0")

    def test_served_and_reported(self):
        s, b, text, _ = self.c.post("/v1/completions", {"prompt": "Once upon a time",
                                                         "max_tokens": 16, "temperature": 0})
        self.assertEqual(s, 200, text)
        self.assertEqual(b["usage"]["completion_tokens"], 16)
        stats = self.c.get("/v1/admin/stats")[1]["models"][MODEL]
        groups = next(iter(stats["versions"].values()))["kv_groups"]
        self.assertEqual((groups[0]["dtype"], groups[0]["bytes_per_token"]), ("q8_0", 400))
        self.assertRegex(self.c.get("/metrics")[2],
                         r'tokenflow_kv_cache_bytes_per_token\{[^}]*dtype="q8_0"\} 400\n')


if __name__ == "__main__":
    unittest.main()
