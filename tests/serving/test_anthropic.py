"""Anthropic's Messages API (issue 50, item 4): POST /v1/messages whole and streamed in
Anthropic's event sequence, count_tokens, stop sequences, tools (tool_use blocks, tool_result
turns), errors in Anthropic's shape, and x-api-key. The answers are checked against the same
conversation through /v1/chat/completions (one chat template, one planner, greedy decoding): the
door only reads and renders."""

import json
import os
import subprocess
import tempfile
import unittest

from test_server import (NODE_MODULES, Client, ServerCase, start_server, stop_server,
                         story_with_tokens)

WEATHER = {"name": "get_weather", "description": "Weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string",
                                                                       "maxLength": 12}},
                            "required": ["city"]}}


def anthropic_events(body):
    """Splits Anthropic's SSE body into (event, data) pairs, checking the framing."""
    events = body.split("\n\n")
    assert events[-1] == "", "the stream must end with a blank line: %r" % body[-40:]
    out = []
    for e in events[:-1]:
        lines = e.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: ") and \
            lines[1].startswith("data: "), "bad event %r" % e
        data = json.loads(lines[1][len("data: "):])
        assert data["type"] == lines[0][len("event: "):], e
        out.append((data["type"], data))
    return out


class MessagesTest(ServerCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.model = cls.c.get("/v1/models")[1]["data"][0]["id"]

    def messages(self, body, status=200, headers=None):
        st, out, text, h = self.c.post("/v1/messages", dict({"model": self.model}, **body),
                                       headers=headers)
        self.assertEqual(st, status, text)
        return out

    def chat(self, messages, max_tokens, **extra):
        st, out, text, _ = self.c.post("/v1/chat/completions", dict(
            {"model": self.model, "messages": messages, "max_tokens": max_tokens,
             "temperature": 0}, **extra))
        self.assertEqual(st, 200, text)
        return out

    def test_a_message_is_the_chat_answer_in_anthropics_shape(self):
        conv = [{"role": "user", "content": "Tell me a story"}]
        m = self.messages({"max_tokens": 24, "temperature": 0, "system": "Be brief",
                           "messages": conv})
        ref = self.chat([{"role": "system", "content": "Be brief"}] + conv, 24)
        self.assertTrue(m["id"].startswith("msg_"), m)
        self.assertEqual((m["type"], m["role"], m["model"]), ("message", "assistant", self.model))
        self.assertEqual(m["content"], [{"type": "text",
                                         "text": ref["choices"][0]["message"]["content"]}])
        self.assertEqual(m["usage"], {"input_tokens": ref["usage"]["prompt_tokens"],
                                      "output_tokens": ref["usage"]["completion_tokens"]})
        want = {"length": "max_tokens", "stop": "end_turn"}[ref["choices"][0]["finish_reason"]]
        self.assertEqual(m["stop_reason"], want)
        self.assertIsNone(m["stop_sequence"])
        # System as text blocks, content as blocks: the same conversation.
        blocks = self.messages({"max_tokens": 24, "temperature": 0,
                                "system": [{"type": "text", "text": "Be brief"}],
                                "messages": [{"role": "user", "content": [
                                    {"type": "text", "text": "Tell me "},
                                    {"type": "text", "text": "a story"}]}]})
        self.assertEqual(blocks["content"], m["content"])
        # count_tokens counts what create's usage says.
        st, n, text, _ = self.c.post("/v1/messages/count_tokens", {
            "model": self.model, "system": "Be brief", "messages": conv})
        self.assertEqual(st, 200, text)
        self.assertEqual(n, {"input_tokens": m["usage"]["input_tokens"]})

    def test_max_tokens_and_stop_sequences_say_why_it_stopped(self):
        conv = [{"role": "user", "content": "Once upon a time"}]
        m = self.messages({"max_tokens": 5, "temperature": 0, "messages": conv})
        self.assertEqual(m["stop_reason"], "max_tokens")
        self.assertEqual(m["usage"]["output_tokens"], 5)
        whole = self.messages({"max_tokens": 40, "temperature": 0, "messages": conv})
        text = whole["content"][0]["text"]
        words = text.split()
        self.assertGreater(len(words), 4, text)
        stop = " " + words[3]
        cut = self.messages({"max_tokens": 40, "temperature": 0, "messages": conv,
                             "stop_sequences": ["zzzz", stop]})
        self.assertEqual(cut["stop_reason"], "stop_sequence", cut)
        self.assertEqual(cut["stop_sequence"], stop)
        self.assertEqual(cut["content"][0]["text"], text[:text.index(stop)])

    def test_a_stream_is_anthropics_event_sequence_with_the_same_answer(self):
        body = {"model": self.model, "max_tokens": 20, "temperature": 0, "stream": True,
                "messages": [{"role": "user", "content": "Tell me a story"}]}
        whole = self.messages(dict(body, stream=False))
        head, raw = self.c.raw_stream("/v1/messages", body)
        self.assertIn("200", head.split("\r\n")[0])
        self.assertIn("text/event-stream", head)
        ev = anthropic_events(raw)
        kinds = [k for k, _ in ev]
        self.assertEqual(kinds[:2], ["message_start", "ping"])
        self.assertEqual(kinds[-2:], ["message_delta", "message_stop"])
        start = ev[0][1]["message"]
        self.assertEqual((start["id"][:4], start["content"], start["stop_reason"]),
                         ("msg_", [], None))
        self.assertEqual(start["usage"]["input_tokens"], whole["usage"]["input_tokens"])
        self.assertEqual(kinds[2], "content_block_start")
        self.assertEqual(ev[2][1], {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "text", "text": ""}})
        self.assertEqual(kinds[-3], "content_block_stop")
        self.assertTrue(all(k == "content_block_delta" for k in kinds[3:-3]), kinds)
        text = "".join(d["delta"]["text"] for k, d in ev if k == "content_block_delta")
        self.assertEqual(text, whole["content"][0]["text"])
        delta = ev[-2][1]
        self.assertEqual(delta["delta"], {"stop_reason": whole["stop_reason"],
                                          "stop_sequence": None})
        self.assertEqual(delta["usage"]["output_tokens"], whole["usage"]["output_tokens"])

    def test_bad_requests_are_anthropic_errors_naming_the_problem(self):
        conv = [{"role": "user", "content": "hi"}]
        for body, status, kind, words in (
                ({"messages": conv}, 400, "invalid_request_error", "'max_tokens' is required"),
                ({"max_tokens": 0, "messages": conv}, 400, "invalid_request_error", "max_tokens"),
                ({"max_tokens": 8, "messages": []}, 400, "invalid_request_error", "messages"),
                ({"max_tokens": 8, "messages": conv, "bogus": 1}, 400, "invalid_request_error",
                 "bogus"),
                ({"max_tokens": 8, "messages": [{"role": "user", "content": [
                    {"type": "image", "source": {}}]}]}, 400, "invalid_request_error",
                 "'image' blocks are not supported"),
                ({"max_tokens": 8, "messages": [{"role": "system", "content": "x"}]}, 400,
                 "invalid_request_error", "role"),
                ({"max_tokens": 8, "messages": conv, "temperature": 9}, 400,
                 "invalid_request_error", "temperature"),
                ({"max_tokens": 8, "messages": conv, "tool_choice": {"type": "any"}}, 400,
                 "invalid_request_error", "no 'tools'"),
                ({"max_tokens": 8, "messages": conv, "model": "nope"}, 404, "not_found_error",
                 "nope")):
            st, out, text, _ = self.c.post("/v1/messages", dict({"model": self.model}, **body))
            self.assertEqual(st, status, (body, text))
            self.assertEqual(out["type"], "error", text)
            self.assertEqual(out["error"]["type"], kind, text)
            self.assertIn(words, out["error"]["message"], text)
        st, out, text, _ = self.c.request("POST", "/v1/messages", raw="{oops")
        self.assertEqual((st, out["type"], out["error"]["type"]),
                         (400, "error", "invalid_request_error"), text)


class ToolsTest(MessagesTest):
    """Tools through a template that takes tool turns (ChatML: stories260K's built-in llama2
    template insists on alternating user and assistant turns)."""
    server_args = ("--threads", "1", "--chat-template", "chatml")

    def test_a_forced_tool_is_a_tool_use_block_and_its_result_a_turn(self):
        m = self.messages({"max_tokens": 64, "temperature": 0, "tools": [WEATHER],
                           "tool_choice": {"type": "tool", "name": "get_weather",
                                           "disable_parallel_tool_use": True},
                           "messages": [{"role": "user", "content": "Weather in Paris?"}]})
        uses = [b for b in m["content"] if b["type"] == "tool_use"]
        self.assertEqual(len(uses), 1, m)
        self.assertEqual(uses[0]["name"], "get_weather")
        self.assertTrue(uses[0]["id"].startswith("toolu_"), uses[0])
        self.assertIsInstance(uses[0]["input"]["city"], str)
        self.assertLessEqual(len(uses[0]["input"]["city"]), 12)
        self.assertEqual(m["stop_reason"], "tool_use")
        # The next turn: the call and its result go back through the template.
        follow = self.messages({"max_tokens": 8, "tools": [WEATHER], "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [uses[0]]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0]["id"],
                                          "content": "sunny, 21 C"}]}]})
        self.assertEqual(follow["type"], "message")
        # Streamed: the call is a tool_use block with its input as one input_json_delta.
        head, raw = self.c.raw_stream("/v1/messages", {
            "model": self.model, "max_tokens": 64, "temperature": 0, "stream": True,
            "tools": [WEATHER], "tool_choice": {"type": "any"},
            "messages": [{"role": "user", "content": "Weather in Paris?"}]})
        ev = anthropic_events(raw)
        uses = {d["index"]: d["content_block"] for k, d in ev
                if k == "content_block_start" and d["content_block"]["type"] == "tool_use"}
        self.assertGreaterEqual(len(uses), 1, ev)
        for index, block in uses.items():
            self.assertEqual((block["name"], block["input"]), ("get_weather", {}))
            args = "".join(d["delta"]["partial_json"] for k, d in ev
                           if k == "content_block_delta" and d["index"] == index)
            self.assertIsInstance(json.loads(args)["city"], str)
        # With parallel calls the tiny model writes calls until max_tokens cuts one: the complete
        # ones stand, and the reason is the cut.
        out_tokens = ev[-2][1]["usage"]["output_tokens"]
        self.assertEqual(ev[-2][1]["delta"]["stop_reason"],
                         "max_tokens" if out_tokens == 64 else "tool_use", ev[-2])


    def test_the_anthropic_npm_client(self):
        """create, the stream helper, countTokens, a tool loop and typed errors through the
        official @anthropic-ai/sdk client (tests/js/anthropic_client.mjs)."""
        js = os.path.dirname(NODE_MODULES)
        env = dict(os.environ, TF_BASE_URL="http://127.0.0.1:%d" % self.c.port,
                   TF_MODEL=self.model)
        p = subprocess.run(["node", os.path.join(js, "anthropic_client.mjs")],
                           capture_output=True, text=True, timeout=120, env=env, cwd=js)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("all anthropic client checks passed", p.stdout)


# A template whose prompt opens the think block (as DeepSeek-R1's distills and
# Qwen3-Thinking-2507 do): the tiny model's whole answer is reasoning until the budget closes it.
OPEN_THINK = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
              "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n"
              "{% endif %}")
CLOSE = "\n</think>\n\n"


class ThinkingBudgetTest(ServerCase):
    """The thinking budget enforced while decoding (issue 50, items 4 and 6): once the budget's
    tokens are spent inside the think block, the block's close is forced token by token and the
    answer goes on; the same through Anthropic's thinking.budget_tokens and the OpenAI doors'
    thinking_token_budget / reasoning_effort."""
    server_args = ("--threads", "1", "--chat-template", OPEN_THINK)

    def chat(self, **extra):
        return story_with_tokens(self, **extra)

    def test_the_budget_closes_the_think_block(self):
        free, free_tokens = self.chat()
        self.assertIsNone(free["content"])  # no budget: all 30 tokens are reasoning
        self.assertNotIn("</think>", "".join(free_tokens))
        for budget in (0, 6, 11):
            msg, tokens = self.chat(thinking_token_budget=budget)
            # The budget's tokens are the free answer's, then the close, forced.
            self.assertEqual(tokens[:budget], free_tokens[:budget])
            self.assertTrue("".join(tokens[budget:]).startswith(CLOSE), tokens)
            self.assertEqual(msg["reasoning_content"], "".join(tokens[:budget]) + "\n")
            self.assertTrue(msg["content"], msg)
            rest = "".join(tokens[budget:])[len(CLOSE):]
            self.assertEqual(msg["content"], rest)
        # reasoning_effort "minimal" is a budget of 0; "high" none.
        self.assertEqual(self.chat(reasoning_effort="minimal"), self.chat(thinking_token_budget=0))
        self.assertEqual(self.chat(reasoning_effort="high")[1], free_tokens)
        self.assertEqual(self.c.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "x"}], "reasoning_effort": "max"})[0], 400)

    def test_anthropic_thinking_blocks_keep_the_budget(self):
        msg, tokens = self.chat(thinking_token_budget=6)
        st, m, text, _ = self.c.post("/v1/messages", {
            "model": self.c.get("/v1/models")[1]["data"][0]["id"], "max_tokens": 30,
            "temperature": 0, "thinking": {"type": "enabled", "budget_tokens": 6},
            "messages": [{"role": "user", "content": "Tell me a story"}]})
        self.assertEqual(st, 200, text)
        self.assertEqual(m["content"], [
            {"type": "thinking", "thinking": msg["reasoning_content"], "signature": ""},
            {"type": "text", "text": msg["content"]}])
        # The Responses API's reasoning.effort: the same budgets.
        st, r, text, _ = self.c.post("/v1/responses", {
            "input": "Tell me a story", "max_output_tokens": 30, "temperature": 0,
            "reasoning": {"effort": "minimal"}})
        self.assertEqual(st, 200, text)
        minimal, _ = self.chat(reasoning_effort="minimal")
        texts = [c["text"] for item in r["output"] if item["type"] == "message"
                 for c in item["content"]]
        self.assertEqual(texts, [minimal["content"]])


class ApiKeyTest(unittest.TestCase):
    def test_x_api_key_is_a_key_as_authorization_is(self):
        with tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False) as f:
            f.write("sk-ant name=claude-code\n")
        proc, port = start_server("--threads", "1", "--api-keys-file", f.name)
        try:
            c = Client(port)
            model = c.get("/v1/models", headers={"x-api-key": "sk-ant"})[1]["data"][0]["id"]
            body = {"model": model, "max_tokens": 2,
                    "messages": [{"role": "user", "content": "hi"}]}
            st, out, text, _ = c.post("/v1/messages", body,
                                      headers={"x-api-key": "sk-ant",
                                               "anthropic-version": "2023-06-01"})
            self.assertEqual(st, 200, text)
            for headers in ({"x-api-key": "sk-wrong"}, {}):
                st, out, text, _ = c.post("/v1/messages", body, headers=headers)
                self.assertEqual(st, 401, text)
                self.assertEqual(out["error"]["type"], "authentication_error", text)
        finally:
            code, err = stop_server(proc)
            os.unlink(f.name)
            self.assertEqual(code, 0, err[-2000:])


if __name__ == "__main__":
    unittest.main()
