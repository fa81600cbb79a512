"""Constrained decoding with a GBNF grammar (issue 24, first step): llama.cpp's `grammar` and
vLLM's `guided_grammar` fields in completions and chat, on stories260K (a real trained model
that left alone writes stories). Every output is checked against the same language written as a
Python regular expression (Python's `re`, an independent matcher), greedy, sampled with n > 1,
and streamed.

Env: TOKENFLOW_BIN, TF_SHARED_DIR.
"""

import re
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


if __name__ == "__main__":
    unittest.main()
