"""Speculative decoding from the command line (issue 27): `--speculative ngram` leaves every
answer as it was (greedy and seeded sampling, with logprobs and stop strings), counts its
proposals in the tokenflow_spec_decode_* metrics, and bad settings stop the server with a
message. The engine's own test (tests/engine/engine_test.cc) covers chunking and preemption."""

import re
import subprocess
import unittest

from test_server import BIN, STORIES_BIN, Client, start_server, stop_server


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
            self.assertEqual(emitted, accepted + drafts)
            self.assertIn('tokenflow_spec_decode_num_accepted_tokens_per_pos_total{'
                          'model="stories260K",version="1",position="0"}', m)
            self.assertEqual(counter(a.get("/metrics")[2],
                                     "tokenflow_spec_decode_num_drafts_total"), 0)
        finally:
            for p in (plain, spec):
                code, err = stop_server(p)
                self.assertEqual(code, 0, err[-2000:])

    def test_bad_settings_are_refused(self):
        for args, want in ((["--speculative", "medusa"], "--speculative must be off or ngram"),
                           (["--speculative", "draft:/x"], "not supported yet"),
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
