"""The playground (issue 26 item 1): the page at / is the embedded web/ files with a strict
Content-Security-Policy, works without a key on a keyed server (the API calls need one), goes
away with --no-playground; and the whole page in a real browser (Debian's chromium, headless,
driven by the npm playwright-core: tests/js/playground.mjs), against a server with a fast model
(stories260K) and a slow one (a random GPT-2-shaped model over GPT-2's vocabulary, slow enough
that a reply can be stopped mid-way), and a key-protected server.

Env: TOKENFLOW_BIN, TF_SHARED_DIR, TF_REFERENCE_DIR; TF_PLAYGROUND_SCREENSHOT (optional): where
the browser test saves a screenshot (docs/playground.png is one)."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from test_server import SHARED, STORIES_BIN, Client, start_server, stop_server

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.environ.get("TF_REFERENCE_DIR",
                                  os.path.join(os.path.dirname(HERE), "reference")))
import make_checkpoints  # noqa: E402
import safetensors_io  # noqa: E402

JS = os.path.join(os.path.dirname(HERE), "js")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def slow_model(d):
    """A random 2-layer GPT-2 with a 384-wide head over GPT-2's 50,257 tokens: tens of
    milliseconds a token on one thread."""
    cfg = make_checkpoints._scaled(make_checkpoints._gpt2_config("F32"), vocab_size=50257,
                                   bos_token_id=50256, eos_token_id=50256, n_ctx=1024,
                                   n_positions=1024, n_layer=2, n_embd=384, n_head=6)
    w = make_checkpoints._gpt2_weights(cfg, np.random.default_rng(7), False)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    safetensors_io.save(os.path.join(d, "model.safetensors"), w, "F32")
    shutil.copy(os.path.join(SHARED, "tokenizers", "gpt2", "tokenizer.json"), d)
    with open(os.path.join(HERE, "..", "chat", "chat_templates",
                           "qwen2.5_instruct.jinja")) as f:
        template = f.read()
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": template, "eos_token": "<|endoftext|>"}, f)


class PageTest(unittest.TestCase):
    def test_the_page_its_headers_and_the_switch(self):
        d = tempfile.mkdtemp(prefix="tf_page_")
        try:
            keys = os.path.join(d, "keys")
            with open(keys, "w") as f:
                f.write("sk-page name=page\n")
            proc, port = start_server("--threads", "1", "--api-keys-file", keys)
            try:
                c = Client(port)
                for path, kind, source in (("/", "text/html", "index.html"),
                                           ("/playground/app.js", "text/javascript", "app.js"),
                                           ("/playground/style.css", "text/css", "style.css")):
                    st, _, text, headers = c.get(path)  # no key: the page holds no data
                    self.assertEqual(st, 200, path)
                    self.assertTrue(headers["Content-Type"].startswith(kind), headers)
                    with open(os.path.join(REPO, "web", source)) as f:
                        self.assertEqual(text, f.read(), path)
                    csp = headers["Content-Security-Policy"]
                    self.assertIn("default-src 'none'", csp)
                    self.assertIn("script-src 'self'", csp)
                    self.assertIn("frame-ancestors 'none'", csp)
                    self.assertNotIn("unsafe", csp)
                    self.assertEqual(headers["X-Content-Type-Options"], "nosniff")
                self.assertIn('<script src="/playground/app.js" defer></script>', c.get("/")[2])
                # The APIs still need the key; other paths are not files.
                self.assertEqual(c.get("/v1/models")[0], 401)
                self.assertEqual(c.get("/playground/../v1/models")[0], 401)
                self.assertEqual(c.get("/playground/nope.js", headers={
                    "Authorization": "Bearer sk-page"})[0], 404)
                st, _, _, _ = c.post("/", {})
                self.assertEqual(st, 401)  # a POST to / is an API request, behind the key
                metrics = c.get("/metrics")[2]
                self.assertNotIn('code="200",outcome="success"', metrics)  # pages not counted
            finally:
                code, err = stop_server(proc)
                self.assertEqual(code, 0, err[-2000:])
            proc, port = start_server("--threads", "1", "--no-playground")
            try:
                st, body, _, _ = Client(port).get("/")
                self.assertEqual(st, 404)
                self.assertEqual(body["error"]["code"], "not_found")
            finally:
                code, err = stop_server(proc)
                self.assertEqual(code, 0, err[-2000:])
        finally:
            shutil.rmtree(d, ignore_errors=True)


@unittest.skipUnless(CHROMIUM, "chromium is not installed (scripts/setup.sh installs it)")
class BrowserTest(unittest.TestCase):
    def test_the_playground_in_chromium(self):
        d = tempfile.mkdtemp(prefix="tf_playground_")
        procs = []
        try:
            slow = os.path.join(d, "slow")
            os.mkdir(slow)
            slow_model(slow)
            log = os.path.join(d, "access.log")
            proc, port = start_server("--threads", "1", "--access-log", log,
                                      model=("--model", "stories=" + STORIES_BIN,
                                             "--model", "slow=" + slow), kv_cache="64MiB")
            procs.append(proc)
            keys = os.path.join(d, "keys")
            with open(keys, "w") as f:
                f.write("sha256:%s name=web\n" % hashlib.sha256(b"sk-web").hexdigest())
            kproc, kport = start_server("--threads", "1", "--api-keys-file", keys)
            procs.append(kproc)
            env = dict(os.environ, TF_URL="http://127.0.0.1:%d" % port, TF_FAST="stories",
                       TF_SLOW="slow", TF_KEY_URL="http://127.0.0.1:%d" % kport, TF_KEY="sk-web",
                       CHROMIUM=CHROMIUM)
            shot = os.environ.get("TF_PLAYGROUND_SCREENSHOT")
            if shot:
                env["TF_SCREENSHOT"] = shot
            p = subprocess.run(["node", os.path.join(JS, "playground.mjs")], capture_output=True,
                               text=True, timeout=300, env=env, cwd=JS)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("all playground checks passed", p.stdout)
            # The stopped reply was cancelled on the server (499: the client left), and the
            # requests went to the model picked.
            with open(log) as f:
                lines = [json.loads(x) for x in f if x.startswith("{")]
            chats = [x for x in lines if x["path"] == "/v1/chat/completions"]
            stopped = [x for x in chats if x["status"] == 499]
            self.assertEqual(len(stopped), 1, chats)
            self.assertEqual(stopped[0]["model"], "slow")
            self.assertLess(stopped[0]["completion_tokens"], 800)
            self.assertEqual({x["model"] for x in chats}, {"stories", "slow"})
        finally:
            for proc in procs:
                code, err = stop_server(proc)
                self.assertEqual(code, 0, err[-2000:])
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
