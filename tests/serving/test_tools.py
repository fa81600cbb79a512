"""Tool calling in chat completions (issue 24): tools and tool_choice through the server on
stories260K. A story model calls no tools of its own accord, so the calls come from
tool_choice "required" or a named function (decoding constrained to the tools' schemas): every
call's arguments are checked by an independent validator (python3-jsonschema) against the
tool's parameters; the parsed message has OpenAI's shape (tool_calls, content null,
finish_reason "tool_calls"); a stream's tool-call deltas add up to the non-streamed answer; the
hermes format (--tool-call-parser) writes and parses <tool_call> blocks; conversations that
carry earlier tool calls and tool results are accepted; bad tools are 400 naming the field.

A random GPT-2-shaped model shipped with Qwen2.5's chat template (a tokenizer_config.json) shows
the rest end to end: the hermes format told from the template, tools and earlier calls reaching
the template as transformers passes them (arguments as objects: the prompt the server renders is
the one Python's jinja2 renders, token for token), over a 50,257-token vocabulary.

Env: TOKENFLOW_BIN, TF_SHARED_DIR, TF_REFERENCE_DIR.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import jsonschema
import numpy as np

from test_server import BIN, STORIES_BIN, ServerCase, sse_events, story_with_tokens

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("TF_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))
sys.path.insert(0, os.environ.get("TF_REFERENCE_DIR",
                                  os.path.join(os.path.dirname(HERE), "reference")))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "chat"))
import make_checkpoints  # noqa: E402
import safetensors_io  # noqa: E402
from test_chat_templates import render_jinja  # noqa: E402

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 16},
                           "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer", "minimum": -99, "maximum": 99},
                           "b": {"type": "integer", "minimum": -99, "maximum": 99}},
            "required": ["a", "b"],
        },
    },
}
TOOLS = [WEATHER, ADD]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def assert_streams_as_answered(test, body, once):
    """The body streamed: each choice's reasoning_content and content deltas add up to the
    non-streamed answer `once` (its message fields; a missing one counts as "")."""
    head, raw = test.c.raw_stream("/v1/chat/completions", dict(body, stream=True))
    n = len(once["choices"])
    reasoning, content = [""] * n, [""] * n
    for e in sse_events(raw):
        for ch in e.get("choices", []):
            reasoning[ch["index"]] += ch["delta"].get("reasoning_content") or ""
            content[ch["index"]] += ch["delta"].get("content") or ""
    test.assertEqual(reasoning, [c["message"].get("reasoning_content") or ""
                                 for c in once["choices"]])
    test.assertEqual(content, [c["message"].get("content") or "" for c in once["choices"]])


def check_calls(test, message, names=None):
    """The message's tool calls: OpenAI's shape, known names, arguments valid for the schema."""
    calls = message.get("tool_calls")
    test.assertTrue(calls, message)
    test.assertIsNone(message["content"], message)
    for c in calls:
        test.assertTrue(c["id"].startswith("call_"), c)
        test.assertEqual(c["type"], "function")
        name = c["function"]["name"]
        test.assertIn(name, names or SCHEMAS)
        args = json.loads(c["function"]["arguments"])
        jsonschema.validate(args, SCHEMAS[name])
    return calls


class ChatCase(ServerCase):
    """A server case whose post() sends a chat completion and checks its status."""

    def post(self, body, status=200):
        s, b, text, _ = self.c.post("/v1/chat/completions", body)
        self.assertEqual(s, status, text)
        return b


class ToolsTest(ChatCase):
    parser = None

    @classmethod
    def setUpClass(cls):
        if cls.parser:
            cls.server_args = ("--threads", "1", "--tool-call-parser", cls.parser)
        super().setUpClass()

    def chat(self, **kw):
        return dict({"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                     "max_tokens": 200, "tools": TOOLS}, **kw)

    def test_required_calls_are_valid_for_their_schemas(self):
        # (With parallel calls a story model may go on calling until max_tokens: the grammar
        # lets it; with one call the output must end.)
        for seed, temperature in ((1, 0.0), (2, 0.8), (3, 1.3)):
            b = self.post(self.chat(tool_choice="required", temperature=temperature, seed=seed,
                                    n=2, parallel_tool_calls=False))
            for ch in b["choices"]:
                self.assertEqual(ch["finish_reason"], "tool_calls", ch)
                check_calls(self, ch["message"])

    def test_a_named_function_without_parallel_calls_is_called_once(self):
        b = self.post(self.chat(tool_choice={"type": "function", "function": {"name": "add"}},
                                parallel_tool_calls=False, temperature=1.0, seed=4))
        ch = b["choices"][0]
        self.assertEqual(ch["finish_reason"], "tool_calls")
        calls = check_calls(self, ch["message"], names=["add"])
        self.assertEqual(len(calls), 1)

    def test_auto_and_none_leave_a_story_as_content(self):
        for choice in ("auto", "none", None):
            body = self.chat(temperature=0, max_tokens=24)
            if choice:
                body["tool_choice"] = choice
            ch = self.post(body)["choices"][0]
            self.assertNotIn("tool_calls", ch["message"])
            self.assertIsInstance(ch["message"]["content"], str)
            self.assertIn(ch["finish_reason"], ("stop", "length"))
        # Without tools the answer is the same as with tools that were not called (the
        # stories260K template does not render tools).
        plain = self.post({"messages": [{"role": "user", "content": "What is the weather in "
                                         "Paris?"}], "max_tokens": 24, "temperature": 0})
        self.assertEqual(plain["choices"][0]["message"]["content"], ch["message"]["content"])

    def test_stream_deltas_add_up_to_the_answer(self):
        body = self.chat(tool_choice="required", temperature=0.9, seed=6, n=2,
                         parallel_tool_calls=False)
        once = self.post(body)
        head, raw = self.c.raw_stream("/v1/chat/completions", dict(body, stream=True))
        calls = {0: {}, 1: {}}
        finish, content = {}, {0: "", 1: ""}
        for e in sse_events(raw):
            for ch in e.get("choices", []):
                d = ch["delta"]
                content[ch["index"]] += d.get("content") or ""
                for tc in d.get("tool_calls", []):
                    slot = calls[ch["index"]].setdefault(tc["index"], {"name": "", "arguments": ""})
                    if "id" in tc:
                        self.assertTrue(tc["id"].startswith("call_"))
                        self.assertEqual(tc["type"], "function")
                        slot["id"] = tc["id"]
                    slot["name"] += tc["function"].get("name", "")
                    slot["arguments"] += tc["function"].get("arguments", "")
                if ch["finish_reason"]:
                    finish[ch["index"]] = ch["finish_reason"]
        for i, ch in enumerate(once["choices"]):
            self.assertEqual(finish[i], "tool_calls")
            self.assertEqual(content[i], "")
            want = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                    for c in ch["message"]["tool_calls"]]
            got = [(s["name"], json.loads(s["arguments"]))
                   for _, s in sorted(calls[i].items())]
            self.assertEqual(got, want)

    def test_batch_file(self):
        if self.parser:
            self.skipTest("a batch file tells the format from the template only")
        with tempfile.TemporaryDirectory() as d:
            inp, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
            with open(inp, "w") as f:
                f.write(json.dumps({"custom_id": "w", "url": "/v1/chat/completions",
                                    "body": self.chat(tool_choice="required", seed=3,
                                                      temperature=0.8,
                                                      parallel_tool_calls=False)}) + "\n")
            r = subprocess.run([BIN, "generate", "-m", STORIES_BIN, "--input-file", inp,
                                "--output-file", out], capture_output=True, text=True,
                               timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            with open(out) as f:
                line = json.loads(f.readline())
        ch = line["response"]["body"]["choices"][0]
        self.assertEqual(ch["finish_reason"], "tool_calls")
        check_calls(self, ch["message"])

    def test_bad_earlier_tool_calls_are_400(self):
        # (Conversations with tool calls and results are rendered in QwenTemplateTest: the
        # stories260K template, Llama 2's, refuses roles other than user and assistant.)
        bad = {"role": "assistant", "content": None, "tool_calls": [{
            "type": "function", "function": {"name": "x", "arguments": "{oops"}}]}
        b = self.post({"messages": [{"role": "user", "content": "Hi"}, bad], "max_tokens": 4},
                      status=400)
        self.assertEqual(b["error"]["param"], "messages")
        self.assertIn("'arguments' must be a JSON object", b["error"]["message"])

    def test_bad_tools_are_400_naming_the_field(self):
        cases = [
            (self.chat(tools=[{"type": "code_interpreter"}]), "tools", "only function tools"),
            (self.chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {"a": {"type": "integer", "multipleOf": 3}}}}}]),
             "tools", "'multipleOf' is not supported"),
            (self.chat(tool_choice="sometimes"), "tool_choice", "\"required\""),
            (self.chat(tool_choice={"type": "function", "function": {"name": "nope"}}),
             "tool_choice", "not among 'tools'"),
            (self.chat(tool_choice="required", response_format={"type": "json_object"}),
             "tool_choice", "give one"),
            (self.chat(tool_choice="required", use_beam_search=True), "tool_choice",
             "beam search"),
            (self.chat(parallel_tool_calls=1), "parallel_tool_calls", "boolean"),
        ]
        for body, field, message in cases:
            b = self.post(body, status=400)
            self.assertEqual(b["error"]["param"], field, b)
            self.assertIn(message, b["error"]["message"], body)


def random_gpt2(prefix, vocab, context, seed):
    """A new directory holding a random 2-layer GPT-2-shaped model (config.json and F32
    safetensors) of that vocabulary and context."""
    d = tempfile.mkdtemp(prefix=prefix)
    cfg = make_checkpoints._scaled(make_checkpoints._gpt2_config("F32"), vocab_size=vocab,
                                   bos_token_id=50256, eos_token_id=50256, n_ctx=context,
                                   n_positions=context, n_layer=2)
    w = make_checkpoints._gpt2_weights(cfg, np.random.default_rng(seed), False)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    safetensors_io.save(os.path.join(d, "model.safetensors"), w, "F32")
    return d


def gpt2_model_with_template(template_name):
    """A random 2-layer GPT-2-shaped model over GPT-2's real vocabulary, shipped with a real
    model's chat template: (directory, template source)."""
    d = random_gpt2("tf_tools_", 50257, 1024, 5)
    shutil.copy(os.path.join(SHARED, "tokenizers", "gpt2", "tokenizer.json"), d)
    with open(os.path.join(HERE, "..", "chat", "chat_templates", template_name)) as f:
        template = f.read()
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": template, "eos_token": "<|endoftext|>"}, f)
    return d, template


# A conversation with an earlier tool call and its result, as the chat API takes it.
EARLIER_CALL = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "get_weather",
                     "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
     "content": "{\"temperature\": 21}"},
]


class QwenTemplateTest(ServerCase):
    @classmethod
    def setUpClass(cls):
        cls.dir, cls.template = gpt2_model_with_template("qwen2.5_instruct.jinja")
        cls.model_dir, cls.model_flags = cls.dir, ("--model", cls.dir)
        super().setUpClass()

    def post(self, path, body):
        s, b, text, _ = self.c.post(path, body)
        self.assertEqual(s, 200, text)
        return b

    def test_the_format_comes_from_the_template(self):
        b = self.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Add 2 and 3."}], "tools": TOOLS,
            "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 300,
            "temperature": 1.0, "seed": 9, "n": 2})
        for ch in b["choices"]:
            self.assertEqual(ch["finish_reason"], "tool_calls", ch)
            check_calls(self, ch["message"])

    def test_tools_and_earlier_calls_reach_the_template_as_transformers_passes_them(self):
        messages = json.loads(json.dumps(EARLIER_CALL))
        chat = self.post("/v1/chat/completions", {"messages": messages, "tools": TOOLS,
                                                  "max_tokens": 1, "temperature": 0})
        # transformers' form: arguments parsed into an object (vLLM does the same).
        py_messages = json.loads(json.dumps(messages))
        call = py_messages[2]["tool_calls"][0]["function"]
        call["arguments"] = json.loads(call["arguments"])
        status, prompt = render_jinja(self.template, {
            "messages": py_messages, "tools": TOOLS, "add_generation_prompt": True,
            "bos_token": "", "eos_token": "<|endoftext|>"})
        self.assertEqual(status, "ok", prompt)
        self.assertIn('"arguments": {"city": "Paris"', prompt)
        plain = self.post("/v1/completions", {"prompt": prompt, "max_tokens": 1,
                                              "temperature": 0, "add_special_tokens": False})
        self.assertEqual(chat["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"])
        self.assertEqual(chat["choices"][0]["message"]["content"], plain["choices"][0]["text"])

    def test_responses_items_render_as_the_chat_messages_do(self):
        """/v1/responses: instructions and input items (a function_call and its output) reach
        the template as the chat API's messages do: the same prompt, the same greedy answer."""
        messages = EARLIER_CALL
        chat = self.post("/v1/chat/completions", {"messages": messages, "tools": TOOLS,
                                                  "max_tokens": 6, "temperature": 0})
        rtools = [dict(t["function"], type="function") for t in TOOLS]
        resp = self.post("/v1/responses", {
            "instructions": "You are helpful.",
            "input": [{"role": "user", "content": [{"type": "input_text",
                                                    "text": "Weather in Paris?"}]},
                      {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                       "arguments": messages[2]["tool_calls"][0]["function"]["arguments"]},
                      {"type": "function_call_output", "call_id": "call_1",
                       "output": "{\"temperature\": 21}"}],
            "tools": rtools, "max_output_tokens": 6, "temperature": 0})
        self.assertEqual(resp["usage"]["input_tokens"], chat["usage"]["prompt_tokens"])
        self.assertEqual(resp["usage"]["output_tokens"], chat["usage"]["completion_tokens"])
        text = "".join(c["text"] for o in resp["output"] if o["type"] == "message"
                       for c in o["content"])
        self.assertEqual(text, chat["choices"][0]["message"]["content"] or "")
        self.assertEqual(resp["tools"], rtools)
        self.assertEqual(resp["status"], "incomplete" if chat["choices"][0]["finish_reason"]
                         == "length" else "completed")

    def test_responses_refusals(self):
        for body, param in (
                ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
                ({"input": "x", "bogus": 1}, "bogus"),
                ({}, "input"),
                ({"input": []}, "input"),
                ({"input": [{"role": "user", "content": [{"type": "input_image",
                                                           "image_url": "x"}]}]}, "input"),
                ({"input": [{"type": "web_search_call"}]}, "input"),
                ({"input": "x", "tools": [{"type": "web_search"}]}, "tools"),
                ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
                ({"input": "x", "text": {"format": {"type": "xml"}}}, "text"),
                ({"input": "x", "tool_choice": {"type": "mcp"}}, "tool_choice"),
                ({"input": "x", "background": True}, "background")):
            s, b, text, _ = self.c.post("/v1/responses", body)
            self.assertEqual(s, 400, (body, text))
            self.assertEqual(b["error"]["param"], param, (body, text))
        self.assertIn("max_output_tokens", self.c.post(
            "/v1/responses", {"input": "x", "max_output_tokens": 0})[1]["error"]["message"])
        s, _, _, _ = self.c.get("/v1/responses/resp_123")
        self.assertEqual(s, 404)

    def test_openai_npm_responses_and_embeddings(self):
        """The official client's responses.create / stream / parse and embeddings.create
        (tests/js/openai_responses.mjs)."""
        js = os.path.join(os.path.dirname(HERE), "js")
        env = dict(os.environ, TF_BASE_URL="http://127.0.0.1:%d/v1" % self.c.port,
                   TF_MODEL=os.path.basename(self.dir))
        p = subprocess.run(["node", os.path.join(js, "openai_responses.mjs")],
                           capture_output=True, text=True, timeout=180, env=env, cwd=js)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("all openai responses checks passed", p.stdout)

    def test_openai_npm_client(self):
        """The official client: a manual tool loop, streamed tool calls, runTools, and
        chat.completions.parse with zodResponseFormat (tests/js/openai_tools.mjs)."""
        js = os.path.join(os.path.dirname(HERE), "js")
        env = dict(os.environ, TF_BASE_URL="http://127.0.0.1:%d/v1" % self.c.port,
                   TF_MODEL=os.path.basename(self.dir))
        p = subprocess.run(["node", os.path.join(js, "openai_tools.mjs")], capture_output=True,
                           text=True, timeout=180, env=env, cwd=js)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("all openai tools checks passed", p.stdout)


class ReasoningTest(ServerCase):
    """Qwen3's template (think blocks): the answer's <think> part comes back as
    reasoning_content, streamed as its own deltas. A random model writes a think block only when
    a regex makes it (the grammar covers the whole output)."""
    THINK = r"<think>\n[a-z ]{1,30}\n</think>\n\n[a-z ]{1,30}"

    @classmethod
    def setUpClass(cls):
        cls.dir, _ = gpt2_model_with_template("qwen3.jinja")
        cls.model_dir, cls.model_flags = cls.dir, ("--model", cls.dir)
        super().setUpClass()

    def post(self, body):
        s, b, text, _ = self.c.post("/v1/chat/completions", body)
        self.assertEqual(s, 200, text)
        return b

    def test_think_blocks_are_reasoning_content_whole_and_streamed(self):
        body = {"messages": [{"role": "user", "content": "Why is the sky blue?"}],
                "max_tokens": 200, "temperature": 1.0, "seed": 2, "n": 2,
                "guided_regex": self.THINK}
        once = self.post(body)
        for ch in once["choices"]:
            m = ch["message"]
            self.assertRegex(m["reasoning_content"], r"^\n[a-z ]+\n$")
            self.assertRegex(m["content"], r"^[a-z ]+$")
        assert_streams_as_answered(self, body, once)

    def test_think_blocks_are_reasoning_items_in_responses(self):
        body = {"input": "Why is the sky blue?", "max_output_tokens": 200, "temperature": 1.0,
                "seed": 2, "guided_regex": self.THINK}
        s, once, text, _ = self.c.post("/v1/responses", body)
        self.assertEqual(s, 200, text)
        self.assertEqual([o["type"] for o in once["output"]], ["reasoning", "message"])
        reasoning = once["output"][0]["content"][0]["text"]
        self.assertRegex(reasoning, r"^\n[a-z ]+\n$")
        answer = once["output"][1]["content"][0]["text"]
        self.assertRegex(answer, r"^[a-z ]+$")
        head, raw = self.c.raw_stream("/v1/responses", dict(body, stream=True))
        events = []
        for block in raw.split("\n\n")[:-1]:
            name, data = block.split("\n")
            self.assertTrue(name.startswith("event: ") and data.startswith("data: "), block)
            events.append(json.loads(data[len("data: "):]))
            self.assertEqual(name[len("event: "):], events[-1]["type"])
        self.assertEqual([e["sequence_number"] for e in events], list(range(len(events))))
        got = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
        self.assertEqual(got, reasoning)
        got = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        self.assertEqual(got, answer)
        final = events[-1]
        self.assertEqual(final["type"], "response.completed")
        self.assertEqual([o["type"] for o in final["response"]["output"]],
                         ["reasoning", "message"])
        self.assertEqual(final["response"]["output"][1]["content"][0]["text"], answer)

    def test_no_think_block_no_reasoning(self):
        b = self.post({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 40,
                       "temperature": 0, "guided_regex": "[a-z ]{1,20}",
                       "chat_template_kwargs": {"enable_thinking": False}})
        m = b["choices"][0]["message"]
        self.assertNotIn("reasoning_content", m)
        self.assertRegex(m["content"], "^[a-z ]+$")

    def test_tool_calls_after_the_template_of_a_reasoning_model(self):
        b = self.post({"messages": [{"role": "user", "content": "Add 1 and 2"}], "tools": TOOLS,
                       "tool_choice": "required", "parallel_tool_calls": False,
                       "max_tokens": 300, "temperature": 0.7, "seed": 1})
        ch = b["choices"][0]
        self.assertEqual(ch["finish_reason"], "tool_calls", ch)
        check_calls(self, ch["message"])


HARMONY_SPECIALS = ["<|return|>", "<|constrain|>", "<|channel|>", "<|start|>", "<|end|>",
                    "<|message|>", "<|call|>"]


def gpt_oss_like_model():
    """A random 2-layer GPT-2-shaped model whose vocabulary is GPT-2's plus harmony's special
    tokens (ids 50257..), shipped with gpt-oss's chat template and its end ids (<|return|>,
    <|call|>) in generation_config.json: what a gpt-oss checkpoint gives the chat layer.
    Returns (directory, {special text: id})."""
    n = 50257 + len(HARMONY_SPECIALS)
    d = random_gpt2("tf_harmony_", n, 2048, 7)
    with open(os.path.join(SHARED, "tokenizers", "gpt2", "tokenizer.json")) as f:
        tok = json.load(f)
    ids = {t: 50257 + i for i, t in enumerate(HARMONY_SPECIALS)}
    for t, i in ids.items():
        tok["added_tokens"].append({"id": i, "special": True, "content": t, "single_word": False,
                                    "lstrip": False, "rstrip": False, "normalized": False})
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    with open(os.path.join(HERE, "..", "chat", "chat_templates", "gpt_oss.jinja")) as f:
        template = f.read()
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": template, "eos_token": "<|return|>"}, f)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [ids["<|return|>"], ids["<|call|>"]]}, f)
    return d, ids


class HarmonyTest(ChatCase):
    """gpt-oss's harmony format end to end (its template, its special tokens): forced calls are
    decoded under a grammar whose call header is harmony's special tokens (token elements), so
    a random model's answer is a call whatever its weights; the answer is split by channel
    (analysis -> reasoning_content, final -> content, commentary to=functions.X -> tool_calls),
    whole and streamed. A random model lingers in its analysis channel: a bias on <|end|> makes
    the thought short where the grammar lets the model write one."""

    @classmethod
    def setUpClass(cls):
        cls.dir, cls.ids = gpt_oss_like_model()
        cls.model_dir, cls.model_flags = cls.dir, ("--model", cls.dir)
        super().setUpClass()

    def chat(self, **kw):
        # (gpt-oss's template writes every tool's description: jinja2 fails without one too.)
        tools = [WEATHER, {"type": "function",
                           "function": dict(ADD["function"], description="Adds two numbers")}]
        return dict({"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                     "max_tokens": 300, "tools": tools,
                     "logit_bias": {str(self.ids["<|end|>"]): 60}}, **kw)

    def test_required_and_named_calls(self):
        for seed, temperature in ((1, 0.0), (2, 0.8), (3, 1.3)):
            b = self.post(self.chat(tool_choice="required", temperature=temperature, seed=seed,
                                    n=2))
            for ch in b["choices"]:
                self.assertEqual(ch["finish_reason"], "tool_calls", ch)
                self.assertEqual(len(check_calls(self, ch["message"])), 1)
        b = self.post(self.chat(tool_choice={"type": "function", "function": {"name": "add"}},
                                temperature=1.0, seed=4))
        check_calls(self, b["choices"][0]["message"], names=["add"])

    def test_a_call_streams_as_it_is_answered_whole(self):
        body = self.chat(tool_choice="required", temperature=0.9, seed=6)
        once = self.post(body)["choices"][0]
        head, raw = self.c.raw_stream("/v1/chat/completions", dict(body, stream=True))
        calls, content, reasoning, finish = {}, "", "", None
        for e in sse_events(raw):
            for ch in e.get("choices", []):
                d = ch["delta"]
                content += d.get("content") or ""
                reasoning += d.get("reasoning_content") or ""
                for tc in d.get("tool_calls", []):
                    slot = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
                    slot["name"] += tc["function"].get("name", "")
                    slot["arguments"] += tc["function"].get("arguments", "")
                finish = ch["finish_reason"] or finish
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(content, "")
        self.assertEqual(reasoning, once["message"].get("reasoning_content") or "")
        want = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in once["message"]["tool_calls"]]
        self.assertEqual([(s["name"], json.loads(s["arguments"])) for _, s in sorted(calls.items())],
                         want)

    def test_channels_split_into_reasoning_and_content(self):
        # A grammar with harmony's markers as token references writes both channels.
        gbnf = ('root ::= <|channel|> "analysis" <|message|> [a-z ]{1,30} <|end|> <|start|> '
                '"assistant" <|channel|> "final" <|message|> [a-z ]{1,30}')
        body = {"messages": [{"role": "user", "content": "Why is the sky blue?"}],
                "max_tokens": 120, "temperature": 1.0, "seed": 2, "n": 2, "guided_grammar": gbnf}
        once = self.post(body)
        for ch in once["choices"]:
            self.assertRegex(ch["message"]["reasoning_content"], r"^[a-z ]+$")
            self.assertRegex(ch["message"]["content"], r"^[a-z ]+$")
            self.assertNotIn("<|", ch["message"]["content"])
        assert_streams_as_answered(self, body, once)

    def test_a_response_format_is_the_final_channel(self):
        schema = SCHEMAS["add"]
        b = self.post({"messages": [{"role": "user", "content": "Two numbers"}],
                       "max_tokens": 200, "temperature": 0.7, "seed": 5,
                       "logit_bias": {str(self.ids["<|end|>"]): 60},
                       "response_format": {"type": "json_schema",
                                           "json_schema": {"name": "n", "schema": schema}}})
        m = b["choices"][0]["message"]
        jsonschema.validate(json.loads(m["content"]), schema)

    def test_token_references_are_checked(self):
        for gbnf, what in (('root ::= <|nope|> "a"', "not a special token"),
                           ('root ::= <[999999]> "a"', "outside the vocabulary"),
                           ('root ::= !<|end|> "a"', "not supported")):
            b = self.post({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4,
                           "guided_grammar": gbnf}, status=400)
            self.assertIn(what, b["error"]["message"])


class HarmonyBudgetTest(ServerCase):
    """A thinking budget on harmony's analysis channel: a template whose prompt ends inside the
    analysis message (the answer starts in the thought); once the budget's tokens are spent
    there, <|end|><|start|>assistant<|channel|>final<|message|> is forced token by token and
    the answer goes on in the final channel: reasoning_content is the budget's tokens, content
    the rest, streamed the same; a forced call under such a prompt ends the thought first."""
    TEMPLATE = ("{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>"
                "{% endfor %}{% if add_generation_prompt %}<|start|>assistant<|channel|>"
                "analysis<|message|>{% endif %}")
    FORCED = "<|end|><|start|>assistant<|channel|>final<|message|>"

    @classmethod
    def setUpClass(cls):
        cls.dir, cls.ids = gpt_oss_like_model()
        cls.model_dir, cls.model_flags = cls.dir, ("--model", cls.dir)
        cls.server_args = ("--threads", "1", "--chat-template", cls.TEMPLATE)
        super().setUpClass()

    def chat(self, **extra):
        return story_with_tokens(self, **extra)

    def test_the_budget_closes_the_analysis_channel(self):
        free, free_tokens = self.chat()
        self.assertIsNone(free["content"])  # no budget: all 30 tokens are the thought
        self.assertEqual(free["reasoning_content"], "".join(free_tokens))
        self.assertNotIn("<|", "".join(free_tokens))
        for budget in (0, 5, 9):
            msg, tokens = self.chat(thinking_token_budget=budget)
            self.assertEqual(tokens[:budget], free_tokens[:budget])
            rest = "".join(tokens[budget:])
            self.assertTrue(rest.startswith(self.FORCED), tokens)
            self.assertEqual(msg["reasoning_content"], "".join(tokens[:budget]))
            self.assertEqual(msg["content"], rest[len(self.FORCED):])
            self.assertTrue(msg["content"])
            assert_streams_as_answered(self, {
                "messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 30,
                "temperature": 0, "thinking_token_budget": budget},
                {"choices": [{"message": msg}]})

    def test_a_forced_call_ends_the_opened_thought_first(self):
        st, out, text, _ = self.c.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Weather?"}], "max_tokens": 200,
            "temperature": 0.5, "seed": 3, "tools": [WEATHER], "tool_choice": "required",
            "logit_bias": {str(self.ids["<|end|>"]): 60}})
        self.assertEqual(st, 200, text)
        ch = out["choices"][0]
        self.assertEqual(ch["finish_reason"], "tool_calls", ch)
        check_calls(self, ch["message"], names=["get_weather"])


class HermesToolsTest(ToolsTest):
    """The same through the hermes format (Qwen2.5 / Qwen3 / Hermes): the constrained output
    is <tool_call> blocks, parsed back into the same shape."""
    parser = "hermes"


if __name__ == "__main__":
    unittest.main()
