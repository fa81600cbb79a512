"""Integration tests of API keys and per-key limits (`tokenflow serve --api-keys-file`): 401
without or with a wrong key on every route but health, 403 for a model the key may not use, 429
with Retry-After over a key's request rate or concurrency, keys never in the logs, and prefix-
cache blocks shared only within one key (or one cache_salt).
Env: TOKENFLOW_BIN, TF_SHARED_DIR.
"""
import hashlib
import os
import shutil
import socket
import tempfile
import threading
import time
import unittest

from test_server import Client, self_signed_cert, start_server, stop_server

PROMPT = "Once upon a time there was a little girl who liked to play in the park with her dog"


class AuthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tf_auth_")
        cls.keys = os.path.join(cls.dir, "keys")
        with open(cls.keys, "w") as f:
            f.write("sk-admin name=admin admin\n"
                    "sha256:%s name=limited models=stories260K rpm=3\n"
                    "sk-other name=other models=someothermodel\n"
                    "sk-one name=one concurrency=8\n" % hashlib.sha256(b"sk-limited").hexdigest())
        cls.log = os.path.join(cls.dir, "access.log")
        cls.proc, cls.port = start_server("--api-keys-file", cls.keys, "--access-log", cls.log)
        cls.c = Client(cls.port)

    @classmethod
    def tearDownClass(cls):
        _, err = stop_server(cls.proc)
        with open(cls.log) as f:
            logs = f.read() + err
        for secret in ("sk-admin", "sk-limited", "sk-other", "sk-one"):
            assert secret not in logs, "a key reached the logs"
        shutil.rmtree(cls.dir, ignore_errors=True)

    def post(self, key, body=None, path="/v1/completions"):
        headers = {"Authorization": "Bearer " + key} if key is not None else {}
        return self.c.post(path, body or {"prompt": "Hi", "max_tokens": 2}, headers=headers)

    def test_keys_are_required_except_for_health(self):
        for key in (None, "sk-wrong", "", "sk-admi"):
            status, body, _, headers = self.post(key)
            self.assertEqual(status, 401, key)
            self.assertEqual(body["error"]["code"], "invalid_api_key")
            self.assertEqual(headers.get("WWW-Authenticate"), "Bearer")
        status, _, _, _ = self.c.get("/v1/models", headers={"Authorization": "Basic eDp5"})
        self.assertEqual(status, 401)
        self.assertEqual(self.c.get("/v1/models/stories260K")[0], 401)  # TF Serving routes too
        self.assertEqual(self.c.get("/healthz")[0], 200)
        self.assertEqual(self.c.get("/readyz")[0], 200)
        self.assertEqual(self.post("sk-admin")[0], 200)
        self.assertEqual(self.c.get("/v1/models",
                                    headers={"Authorization": "Bearer sk-admin"})[0], 200)

    def test_models_outside_the_key_are_forbidden(self):
        status, body, _, _ = self.post("sk-other")
        self.assertEqual(status, 403)
        self.assertIn("may not use model 'stories260K'", body["error"]["message"])
        status, body, _, _ = self.c.post("/v1/models/stories260K:predict",
                                         {"instances": ["Hi"]},
                                         headers={"Authorization": "Bearer sk-other"})
        self.assertEqual(status, 403)
        self.assertIn("error", body)

    def test_every_door_checks_the_key_before_the_model(self):
        # Issue 49: on every REST door a key held to another model gets 403 for an existing
        # model and a missing one alike (before: 404 for a missing one told which exist), and
        # before the body's model-specific parts are decoded (a malformed predict body is
        # still 403, not 400).
        posts = {
            "/v1/completions": lambda m: {"model": m, "prompt": "Hi", "max_tokens": 2},
            "/v1/chat/completions": lambda m: {"model": m, "max_tokens": 2,
                                               "messages": [{"role": "user", "content": "Hi"}]},
            "/v1/responses": lambda m: {"model": m, "input": "Hi", "max_output_tokens": 2},
            "/v1/embeddings": lambda m: {"model": m, "input": "Hi"},
            "/tokenize": lambda m: {"model": m, "prompt": "Hi"},
            "/detokenize": lambda m: {"model": m, "tokens": [1, 2]},
            "/v1/models/%s:predict": lambda m: {"instances": 5},
        }
        gets = ["/v1/models/%s", "/v1/models/%s/metadata", "/v1/models/%s/versions/1",
                "/v1/models/%s:1"]
        for key, models, want in (("sk-other", ("stories260K", "nope"), 403),
                                  ("sk-admin", ("nope",), 404)):
            headers = {"Authorization": "Bearer " + key}
            for model in models:
                for path, body in posts.items():
                    url = path % model if "%s" in path else path
                    status, b, text, _ = self.c.post(url, body(model), headers=headers)
                    self.assertEqual(status, want, (key, url, text))
                    if want == 403:
                        self.assertIn("may not use model '%s'" % model, text)
                for path in gets:
                    status, _, text, _ = self.c.get(path % model, headers=headers)
                    self.assertEqual(status, want, (key, path % model, text))

    def test_request_rate_gives_429_with_retry_after(self):
        codes = [self.post("sk-limited")[0] for _ in range(3)]
        self.assertEqual(codes, [200, 200, 200])
        status, body, _, headers = self.post("sk-limited")
        self.assertEqual(status, 429)
        self.assertEqual(body["error"]["code"], "rate_limit_exceeded")
        self.assertGreaterEqual(int(headers["Retry-After"]), 1)
        self.assertEqual(self.post("sk-admin")[0], 200)  # other keys are not limited

    def test_concurrency_per_key(self):
        results = []
        slow = threading.Thread(target=lambda: results.append(self.post(
            "sk-one", {"prompt": "Hi", "max_tokens": 480, "n": 8, "ignore_eos": True})[0]))
        slow.start()
        admin = {"Authorization": "Bearer sk-admin"}

        def running():
            return self.c.get("/v1/admin/stats", headers=admin)[1]["models"].get(
                "stories260K", {}).get("running", 0)

        deadline = time.time() + 10
        while time.time() < deadline and slow.is_alive() and running() == 0:
            time.sleep(0.002)
        status = self.post("sk-one")[0]  # while the slow one runs
        slow.join(60)
        self.assertEqual(status, 429)
        self.assertEqual(results, [200])
        self.assertEqual(self.post("sk-one")[0], 200)  # released when it ended
        # Concurrency counts sequences: 8 running sequences leave no room for a ninth, and a
        # request of 9 can never run under this key.
        status, body = self.post("sk-one", {"prompt": "Hi", "max_tokens": 1, "n": 9})[:2]
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"]["code"], "too_many_sequences")

    def cached(self, key, salt=None):
        body = {"prompt": PROMPT, "max_tokens": 1}
        if salt:
            body["cache_salt"] = salt
        status, resp, _, _ = self.post(key, body)
        self.assertEqual(status, 200, resp)
        return resp["usage"]["prompt_tokens_details"]["cached_tokens"]

    def test_prefix_cache_is_shared_only_within_a_key_or_salt(self):
        self.cached("sk-admin")
        self.assertGreater(self.cached("sk-admin"), 0)   # same key: hit
        self.assertEqual(self.cached("sk-one"), 0)       # another key: never
        self.cached("sk-admin", salt="tenant-a")
        self.assertEqual(self.cached("sk-admin", salt="tenant-b"), 0)
        self.assertGreater(self.cached("sk-admin", salt="tenant-a"), 0)


class DeadlineTest(unittest.TestCase):
    LONG = {"prompt": "Hi", "max_tokens": 480, "n": 8, "ignore_eos": True}

    def kv_used(self, c):
        deadline = time.time() + 10
        while time.time() < deadline:
            used = c.get("/v1/admin/stats")[1]["models"]["stories260K"]["kv_blocks_used"]
            if used == 0:
                return 0
            time.sleep(0.02)
        return used

    def test_request_timeout_and_server_maximum(self):
        from test_server import sse_events
        proc, port = start_server("--threads", "1")
        try:
            c = Client(port)
            t0 = time.time()
            status, body, _, _ = c.post("/v1/completions", dict(self.LONG, timeout=0.05))
            self.assertEqual(status, 504, body)
            self.assertEqual(body["error"]["code"], "timeout")
            self.assertLess(time.time() - t0, 5)
            self.assertEqual(self.kv_used(c), 0)
            head, text = c.raw_stream("/v1/completions", dict(self.LONG, timeout=0.05,
                                                              stream=True))
            self.assertTrue(head.startswith("HTTP/1.1 200"))
            finishes = {ch["finish_reason"] for e in sse_events(text) for ch in e["choices"]}
            self.assertIn("abort", finishes)
            self.assertEqual(self.kv_used(c), 0)
            for bad in (-1, 0, "soon"):
                status, body, _, _ = c.post("/v1/completions", {"prompt": "Hi", "timeout": bad})
                self.assertEqual((status, body["error"]["param"]), (400, "timeout"), bad)
            self.assertEqual(c.post("/v1/completions", {"prompt": "Hi", "max_tokens": 4,
                                                        "timeout": 30})[0], 200)
        finally:
            stop_server(proc)
        proc, port = start_server("--threads", "1", "--request-timeout", "0.05")
        try:
            status, body, _, _ = Client(port).post("/v1/completions", self.LONG)
            self.assertEqual(status, 504, body)
        finally:
            stop_server(proc)


class RequestLimitsTest(unittest.TestCase):
    def test_prompt_and_max_tokens_limits(self):
        proc, port = start_server("--max-prompt-tokens", "30", "--max-tokens-cap", "10")
        try:
            c = Client(port)
            status, body, _, _ = c.post("/v1/completions", {"prompt": list(range(10, 41)),
                                                            "max_tokens": 2})
            self.assertEqual((status, body["error"]["param"]), (400, "prompt"))
            self.assertIn("31 tokens; this server takes at most 30", body["error"]["message"])
            self.assertEqual(c.post("/v1/completions", {"prompt": list(range(10, 40)),
                                                        "max_tokens": 2})[0], 200)
            status, body, _, _ = c.post("/v1/completions", {"prompt": "Hi", "max_tokens": 11})
            self.assertEqual((status, body["error"]["param"]), (400, "max_tokens"))
            status, body, _, _ = c.post("/v1/chat/completions", {
                "messages": [{"role": "user", "content": "Hi"}], "ignore_eos": True})
            self.assertEqual(status, 200, body)
            self.assertEqual(body["usage"]["completion_tokens"], 10)  # the default, capped
            status, body, _, _ = c.post("/v1/models/stories260K:predict",
                                        {"instances": [{"prompt": "Hi", "max_tokens": 50}]})
            self.assertEqual(status, 400)
            self.assertIn("at most 10", body["error"])
        finally:
            stop_server(proc)


class TlsTest(unittest.TestCase):
    def test_https_with_a_self_signed_certificate(self):
        import http.client
        import json as js
        import re
        import ssl
        import subprocess
        from test_server import BIN, STORIES_BIN
        d = tempfile.mkdtemp(prefix="tf_tls_")
        self.addCleanup(shutil.rmtree, d, True)
        cert, key = self_signed_cert(d)
        err = tempfile.TemporaryFile(mode="w+")
        proc = subprocess.Popen([BIN, "serve", "-m", STORIES_BIN, "--port", "0", "--tls-cert",
                                 cert, "--tls-key", key, "--kv-cache-memory", "16MiB"],
                                stdout=subprocess.PIPE, stderr=err, text=True)
        proc.err_file = err
        try:
            line = proc.stdout.readline()
            port = int(re.search(r"https://127\.0\.0\.1:(\d+)", line).group(1))
            ctx = ssl.create_default_context(cafile=cert)

            def request(method, path, body=None):
                conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
                conn.request(method, path, body=js.dumps(body) if body else None,
                             headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read().decode()
                version = conn.sock.version()
                conn.close()
                return r.status, data, version

            status, _, version = request("GET", "/healthz")
            self.assertEqual(status, 200)
            self.assertIn(version, ("TLSv1.2", "TLSv1.3"))
            status, data, _ = request("POST", "/v1/completions",
                                      {"prompt": "Once upon a time", "max_tokens": 8})
            self.assertEqual(status, 200, data)
            self.assertEqual(js.loads(data)["usage"]["completion_tokens"], 8)
            status, data, _ = request("POST", "/v1/completions",
                                      {"prompt": "Hi", "max_tokens": 4, "stream": True})
            self.assertEqual(status, 200)
            self.assertTrue(data.rstrip().endswith("data: [DONE]"), data[-80:])
            # Plain HTTP to the TLS port gets no HTTP answer, and the server goes on.
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                try:
                    got = s.recv(100)
                except OSError:
                    got = b""
            self.assertFalse(got.startswith(b"HTTP/1.1 200"))
            self.assertEqual(request("GET", "/healthz")[0], 200)
        finally:
            stop_server(proc)
        for args, want in (((cert,), "give both --tls-cert and --tls-key"),
                           ((cert, os.path.join(d, "missing.pem")), "--tls-key")):
            cmd = [BIN, "serve", "-m", STORIES_BIN, "--port", "0", "--tls-cert", args[0]]
            if len(args) > 1:
                cmd += ["--tls-key", args[1]]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 1)
            self.assertIn(want, p.stderr)


class NoKeysTest(unittest.TestCase):
    def test_bad_keys_file_is_refused(self):
        d = tempfile.mkdtemp(prefix="tf_auth_")
        try:
            path = os.path.join(d, "keys")
            with open(path, "w") as f:
                f.write("sk-a rpm=lots\n")
            import subprocess
            from test_server import BIN, STORIES_BIN
            p = subprocess.run([BIN, "serve", "-m", STORIES_BIN, "--port", "0",
                                "--api-keys-file", path], capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 1)
            self.assertIn(path + ":1: 'lots' is not a number", p.stderr)
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
