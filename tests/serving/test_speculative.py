"""Speculative decoding from the command line (issue 27): `--speculative ngram` leaves every
answer as it was (greedy and seeded sampling, with logprobs and stop strings), `--speculative
draft:PATH` (llama.cpp's Q4_0 copy of the model proposing) leaves greedy answers as they were,
both count their proposals in the tokenflow_spec_decode_* metrics, a request's
"speculative": false and a model config's `speculative` turn it off and on, and bad settings
stop the server with a message. The engine's own tests (tests/engine/engine_test.cc) cover
chunking, preemption and the sampled distribution."""

import os
import re
import subprocess
import tempfile
import unittest

from test_server import BIN, SHARED, STORIES_BIN, Client, start_server, stop_server, wait_for

STORIES_Q4 = os.path.join(SHARED, "models", "stories260K", "stories260K-Q4_0.gguf")
KQUANT = os.path.join(SHARED, "models", "kquant256", "kquant-Q4_K_M.gguf")


def counter(text, name):
    m = re.search(r"^%s\{[^}]*\} (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


class SpeculativeTest(unittest.TestCase):
    def test_answers_are_unchanged_and_counted(self):
        plain, pport = start_server("--threads", "1")
        spec, sport = start_server("--threads", "1", "--speculative", "ngram",
                                   "--num-speculative-tokens", "5")
        try:
            a, b = Client(pport), Client(sport)
            bodies = [
                {"prompt": "Once upon a time", "max_tokens": 200, "temperature": 0,
                 "ignore_eos": True},
                {"prompt": "Lily and Ben", "max_tokens": 120, "temperature": 0.9, "seed": 7,
                 "logprobs": 2},
                {"prompt": "The dog", "max_tokens": 150, "temperature": 0, "stop": ["park"]},
                {"prompt": "One day", "max_tokens": 80, "temperature": 0.7, "seed": 3, "n": 2},
            ]
            for body in bodies:
                sa, ra, ta, _ = a.post("/v1/completions", body)
                sb, rb, tb, _ = b.post("/v1/completions", body)
                self.assertEqual((sa, sb), (200, 200), ta + tb)
                for ca, cb in zip(ra["choices"], rb["choices"]):
                    self.assertEqual(ca["text"], cb["text"], body)
                    self.assertEqual(ca["finish_reason"], cb["finish_reason"], body)
                    if ca["logprobs"]:
                        self.assertEqual(ca["logprobs"]["tokens"], cb["logprobs"]["tokens"])
                self.assertEqual(ra["usage"], rb["usage"])
            m = b.get("/metrics")[2]
            drafts = counter(m, "tokenflow_spec_decode_num_drafts_total")
            proposed = counter(m, "tokenflow_spec_decode_num_draft_tokens_total")
            accepted = counter(m, "tokenflow_spec_decode_num_accepted_tokens_total")
            emitted = counter(m, "tokenflow_spec_decode_num_emitted_tokens_total")
            self.assertGreater(drafts, 0)
            self.assertGreater(accepted, 0)
            self.assertLessEqual(accepted, proposed)
            # One more token than the accepted proposals, unless an accepted one ended it.
            self.assertLessEqual(emitted, accepted + drafts)
            self.assertGreater(emitted, accepted)
            self.assertIn('tokenflow_spec_decode_num_accepted_tokens_per_pos_total{'
                          'model="stories260K",version="1",position="0"}', m)
            self.assertEqual(counter(a.get("/metrics")[2],
                                     "tokenflow_spec_decode_num_drafts_total"), 0)
        finally:
            for p in (plain, spec):
                code, err = stop_server(p)
                self.assertEqual(code, 0, err[-2000:])

    def test_draft_model_keeps_greedy_answers(self):
        plain, pport = start_server("--threads", "1")
        spec, sport = start_server("--threads", "1", "--speculative", "draft:" + STORIES_Q4,
                                   "--num-speculative-tokens", "3")
        try:
            a, b = Client(pport), Client(sport)
            greedy = [
                {"prompt": "Once upon a time", "max_tokens": 120, "temperature": 0,
                 "ignore_eos": True, "logprobs": 1},
                {"prompt": "The dog", "max_tokens": 150, "temperature": 0, "stop": ["park"]},
            ]
            for body in greedy:
                sa, ra, ta, _ = a.post("/v1/completions", body)
                sb, rb, tb, _ = b.post("/v1/completions", body)
                self.assertEqual((sa, sb), (200, 200), ta + tb)
                self.assertEqual(ra["choices"][0]["text"], rb["choices"][0]["text"], body)
                self.assertEqual(ra["choices"][0]["logprobs"], rb["choices"][0]["logprobs"])
                self.assertEqual(ra["usage"], rb["usage"])
            metrics = lambda: b.get("/metrics")[2]
            accepted = counter(metrics(), "tokenflow_spec_decode_num_accepted_tokens_total")
            self.assertGreater(accepted, 0)
            # Sampled: exact in distribution (not token for token); the answer has its length.
            s, r, t, _ = b.post("/v1/completions", {"prompt": "Lily", "max_tokens": 60,
                                                    "temperature": 0.8, "seed": 1,
                                                    "ignore_eos": True})
            self.assertEqual(s, 200, t)
            self.assertEqual(r["usage"]["completion_tokens"], 60)
            # Off for one request: nothing proposed for it. (A response can come before its
            # last step is counted: the engine books a step's counters after streaming it, and
            # the running gauge at its end.)
            self.assertTrue(wait_for(
                lambda: counter(metrics(), "tokenflow_num_requests_running") == 0))
            before = counter(metrics(), "tokenflow_spec_decode_num_drafts_total")
            s, r, t, _ = b.post("/v1/completions", {"prompt": "Tom", "max_tokens": 50,
                                                    "temperature": 0, "speculative": False})
            self.assertEqual(s, 200, t)
            self.assertEqual(counter(metrics(), "tokenflow_spec_decode_num_drafts_total"),
                             before)
            s, r, t, _ = b.post("/v1/completions", {"prompt": "Tom", "speculative": "no"})
            self.assertEqual(s, 400, t)
            self.assertIn("speculative", t)
        finally:
            for p in (plain, spec):
                code, err = stop_server(p)
                self.assertEqual(code, 0, err[-2000:])

    def test_model_config_turns_it_on_per_model(self):
        with tempfile.TemporaryDirectory() as d:
            for name in ("fast", "plain"):
                os.makedirs(os.path.join(d, name, "1"))
                os.symlink(STORIES_BIN, os.path.join(d, name, "1", "model.bin"))
                os.symlink(os.path.join(os.path.dirname(STORIES_BIN), "tok512.bin"),
                           os.path.join(d, name, "1", "tok512.bin"))
            cfg = os.path.join(d, "models.config")
            with open(cfg, "w") as f:
                f.write("model_config_list {\n"
                        "  config { name: 'fast' base_path: '%s' speculative: 'ngram' "
                        "num_speculative_tokens: 3 }\n"
                        "  config { name: 'plain' base_path: '%s' }\n}\n"
                        % (os.path.join(d, "fast"), os.path.join(d, "plain")))
            proc, port = start_server("--threads", "1", model=("--model_config_file", cfg))
            try:
                c = Client(port)
                for model in ("fast", "plain"):
                    s, r, t, _ = c.post("/v1/completions", {
                        "model": model, "prompt": "Once upon a time", "max_tokens": 150,
                        "temperature": 0, "ignore_eos": True})
                    self.assertEqual(s, 200, t)
                m = c.get("/metrics")[2]
                drafts = dict(re.findall(
                    r'^tokenflow_spec_decode_num_drafts_total\{model="(\w+)"[^}]*\} (\S+)$', m,
                    re.M))
                self.assertGreater(float(drafts["fast"]), 0, m)
                self.assertEqual(float(drafts["plain"]), 0, m)
            finally:
                code, err = stop_server(proc)
                self.assertEqual(code, 0, err[-2000:])
            with open(cfg, "w") as f:
                f.write("model_config_list { config { name: 'fast' base_path: '%s' "
                        "speculative: 'eagle' } }" % os.path.join(d, "fast"))
            p = subprocess.run([BIN, "serve", "--model_config_file", cfg, "--port", "0"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("model 'fast': speculative decoding must be off, ngram or draft:PATH",
                          p.stderr)

    def test_bad_settings_are_refused(self):
        for args, want in ((["--speculative", "medusa"],
                            "speculative decoding must be off, ngram or draft:PATH, got 'medusa'"),
                           (["--speculative", "draft:/nonexistent/draft.gguf"],
                            "/nonexistent/draft.gguf"),
                           (["--speculative", "draft:" + KQUANT], "vocabulary"),
                           (["--speculative", "draft:" + STORIES_Q4, "--draft-dtype", "f8"],
                            "unknown weight dtype 'f8'"),
                           (["--speculative", "ngram", "--spec-min-acceptance", "2"],
                            "--spec-min-acceptance must be in [0, 1]"),
                           (["--speculative", "ngram", "--num-speculative-tokens", "0"],
                            "num_tokens >= 1"),
                           (["--speculative", "ngram", "--prompt-lookup-min", "3",
                             "--prompt-lookup-max", "2"], "min_n <= max_n")):
            p = subprocess.run([BIN, "serve", "--model", STORIES_BIN, "--port", "0", *args],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 1, (args, p.stderr))
            self.assertIn(want, p.stderr, args)


if __name__ == "__main__":
    unittest.main()
