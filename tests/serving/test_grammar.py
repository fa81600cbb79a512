"""Constrained decoding with a GBNF grammar (issue 24, first step): llama.cpp's `grammar` and
vLLM's `guided_grammar` fields in completions and chat, on stories260K (a real trained model
that left alone writes stories). Every output is checked against the same language written as a
Python regular expression (Python's `re`, an independent matcher), greedy, sampled with n > 1,
and streamed.

Env: TOKENFLOW_BIN, TF_SHARED_DIR.
"""

import re
import threading
import unittest

from test_server import ServerCase, sse_events

# The grammar and the same language as a regular expression.
WORDS = ('root ::= " " [a-z]+ (" " [a-z]+){2,5} "."\n', r" [a-z]+( [a-z]+){2,5}\.")
ANSWER = ('root ::= (" yes" | " no" | " maybe" [0-9]) ("!" | ".")\n',
          r" (yes|no|maybe[0-9])[!.]")
LIST = ('root ::= item ("," item){1,3}\nitem ::= " " [a-z]{2,8}\n',
        r" [a-z]{2,8}(, [a-z]{2,8}){1,3}")


class GrammarTest(ServerCase):
    def complete(self, body, path="/v1/completions", status=200):
        s, b, text, _ = self.c.post(path, body)
        self.assertEqual(s, status, text)
        return b

    def test_greedy_and_sampled_outputs_follow_the_grammar(self):
        for grammar, pattern in (WORDS, ANSWER, LIST):
            b = self.complete({"prompt": "Once upon a time", "max_tokens": 64, "temperature": 0,
                               "grammar": grammar})
            text = b["choices"][0]["text"]
            self.assertRegex(text, "^" + pattern + "$")
            self.assertEqual(b["choices"][0]["finish_reason"], "stop")
            b = self.complete({"prompt": "The little dog", "max_tokens": 64, "temperature": 1.2,
                               "n": 4, "seed": 7, "guided_grammar": grammar})
            for choice in b["choices"]:
                self.assertIsNotNone(re.fullmatch(pattern, choice["text"]), choice["text"])

    def test_the_grammar_changes_what_the_model_writes(self):
        free = self.complete({"prompt": "Once upon a time", "max_tokens": 12,
                              "temperature": 0})["choices"][0]["text"]
        self.assertIsNone(re.fullmatch(ANSWER[1], free))  # the story, left alone
        constrained = self.complete({"prompt": "Once upon a time", "max_tokens": 12,
                                     "temperature": 0, "grammar": ANSWER[0]})
        self.assertRegex(constrained["choices"][0]["text"], "^" + ANSWER[1] + "$")

    def test_streamed_and_chat(self):
        head, body = self.c.raw_stream("/v1/completions", {
            "prompt": "Once upon a time", "max_tokens": 64, "temperature": 0.8, "seed": 2,
            "stream": True, "grammar": LIST[0]})
        text = "".join(e["choices"][0]["text"] for e in sse_events(body) if e.get("choices"))
        self.assertRegex(text, "^" + LIST[1] + "$")
        b = self.complete({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 64,
                           "temperature": 0, "guided_grammar": WORDS[0]},
                          path="/v1/chat/completions")
        self.assertRegex(b["choices"][0]["message"]["content"], "^" + WORDS[1] + "$")

    def test_bad_grammars_are_400_naming_the_field(self):
        for body, message in (
                ({"grammar": "root ::= foo\n"}, "rule 'foo' is used (line 1) but not defined"),
                ({"grammar": "start ::= \"a\"\n"}, "no 'root' rule"),
                ({"grammar": "root ::= \"a\"\n", "guided_grammar": "root ::= \"b\"\n"},
                 "give one structured output"),
                ({"grammar": "root ::= \"a\"\n", "use_beam_search": True},
                 "with beam search is not supported"),
                ({"grammar": 5}, "'grammar' must be a string")):
            b = self.complete(dict(body, prompt="Once", max_tokens=4), status=400)
            self.assertIn(message, b["error"]["message"], body)
            self.assertIn(b["error"]["param"], ("grammar", "guided_grammar"), body)

    def test_a_grammar_that_fails_ends_only_its_own_request(self):
        # Issue 49: after 18 fixed x's (past what the compile-time check follows), 3 * 2^k ways
        # to continue after k more x's (each leaves a "y" to come by one of two rules);
        # logit_bias makes the model take "x" (token 444) until the matcher refuses (65536
        # ways) or its time budget runs out. Before, the engine step's failure ended every
        # request of the model (500s for all of them).
        doubling = 'a ::= "x" a p | "x" a q | "x"\np ::= "y"\nq ::= "y"\n'
        exploding = 'root ::= "xxxxxxxxxxxxxxxxxx" a\n' + doubling
        bad = {"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0,
               "grammar": exploding, "logit_bias": {"444": 100}}
        normal = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0,
                  "ignore_eos": True}
        alone = self.complete(normal)["choices"][0]["text"]
        results = {}

        def run(name, body):
            results[name] = self.c.post("/v1/completions", body)

        threads = [threading.Thread(target=run, args=(i, normal)) for i in range(5)]
        threads.append(threading.Thread(target=run, args=("bad", bad)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        status, body, text, _ = results.pop("bad")
        self.assertEqual(status, 400, text)
        self.assertIn("grammar", body["error"]["message"])
        self.assertEqual(body["error"]["type"], "invalid_request_error")
        for name, (status, body, text, _) in results.items():
            self.assertEqual(status, 200, text)
            self.assertEqual(body["choices"][0]["text"], alone, name)
        # Streamed: the headers are out, so the error is an event of the stream.
        _, events = self.c.raw_stream("/v1/completions", dict(bad, stream=True))
        errors = [e["error"] for e in sse_events(events) if "error" in e]
        self.assertEqual(len(errors), 1, events)
        self.assertIn("grammar", errors[0]["message"])
        self.assertEqual(self.complete(normal)["choices"][0]["text"], alone)
        # Where the doubling starts at once, it is refused when the grammar is compiled, before
        # it reaches the engine.
        b = self.complete({"prompt": "Once", "max_tokens": 8, "grammar": "root ::= a\n" +
                           doubling}, status=400)
        self.assertIn("too ambiguous", b["error"]["message"])
        self.assertEqual(b["error"]["param"], "grammar")


if __name__ == "__main__":
    unittest.main()
