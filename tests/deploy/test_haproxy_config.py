"""deploy/haproxy/render.py: the haproxy.cfg an operator renders from a replica list alone
(issue 50, item 7). The configuration is checked by `haproxy -c` (replicas on other hosts, by
address and by name), and run: haproxy in front of stand-in replicas (HTTP servers that say who
they are) routes every door's requests by the model they name (OpenAI's and Anthropic's "model",
Ollama's "model" and "name" with tags, TF Serving's /v1/models/NAME paths)."""

import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "deploy", "haproxy"))
import render  # noqa: E402

HAPROXY = "/usr/sbin/haproxy"
RENDER = os.path.join(HERE, "..", "..", "deploy", "haproxy", "render.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandIn(http.server.BaseHTTPRequestHandler):
    """A replica that answers /readyz and, to anything else, its own name."""

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        body = b'{"status": "ready"}' if self.path == "/readyz" else self.server.name.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = answer

    def log_message(self, *args):
        pass


class RenderTest(unittest.TestCase):
    def check(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as f:
            f.write(text)
        try:
            return subprocess.run([HAPROXY, "-c", "-f", f.name], capture_output=True, text=True)
        finally:
            os.unlink(f.name)

    def test_a_list_of_remote_replicas_renders_a_valid_configuration(self):
        replicas = "\n".join([
            "# model  address  [weight]",
            "llama 10.0.0.5:8000",
            "llama 10.0.0.6:8000 20   # a canary",
            "qwen  [fd00::7]:8000",
            "qwen  qwen-2.replicas.invalid:8000",  # not resolvable here: starts down
        ])
        r = subprocess.run([sys.executable, RENDER, "-", "--bind", "0.0.0.0:8000"],
                           input=replicas, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        cfg = r.stdout
        checked = self.check(cfg)
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)
        self.assertIn("server llama-1 10.0.0.6:8000 check weight 20", cfg)
        self.assertIn("server qwen-0 [fd00::7]:8000 check weight 100", cfg)
        self.assertIn("default_backend be_llama", cfg)
        # Positive control: haproxy -c does refuse a broken configuration.
        self.assertNotEqual(self.check(cfg.replace("backend be_qwen", "backend")).returncode, 0)

    def test_a_bad_list_is_refused_naming_the_line(self):
        for text, want in (("llama", "line 1: expected MODEL HOST:PORT"),
                           ("llama 10.0.0.5", "line 1: '10.0.0.5' is not HOST:PORT"),
                           ("ok 1.2.3.4:1\nbad/name 1.2.3.4:2", "line 2: 'bad/name'"),
                           ("llama 1.2.3.4:80 0", "weight '0' is not in 1..256"),
                           ("# nothing", "names no replica")):
            r = subprocess.run([sys.executable, RENDER, "-"], input=text, capture_output=True,
                               text=True)
            self.assertEqual(r.returncode, 2, text)
            self.assertIn(want, r.stderr, text)

    def test_every_door_is_routed_by_the_model_it_names(self):
        servers, replicas = [], []
        for model in ("llama", "qwen", "qwen2"):
            httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
            httpd.name = model
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
            servers.append(httpd)
            replicas.append(render.Replica(model, "127.0.0.1", httpd.server_address[1]))
        port = free_port()
        with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as f:
            f.write(render.render(replicas, bind="127.0.0.1:%d" % port))
        proc = subprocess.Popen([HAPROXY, "-f", f.name, "-db"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            def ask(path, body=None):
                data = None if body is None else json.dumps(body).encode()
                req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                             method="POST" if data else "GET")
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.read().decode()

            deadline = time.monotonic() + 30
            while True:  # until haproxy listens and has checked the servers up
                try:
                    if ask("/v1/models/qwen2") == "qwen2":
                        break
                except (urllib.error.URLError, ConnectionError):
                    pass
                self.assertLess(time.monotonic(), deadline, "haproxy did not come up")
                time.sleep(0.05)
            cases = [
                ("/v1/chat/completions", {"model": "qwen", "messages": []}, "qwen"),
                ("/v1/completions", {"model": "qwen2:3", "prompt": "x"}, "qwen2"),
                ("/v1/responses", {"model": "qwen@stable", "input": "x"}, "qwen"),
                ("/v1/messages", {"model": "qwen2", "max_tokens": 8, "messages": []}, "qwen2"),
                ("/v1/messages/count_tokens", {"model": "qwen", "messages": []}, "qwen"),
                ("/api/chat", {"model": "qwen2:latest", "messages": []}, "qwen2"),
                ("/api/generate", {"model": "qwen:7b", "prompt": "x"}, "qwen"),
                ("/api/embed", {"model": "qwen2", "input": "x"}, "qwen2"),
                ("/api/show", {"name": "qwen2:latest"}, "qwen2"),
                ("/v1/models/qwen/versions/2:predict", {"instances": []}, "qwen"),
                ("/v1/models/qwen2:predict", {"instances": []}, "qwen2"),
                ("/v1/models/qwen2", None, "qwen2"),
                ("/api/tags", None, "llama"),        # no model named: the first backend
                ("/v1/completions", {"model": "qwenx", "prompt": "x"}, "llama"),
            ]
            for path, body, want in cases:
                self.assertEqual(ask(path, body), want, (path, body))
        finally:
            proc.terminate()
            proc.wait(10)
            os.unlink(f.name)
            for s in servers:
                s.shutdown()
                s.server_close()


if __name__ == "__main__":
    unittest.main()
