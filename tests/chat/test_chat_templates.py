"""Chat templates rendered by tokenflow must equal, byte for byte, what Python's jinja2 renders
when configured as transformers configures it (apply_chat_template). Every case renders the same
(template, context) both ways: through the C++ tool render_template and through jinja2 here. When
jinja2 raises, tokenflow must raise too (a clean tf::Error, never a crash); the messages may differ
except for raise_exception(), whose message tokenflow passes on verbatim.

Fixtures (tests/chat/chat_templates/*.jinja) are the chat_template strings of the models'
tokenizer_config.json, byte for byte: Llama-2-7b-chat, Meta-Llama-3-8B-Instruct, Meta-Llama-3.1-8B-
Instruct (the "26 Jul 2024" revision, with tools), Llama-3.2-Instruct, Mistral-7B-Instruct v0.1
(as Mixtral-8x7B-Instruct ships it), v0.2 and v0.3 (with tools), Qwen1.5-Chat, Qwen2-Instruct,
Qwen2.5-0.5B-Instruct (with tools), Qwen3 (as released, with <think>, reasoning_content and
enable_thinking), Qwen3-4B-Thinking-2507, zephyr-7b-beta, TinyLlama-1.1B-Chat-v1.0, gemma-7b-it
(which Gemma 2 ships too), gemma-3-it (content as a list of parts), Phi-3-mini, Phi-3.5-mini,
Phi-4, Phi-4-mini (tools in the system message), and templates of other models that exercise namespaces, macros-free tool calling and
whitespace control (deepseek-coder, firefunction-v1, functionary-v2.2, CodeLlama-70b, openchat,
SOLAR, DeciLM, Smaug, Synatra, PiVoT-MoE, falcon-rw-1b-chat). chat_templates/README.md says where
each new fixture was taken from.

Env: TF_RENDER_TEMPLATE (the render_template tool).
"""

import atexit
import datetime
import json
import os
import subprocess
import unittest

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(HERE, "chat_templates")
TOOL = os.environ.get("TF_RENDER_TEMPLATE",
                      os.path.join(REPO, "build", "release", "tests", "render_template"))


# ---- jinja2 as transformers sets it up (transformers/utils/chat_template_utils.py) -------------

class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} tag; without return_assistant_tokens_mask it only renders
    its body (through a CallBlock, so the body has a scope of its own)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [],
                                      body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def _make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.now().strftime(format)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = _make_environment()


def render_jinja(template, context):
    try:
        return "ok", ENV.from_string(template).render(**context)
    except Exception as e:  # noqa: BLE001 - any jinja2 failure is "it raises"
        return "error", f"{type(e).__name__}: {e}"


def run_tool(request, args=()):
    p = subprocess.run([TOOL, *args], input=json.dumps(request, ensure_ascii=False).encode(),
                       capture_output=True, timeout=60)
    return p.returncode, p.stdout.decode("utf-8", "surrogateescape"), p.stderr.decode("utf-8",
                                                                                     "replace")


_LINES = None  # one render_template --lines process for the whole run (a process per render
# costs ~50 ms under the sanitizers, and the suite renders thousands)


def _close_lines():
    if _LINES is not None:
        _LINES.stdin.close()
        _LINES.stdout.close()
        _LINES.wait()


atexit.register(_close_lines)


def render_tokenflow(template, context, limits=None):
    global _LINES
    request = {"template": template, "context": context}
    if limits:
        request["limits"] = limits
    if _LINES is None or _LINES.poll() is not None:
        _LINES = subprocess.Popen([TOOL, "--lines"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    _LINES.stdin.write(json.dumps(request, ensure_ascii=False).encode() + b"\n")
    _LINES.stdin.flush()
    line = _LINES.stdout.readline()
    if not line:
        raise AssertionError("render_template --lines ended (rc=%s)" % _LINES.wait())
    answer = json.loads(line.decode("utf-8"))
    if "ok" in answer:
        return "ok", answer["ok"]
    if "error" in answer and answer["error"].startswith("chat template: ") \
            and "\n" not in answer["error"]:
        return "error", answer["error"]
    raise AssertionError(f"render_template failed badly: {answer!r}")


def read_fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8", newline="") as f:
        return f.read()


class JinjaComparison(unittest.TestCase):
    def assert_same(self, template, context, label=""):
        """Both sides render the same text, or both raise. True when they rendered."""
        want = render_jinja(template, context)
        got = render_tokenflow(template, context)
        if want[0] == "error" and got[0] == "error":
            return False
        self.assertEqual(want, got, f"{label} template: {template[:200]!r}")
        return True

    def assert_each_rendered(self, rendered, names):
        """The positive control: two errors compare equal, so a template that raised on every
        context (a fixture that stopped parsing, a context both sides reject) would pass while
        checking nothing. Each template must have rendered, the same, at least once."""
        for name in names:
            self.assertGreater(rendered.get(name, 0), 0,
                               f"{name}: raised on both sides for every context, so nothing "
                               "about it was compared")


# ---- conversations ------------------------------------------------------------------------------

SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "Hello, how are you?"}
ASSISTANT = {"role": "assistant", "content": "I'm doing great. How can I help you today?"}
USER2 = {"role": "user", "content": "I'd like to show off how chat templating works!"}
TRICKY_USER = {"role": "user",
               "content": "  Line one\nline two\n\n\tTabbed — naïve café, 日本語, emoji 😀 "
                          "\"quotes\" 'single' {{ not_a_tag }} {% neither %}  "}
TRICKY_ASSISTANT = {"role": "assistant", "content": "\n Ответ: ß → SS? ΣΑΣ \n"}
REASONING_ASSISTANT = {"role": "assistant", "content": "\nIt is 4.",
                       "reasoning_content": "\nThe user asks 2 + 2.\nThat is 4.\n\n"}
THINK_ASSISTANT = {"role": "assistant",
                   "content": "<think>\nLet me think.\n</think>\n\nHello! How can I help?"}
FUNCTIONS_MESSAGE = {"role": "functions", "content": json.dumps([{
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}])}
PARTS_SYSTEM = {"role": "system", "content": [{"type": "text", "text": "You are terse."}]}
PARTS_USER = {"role": "user", "content": [{"type": "text", "text": "  Describe this: "},
                                          {"type": "image"},
                                          {"type": "text", "text": "in one word. "}]}

CONVERSATIONS = {
    "system_user": [SYSTEM, USER],
    "user_only": [USER],
    "multi_turn": [USER, ASSISTANT, USER2],
    "system_multi_turn": [SYSTEM, USER, ASSISTANT, USER2],
    "ends_with_assistant": [USER, ASSISTANT],
    "tricky_text": [SYSTEM, TRICKY_USER, TRICKY_ASSISTANT, USER2],
    "tricky_user_only": [TRICKY_USER],
    "empty": [],
    "not_alternating": [USER, USER2],
    "assistant_first": [ASSISTANT, USER],
    # Reasoning models (Qwen3): the thoughts as reasoning_content, or inline in the content.
    "reasoning_content": [SYSTEM, USER, REASONING_ASSISTANT, USER2],
    "ends_with_reasoning": [USER, REASONING_ASSISTANT],
    "think_in_content": [USER, THINK_ASSISTANT, USER2],
    "ends_with_think": [SYSTEM, USER, THINK_ASSISTANT],
    # FireFunction v1 reads its tools from a "functions" message after the system one and
    # refuses every conversation without it.
    "functions_message": [SYSTEM, FUNCTIONS_MESSAGE, USER, ASSISTANT, USER2],
    # Content as a list of {"type": "text"} parts (Gemma 3, multimodal-style clients).
    "content_parts": [PARTS_SYSTEM, PARTS_USER, ASSISTANT, USER2],
    "content_parts_user_only": [PARTS_USER],
}

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}]

TOOL_CALL_TURNS = [
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call12345", "type": "function",
        "function": {"name": "get_current_weather",
                     "arguments": {"location": "Paris", "unit": "celsius"}}}]},
    {"role": "tool", "tool_call_id": "call12345", "name": "get_current_weather",
     "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"},
    {"role": "assistant", "content": "It is 21.5 °C and clear in Paris."},
    {"role": "user", "content": "Thanks!"},
]

MULTI_STEP_TURNS = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Compare the weather in Paris and Oslo."},
    {"role": "assistant", "content": "", "reasoning_content": "Two cities, two calls.",
     "tool_calls": [
         {"type": "function", "function": {"name": "get_current_weather",
                                           "arguments": {"location": "Paris"}}},
         {"type": "function", "function": {"name": "get_current_weather",
                                           "arguments": "{\"location\": \"Oslo\"}"}}]},
    {"role": "tool", "content": "{\"temperature\": 21.5}"},
    {"role": "tool", "content": "{\"temperature\": 3}"},
    {"role": "assistant", "content": "<think>\nParis is warmer.\n</think>\n\nParis: 21.5 °C."},
    {"role": "user", "content": "<tool_response>\n{\"note\": \"late result\"}\n</tool_response>"},
]

TOOL_CONTEXTS = {
    "tools_user_only": {"messages": [{"role": "user", "content": "Weather in Oslo?"}],
                        "tools": TOOLS},
    "tools_with_system": {"messages": [SYSTEM, {"role": "user", "content": "Weather in Oslo?"}],
                          "tools": TOOLS},
    "tool_call_round_trip": {"messages": TOOL_CALL_TURNS, "tools": TOOLS},
    "tool_call_without_tools": {"messages": TOOL_CALL_TURNS},
    # Qwen3: the last user turn is a wrapped tool response (the messages[::-1] scan skips it),
    # two tool results in a row, thoughts before the call.
    "multi_step_tool_calls": {"messages": MULTI_STEP_TURNS, "tools": TOOLS},
    # Phi-4-mini: the tools as a JSON string on the system message.
    "tools_in_system_message": {"messages": [
        {"role": "system", "content": "You are a helpful assistant with some tools.",
         "tools": json.dumps([t["function"] for t in TOOLS])},
        {"role": "user", "content": "Weather in Oslo?"}]},
}

REAL_TEMPLATES = sorted(f for f in os.listdir(FIXTURES) if f.endswith(".jinja"))


class RealTemplates(JinjaComparison):
    """The chat templates models ship (tests/chat/chat_templates/*.jinja)."""

    def test_fixtures_present(self):
        for name in ["llama2_chat", "llama3_instruct", "llama3.1_instruct", "mistral_v0.1_instruct",
                     "mistral_v0.2_instruct", "mistral_v0.3_instruct", "qwen2_instruct",
                     "qwen2.5_instruct", "zephyr", "tinyllama_chat", "gemma_it", "qwen3",
                     "qwen3_thinking_2507", "gemma3_it", "phi3.5_mini_instruct", "phi4",
                     "phi4_mini_instruct", "gpt_oss"]:
            self.assertIn(name + ".jinja", REAL_TEMPLATES)

    def test_conversations(self):
        rendered = {}
        for name in REAL_TEMPLATES:
            template = read_fixture(name)
            for conv_name, messages in CONVERSATIONS.items():
                for gen in (True, False):
                    with self.subTest(template=name, conversation=conv_name, gen=gen):
                        context = {"messages": messages, "add_generation_prompt": gen, **SPECIAL}
                        if self.assert_same(template, context, f"{name} {conv_name} gen={gen}"):
                            rendered[name] = rendered.get(name, 0) + 1
        self.assert_each_rendered(rendered, REAL_TEMPLATES)

    def test_tool_conversations(self):
        for name in REAL_TEMPLATES:
            template = read_fixture(name)
            for ctx_name, ctx in TOOL_CONTEXTS.items():
                with self.subTest(template=name, context=ctx_name):
                    context = {**ctx, "add_generation_prompt": True, **SPECIAL}
                    self.assert_same(template, context, f"{name} {ctx_name}")

    def test_llama31_options(self):
        template = read_fixture("llama3.1_instruct.jinja")
        builtin_call = {"role": "assistant", "tool_calls": [{"function": {
            "name": "brave_search", "arguments": {"query": "weather Paris", "count": "3"}}}]}
        for extra in [{"tools_in_user_message": False, "tools": TOOLS},
                      {"date_string": "01 Jan 2025"},
                      {"builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"]},
                      {"builtin_tools": ["brave_search"], "tools": TOOLS,
                       "messages": [USER, builtin_call,
                                    {"role": "ipython", "content": {"result": [1, 2]}}]},
                      {"custom_tools": TOOLS, "tools_in_user_message": False}]:
            with self.subTest(extra=extra):
                context = {"messages": [SYSTEM, USER], "add_generation_prompt": True, **SPECIAL,
                           **extra}
                self.assert_same(template, context)

    def test_qwen3_enable_thinking(self):
        for name in ["qwen3.jinja", "qwen3_thinking_2507.jinja"]:
            template = read_fixture(name)
            for extra in [{"enable_thinking": False}, {"enable_thinking": True},
                          {"enable_thinking": None}, {"enable_thinking": 0}]:
                for conv_name in ["system_user", "reasoning_content", "think_in_content"]:
                    with self.subTest(template=name, extra=extra, conversation=conv_name):
                        context = {"messages": CONVERSATIONS[conv_name],
                                   "add_generation_prompt": True, **SPECIAL, **extra}
                        self.assert_same(template, context)
        # Thinking off: the prompt ends in an empty think block the model continues after.
        context = {"messages": [USER], "add_generation_prompt": True, "enable_thinking": False,
                   **SPECIAL}
        want = ("<|im_start|>user\nHello, how are you?<|im_end|>\n"
                "<|im_start|>assistant\n<think>\n\n</think>\n\n")
        self.assertEqual(render_tokenflow(read_fixture("qwen3.jinja"), context), ("ok", want))
        self.assertEqual(render_jinja(read_fixture("qwen3.jinja"), context), ("ok", want))
        # Thoughts are kept only after the last user query, and re-emitted in a think block.
        context = {"messages": CONVERSATIONS["ends_with_reasoning"], **SPECIAL}
        self.assertEqual(render_tokenflow(read_fixture("qwen3.jinja"), context)[1],
                         "<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\n"
                         "<think>\nThe user asks 2 + 2.\nThat is 4.\n</think>\n\nIt is 4.<|im_end|>\n")

    def test_gpt_oss_harmony(self):
        # gpt-oss's template (harmony): its kwargs, the analysis channel from "thinking", a
        # call on the commentary channel and its result, and the template's own refusals.
        template = read_fixture("gpt_oss.jinja")
        call = {"role": "assistant", "content": "", "thinking": "I need the weather.",
                "tool_calls": [{"type": "function", "function": {
                    "name": "get_current_weather", "arguments": {"location": "Paris"}}}]}
        result = {"role": "tool", "content": "{\"temperature\": 21.5}"}
        rendered = 0
        for extra in [{}, {"reasoning_effort": "high"}, {"model_identity": "You are terse."},
                      {"builtin_tools": ["browser", "python"]}, {"tools": TOOLS},
                      {"tools": TOOLS, "messages": [SYSTEM, USER, call, result]},
                      {"tools": TOOLS, "messages": [USER, call, result, ASSISTANT, USER2]},
                      {"messages": [USER, dict(ASSISTANT, thinking="Be kind.")],
                       "add_generation_prompt": False}]:
            with self.subTest(extra=extra):
                context = {"messages": [SYSTEM, USER], "add_generation_prompt": True, **SPECIAL,
                           **extra}
                rendered += self.assert_same(template, context)
        self.assertEqual(rendered, 8)
        # The generation prompt, and a developer message carrying the system prompt.
        got = render_tokenflow(template, {"messages": [SYSTEM, USER],
                                          "add_generation_prompt": True,
                                          "reasoning_effort": "low", **SPECIAL})
        self.assertEqual(got[0], "ok")
        self.assertIn("Reasoning: low\n\n", got[1])
        self.assertIn("<|start|>developer<|message|># Instructions\n\nYou are a helpful "
                      "assistant.\n\n<|end|>", got[1])
        self.assertTrue(got[1].endswith("<|start|>user<|message|>Hello, how are you?<|end|>"
                                        "<|start|>assistant"), got[1][-200:])
        # Channel markers in a message's content are refused, on both sides.
        bad = {"messages": [USER, {"role": "assistant",
                                   "content": "<|channel|>final<|message|>hi"}], **SPECIAL}
        self.assertEqual(render_jinja(template, bad)[0], "error")
        self.assertEqual(render_tokenflow(template, bad)[0], "error")

    def test_gemma3_folds_the_system_message_into_the_first_turn(self):
        template = read_fixture("gemma3_it.jinja")
        context = {"messages": CONVERSATIONS["content_parts"], "add_generation_prompt": True,
                   "bos_token": "<bos>"}
        want = ("<bos><start_of_turn>user\nYou are terse.\n\nDescribe this:<start_of_image>in one "
                "word.<end_of_turn>\n<start_of_turn>model\nI'm doing great. How can I help you "
                "today?<end_of_turn>\n<start_of_turn>user\nI'd like to show off how chat templating "
                "works!<end_of_turn>\n<start_of_turn>model\n")
        self.assertEqual(render_jinja(template, context), ("ok", want))
        self.assertEqual(render_tokenflow(template, context), ("ok", want))

    def test_gemma_refuses_a_system_message(self):
        template = read_fixture("gemma_it.jinja")
        context = {"messages": [SYSTEM, USER], "add_generation_prompt": True, **SPECIAL}
        self.assertEqual(render_jinja(template, context)[0], "error")
        self.assertEqual(render_tokenflow(template, context),
                         ("error", "chat template: System role not supported"))

    def test_raise_exception_message_is_verbatim(self):
        template = read_fixture("llama2_chat.jinja")
        context = {"messages": [USER, USER2], **SPECIAL}
        self.assertEqual(render_jinja(template, context),
                         ("error", "TemplateError: Conversation roles must alternate "
                                   "user/assistant/user/assistant/..."))
        self.assertEqual(render_tokenflow(template, context),
                         ("error", "chat template: Conversation roles must alternate "
                                   "user/assistant/user/assistant/..."))


BUILTIN_NAMES = ["chatml", "llama2", "llama3", "mistral", "zephyr", "gemma", "tinyllama", "qwen3",
                 "gemma3", "phi4", "gpt-oss"]


class BuiltinTemplates(JinjaComparison):
    """builtin_chat_template(): the sources and their renderings."""

    def builtin_source(self, name):
        rc, out, err = run_tool({}, ["--builtin-source", name])
        self.assertEqual(rc, 0, err)
        return out

    def test_names(self):
        rc, out, _ = run_tool({}, ["--builtins"])
        self.assertEqual(rc, 0)
        self.assertEqual(out.split(), BUILTIN_NAMES)

    def test_unknown_family_lists_the_known_ones(self):
        rc, _, err = run_tool({}, ["--builtin-source", "nope"])
        self.assertEqual(rc, 1)
        self.assertIn("'nope'", err)
        self.assertIn(", ".join(BUILTIN_NAMES), err)

    def test_builtins_match_the_shipped_templates(self):
        shipped = {"llama2": "llama2_chat", "llama3": "llama3_instruct",
                   "mistral": "mistral_v0.2_instruct", "zephyr": "zephyr", "gemma": "gemma_it",
                   "qwen3": "qwen3", "gemma3": "gemma3_it", "phi4": "phi4",
                   "gpt-oss": "gpt_oss"}
        for name, fixture in shipped.items():
            with self.subTest(name=name):
                self.assertEqual(self.builtin_source(name), read_fixture(fixture + ".jinja"))

    def test_renderings(self):
        rendered = {}
        for name in BUILTIN_NAMES:
            template = self.builtin_source(name)
            for conv_name, messages in CONVERSATIONS.items():
                for gen in (True, False):
                    with self.subTest(builtin=name, conversation=conv_name, gen=gen):
                        context = {"messages": messages, "add_generation_prompt": gen, **SPECIAL}
                        if self.assert_same(template, context):
                            rendered[name] = rendered.get(name, 0) + 1
        self.assert_each_rendered(rendered, BUILTIN_NAMES)


# ---- constructs, one small template each --------------------------------------------------------

CONTEXT = {
    "messages": [SYSTEM, USER, ASSISTANT, USER2],
    "add_generation_prompt": True, **SPECIAL,
    "name": "World", "items": [3, 1, 2], "n": 7, "f": 2.5, "t": True, "nothing": None,
    "s": "  Hello, World  ", "u": "héllo wörld ß Σας",
    "d": {"b": 1, "a": [1, 2], "c": {"x": None, "y": "é"}, "items": "key named items"},
    "empty": [], "nested": [[1, [2, [3]]], {"k": [{"z": 1}]}],
}

WHITESPACE = [
    "a\n{% if true %}\nb\n{% endif %}\nc",
    "a\n  {% if true %}\n  b\n  {% endif %}\n  c",
    "a  {% if true %}b{% endif %}  c",
    "a\n  {%+ if true %}b{% endif %}",
    "a\n  {{ 'x' }}\n  b",
    "a \n {%- if true -%} \n b \n {%- endif -%} \n c",
    "<{{- ' x ' -}}>",
    "a  {{- 'x' -}}  b\n\n c",
    "a\n{# comment #}\nb",
    "a\n  {# comment #}\n  b",
    "a {#- comment -#} b",
    "a {#+ comment +#}\nb",
    "{# multi\nline\ncomment #}x",
    "{% raw %}{{ not evaluated }} {% if %}{% endraw %}",
    "a\n  {% raw %}\n  {{ x }}\n  {% endraw %}\n  b",
    "<{%- raw -%}  {{ x }}  {%- endraw -%}>",
    "line1\r\nline2\r\n{% if true %}\r\nx\r\n{% endif %}\r\n",
    "line1\rline2\r{% if true %}\rx{% endif %}",
    "trailing newline\n",
    "two trailing\n\n",
    "\n",
    "",
    "{% if true %}   \nx{% endif %}",
    "  {% if true %}x{% endif %}  \n y",
    "{{ 'a' }}\n{{ 'b' }}\n",
    "\t{% for i in [1,2] %}\n\t{{ i }}\n\t{% endfor %}\n",
    "a {%+ if true %} b {%+ endif %} c",
    "{% if true %}a{%+ endif %}\nb",
    "{% if true %}a{%- endif +%}\n  b",
    "x\n    {%- if true %}\n    y\n    {%- endif %}\n    z",
    "{% for m in messages %}\n  {{- m.role }}\n{% endfor %}",
    "{% for m in messages -%}\n   {{ m.role }}\n{%- endfor %}",
    "  {#- c #}  x",
    "\u3000{%- if true %}x{% endif %}\u3000\u00a0 {{- 'y' -}} \u2028z",
    "a\n\x0c{# lstrip_blocks strips any whitespace, as Python's \\s #}b",
    "a\n\u3000\u00a0{% if true %}x{% endif %}\n\x85\x1c{% if true %}y{% endif %}",
    "a\n\x0b {%+ if true %}kept{% endif %}",
    "{{ '{{' }} {{ '}}' }} {{ '{%' }}",
    "{{ {'a': {'b': 1}} }}",
    "{{ {'a': {'b': {'c': 1}}}['a'] }}",
    "{{- 'x' }}  {#- c -#}  {%- if true -%}  y  {%- endif -%}  ",
    "{%if true%}{{1}}{%endif%}",
    "{%- for i in range(3) -%}{{ i }}{%- endfor -%}",
]

LITERALS = [
    "{{ \"double \\\"q\\\" \\n \\t \\\\ \\x41 \\u00e9 \\U0001F600 \\101 \\0 \\a\\b\\f\\v\\r \\q\" }}",
    "{{ 'single \\' q' }} {{ 'a' 'b' \"c\" }}",
    "{{ 'line\\\ncontinued' }}",
    "{{ 'é\\é' }}",
    "{{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 0B1_1 }} {{ 1.5e3 }} {{ 2E-3 }} {{ 1_0.5 }} {{ 0 }}",
    "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1/3 }} {{ 10/2 }} {{ 2**0.5 }} {{ -0.0 }} "
    "{{ 1e-5 }} {{ 1e-4 }} {{ 123456789.123 }} {{ 1.5e300 * 1e10 }} {{ 5e-324 }} {{ 1e22 }}",
    "{{ true }} {{ True }} {{ false }} {{ False }} {{ none }} {{ None }}",
    "{{ [1, 'a', none, true, 2.5, [], {}] }} {{ {'a': 1, 'b': [1, 'x']} }}",
    "{{ {1: 'a', none: 2, true: 3, 2.5: 4, (1, 2): 5} }}",
    "{{ {'a': 1, 'b': 2, 'a': 3} }}",
    "{{ (1, 'a', none) }} {{ (1,) }} {{ () }} {{ 1, 2 }} {{ (1, (2, 3)) }}",
    "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n', 'tab\\t', 'é', '\\x00', '\\x7f', '\\x85', "
    "'\\xa0', '\\u200b', '\\\\'] }}",
    "{{ [1, 2,] }} {{ {'a': 1,} }} {{ (1, 2,) }}",
]

EXPRESSIONS = [
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} "
    "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 7.5 % -2 }} {{ 1 + 2 * 3 - 4 / 2 }} {{ 5 / 2 }} {{ 4 / 2 }}",
    "{{ 'ab' * 3 }} {{ 3 * 'ab' }} {{ 'ab' * 0 }} {{ 'ab' * -1 }} {{ [1, 2] * 2 }} {{ [1] + [2, 3] }} "
    "{{ (1,) + (2,) }} {{ 'a' ~ 1 ~ none ~ true ~ undefined_thing ~ 2.0 ~ [1] }}",
    "{{ true + 1 }} {{ true * 3 }} {{ true and 'x' }} {{ false or 0 or 'y' }} {{ none or [] }} "
    "{{ 1 and 0 }} {{ '' or 'fallback' }} {{ [] and 'no' }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} "
    "{{ (1, 2) <= (1, 2) }} {{ 1 != 2 }} {{ none == none }} {{ true == 1 }} {{ 'a' == 'a' }} "
    "{{ [1, [2]] == [1, [2]] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ [1] == (1,) }} "
    "{{ 'é' > 'z' }} {{ 2 >= 2.0 }} {{ 'B' < 'a' }}",
    "{{ 'a' in 'cat' }} {{ '' in 'x' }} {{ 2 in [1, 2] }} {{ 'b' in {'b': 1} }} {{ 3 not in [1] }} "
    "{{ 'x' not in 'abc' }} {{ 1.0 in [1] }} {{ none in [none] }} {{ 'k' in d }} {{ 'items' in d }}",
    "{{ 'y' if n > 5 else 'n' }} [{{ 'y' if false }}] {{ ('a' if false) is defined }} "
    "{{ 1 if 0 else 2 if 0 else 3 }}",
    "{{ -n }} {{ +n }} {{ -f }} {{ - -1 }} {{ not true }} {{ not none }} {{ not not 'x' }} "
    "{{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ not 1 == 2 }} {{ 1 + 2 ~ 3 }} {{ 'a' ~ 1 + 2 }} {{ -1|abs }} "
    "{{ +true }}",
    "{{ d.b }} {{ d['a'][1] }} {{ d.a.0 }} {{ d.c.x }} [{{ d.missing }}] [{{ d['missing'] }}] "
    "{{ messages[0].role }} {{ messages[-1]['content'] }} [{{ items[5] }}] [{{ items[-9] }}] "
    "{{ nested[0][1][1][0] }} {{ nested[1].k[0].z }} {{ d['c']['y'] }} [{{ nothing.x }}] "
    "[{{ 'abc'[1] }}] [{{ 'abc'[9] }}] [{{ items['x'] }}] [{{ d[1] }}] "
    "[{{ items[true] }}] [{{ d[[1]] }}]",
    "{{ items[1:] }} {{ items[::-1] }} {{ items[:-1] }} {{ items[1:2] }} {{ s[2:7] }} {{ u[::-1] }} "
    "{{ u[1:4] }} {{ items[::2] }} {{ items[5:] }} {{ items[-10:10] }} {{ items[:] }} "
    "{{ (1, 2, 3)[1:] }} {{ 'abcdef'[-2:] }} {{ 'abcdef'[::-2] }} {{ items[2:0:-1] }} "
    "{{ items[none:2] }} {{ items[true:] }}",
    "{% set x = 'abc' %}{{ x[0] }}{{ x[-1] }}{{ x|length }}",
    "{{ messages|length > 2 and messages[0].role == 'system' }}",
    "{{ d.items is defined }} {{ d['items'] }} {{ d.get('items') }} {{ d.items()|length }}",
]

METHODS = [
    "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' H') }}|{{ 'xxhixx'.strip('x') }}",
    "{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|"
    "{{ 'a b c'.rsplit(' ', 1) }}|{{ '  a b  c '.split(none, 1) }}|{{ '  a b  c '.rsplit(none, 1) }}|"
    "{{ ''.split() }}|{{ ''.split(',') }}|{{ 'a\\nb\\r\\nc\\n'.splitlines() }}|"
    "{{ 'a\\nb'.splitlines(true) }}|{{ 'a<sep>b'.split(sep='<sep>') }}",
    # Qwen3's reasoning split: multi-character separators, [0]/[-1], strip with a set of chars.
    "{% set c = '<think>\\n a \\n</think>\\n\\nB\\n' %}"
    "[{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}]"
    "[{{ c.split('</think>')[-1].lstrip('\\n') }}][{{ 'no tags'.split('</think>')[-1] }}]"
    "[{{ '\\n\\nx\\n'.strip('\\n') }}][{{ '<think></think>'.split('<think>') }}]"
    "[{{ 'a</think>b</think>c'.split('</think>') }}][{{ 'ab'.split('ab') }}]",
    "{{ s.startswith('  H') }} {{ s.endswith(('x', '  ')) }} {{ 'abc'.startswith('b', 1) }} "
    "{{ 'abc'.upper() }} {{ 'ABC'.lower() }} {{ 'hello wORLD it\\'s 2nd'.title() }} "
    "{{ 'hELLO world'.capitalize() }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc'.replace('', '-') }}",
    "{{ 'abc'.find('c') }} {{ 'abc'.find('z') }} {{ 'abcabc'.rfind('b') }} {{ 'abcabc'.count('b') }} "
    "{{ 'abc'.index('b') }} {{ '-'.join(['a', 'b']) }} {{ ', '.join(d) }} {{ 'x{}y{}'.format(1, 'z') }} "
    "{{ '{0}-{0}'.format('q') }} {{ '{name}!'.format(name='N') }} {{ '{:>5}|{:<4}|{:^5}'.format('a', 'b', 'c') }} "
    "{{ '{:.2f} {:5d} {:03d} {!r}'.format(3.14159, 42, 7, 'x') }} {{ '{{}}'.format() }}",
    "{{ u.upper() }} {{ u.lower() }} {{ u.title() }} {{ u|length }} {{ u[0] }} {{ u[-1] }} "
    "{{ u.find('w') }} {{ u.split() }} {{ u.capitalize() }} {{ u|upper }} {{ u|title }}",
    "{{ '42'.isdigit() }} {{ '4a'.isdigit() }} {{ 'abc'.isalpha() }} {{ ' \\n'.isspace() }} "
    "{{ 'Ab'.isupper() }} {{ 'ab'.islower() }} {{ 'a1'.isalnum() }} {{ ''.isdigit() }}",
    "{{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.json'.removesuffix('.json') }} "
    "{{ 'ab'.ljust(5, '.') }}|{{ 'ab'.rjust(5) }}|{{ 'ab'.center(7, '*') }}|{{ '-42'.zfill(6) }} "
    "{{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.keys()|list }} "
    "{{ d.values()|list }} {{ d.get('b') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} "
    "{{ d.copy()|length }} {{ items.index(1) }} {{ items.count(3) }}",
    "{% set f = 'abc'.upper %}{{ f() }} {{ 'x'.strip is defined }} {{ d.pop is defined }}",
]

FILTERS = [
    "{{ s|trim }}|{{ s|trim(' Hd') }}|{{ s|length }}|{{ s|upper }}|{{ s|lower }}|"
    "{{ 'hello WORLD-foo bar(baz [x {y <z'|title }}|{{ 'hello world'|capitalize }}|"
    "{{ s|replace('l', 'L') }}|{{ s|replace('l', 'L', 1) }}|{{ 42|replace(2, 3) }}",
    "{{ items|first }} {{ items|last }} {{ items|join(', ') }} {{ items|join }} {{ items|list }} "
    "{{ 'abc'|list }} {{ items|length }} {{ items|count }} {{ d|length }} {{ items|reverse|list }} "
    "{{ 'abc'|reverse }} {{ items|sort }} {{ items|sort(reverse=true) }} {{ items|min }} "
    "{{ items|max }} {{ items|sum }} {{ [1, 2, 1, 3]|unique|list }} {{ 'abc'|first }} "
    "{{ 'abc'|last }} {{ d|first }} {{ d|list }} [{{ empty|first }}] [{{ empty|last }}] "
    "[{{ empty|min }}]",
    "{{ n|string }} {{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ '3.5'|float }} "
    "{{ 'x'|float }} {{ 3|float }} {{ 2.7|int }} {{ -2.7|int }} {{ '0x1f'|int(0, 16) }} "
    "{{ ' 12 '|int }} {{ '1_000'|int }} {{ none|int }} {{ true|int }} {{ '1e3'|float }} "
    "{{ 'inf'|float }} {{ ' -nan '|float }} {{ '12abc'|int(-1) }} {{ '0b101'|int(0, 0) }} "
    "{{ [1]|int }} {{ none|string }} {{ [1, 'a']|string }}",
    "{{ undefined_x|default('dflt') }} {{ nothing|default('dflt') }} {{ ''|default('dflt', true) }} "
    "{{ 0|d('z', boolean=true) }} {{ name|d('no') }} [{{ undefined_x|default }}] "
    "{{ undefined_x|default(undefined_y)|default('two') }}",
    "{{ d|tojson }}\n{{ d|tojson(indent=2) }}\n{{ [1, 'é', none, true, 2.5, -0.0, 1e100]|tojson }}\n"
    "{{ 'a\"b\\\\c\\n\\u0001\\x7f\\u2028'|tojson }}\n{{ {}|tojson(indent=2) }} {{ []|tojson }} "
    "{{ d|tojson(sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }} "
    "{{ 'é😀'|tojson(ensure_ascii=true) }} {{ (1, 2)|tojson }} {{ {1: 2, none: 3, true: 4}|tojson }}\n"
    "{{ nested|tojson(indent=4) }}\n{{ nested|tojson(indent='\\t') }}\n{{ d|tojson(indent=0) }}",
    "{{ d|items|list }} {% for k, v in d|items %}{{ k }}{% endfor %} {{ d|dictsort }} "
    "{{ {'b': 1, 'A': 2, 'a': 0}|dictsort }} {{ {'b': 1, 'A': 2}|dictsort(true) }} "
    "{{ {'x': 2, 'y': 1}|dictsort(by='value') }} {{ {'x': 2, 'y': 1}|dictsort(reverse=true) }} "
    "[{{ undefined_x|items|list }}]",
    "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} "
    "{{ messages|rejectattr('role', 'equalto', 'user')|list|length }} "
    "{{ messages|map(attribute='role')|join(',') }} {{ [1, 0, 2, none]|select|list }} "
    "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} "
    "{{ messages|selectattr('missing')|list }} {{ messages|selectattr('missing', 'defined')|list }} "
    "{{ ['a', 'B']|map('upper')|list }} {{ messages|map(attribute='nope', default='Z')|list }} "
    "{{ [3, 5, 8]|select('greaterthan', 4)|list }} {{ [3, 5, 8]|select('>', 4)|list }} "
    "{{ nested|map(attribute='0')|list }} {{ [{'a': {'b': 1}}]|map(attribute='a.b')|list }} "
    "{{ [' a ', 'b ']|map('trim')|join('|') }} {{ ['x', 'y']|map('replace', 'x', 'z')|list }} "
    "{{ messages|selectattr('role', 'in', ['user', 'system'])|list|length }}",
    "{{ 'a&b<c>\"d\\'e'|e }} {{ 'a&b'|escape }} {{ 'x'|safe }} {{ 1|safe }} {{ 3.14159|round(2) }} "
    "{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.567|round(1, 'floor') }} "
    "{{ 2.123|round(1, 'ceil') }} {{ 5|round }} {{ 1234|round(-2) }} {{ 1250|round(-2) }} "
    "{{ 1350|round(-2) }} {{ -3|abs }} {{ -2.5|abs }} {{ 1e16|round }} {{ -0.5|round }}",
    "{{ 'line1\\nline2\\n\\nline3'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|"
    "{{ 'a\\n\\nb'|indent(width='> ', blank=true) }}|{{ ''|indent }}|{{ 'x\\n'|indent(first=true) }}",
    "{{ '%s and %s'|format('a', 1) }} {{ '%d%%'|format(5) }} {{ '%r'|format('q') }} "
    "{{ '%s' % 'x' }} {{ '%s-%s' % (1, 2) }} {{ '%.2f'|format(1.5) }} {{ '%5s|%-5s|%.1s' % ('a', 'b', 'cd') }} "
    "{{ '%05d|%-4d|%+d|% d|%x|%X|%#x|%o|%c' % (42, 7, 3, 3, 255, 255, 255, 8, 65) }} "
    "{{ '%(a)s-%(b)d' % {'a': 'x', 'b': 2} }} {{ '%e|%g|%.3g|%G' % (12345.678, 0.0001, 1234567, 1e-10) }} "
    "{{ '%s' % [1, 2] }} {{ '%s' % none }}",
    "{{ [3, 1, 2]|sort|first }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} "
    "{{ messages|sort(attribute='role')|map(attribute='role')|list }} {{ ['b', 'A', 'a']|unique|list }} "
    "{{ ['b', 'A', 'a']|unique(true)|list }} {{ ['b', 'A', 'c']|max }} {{ ['b', 'A', 'c']|min(true) }} "
    "{{ messages|max(attribute='role') }} {{ [[1], [1, 2]]|sum(start=[]) }} "
    "{{ messages|map(attribute='content')|map('length')|sum }}",
    "{{ 'yes' if empty|select else 'no' }} {{ 'yes' if messages|selectattr('role', 'eq', 'x') else 'no' }} "
    "{{ (messages|map(attribute='role')) is iterable }} {{ (messages|map(attribute='role')) is sequence }} "
    "{{ items|reverse is sequence }} {{ nothing|map('upper')|list }} {{ 0|select|list }} "
    "{{ missing|selectattr('x')|list }} {{ items|batch(2)|list }} {{ items|batch(2, 0)|list }} "
    "{% set g = 5|items %}{{ 'lazy errors wait' }} {% set h = messages|map('nosuchfilter') %}ok",
    "{{ x|attr('y') is defined }} {{ d|attr('b') is defined }} {{ 'abc'|attr('upper') is defined }}",
    "{% set up = 'x'|upper %}{{ up }}{{ ('a' ~ 'b')|upper }}{{ 'a' ~ 'b'|upper }}{{ name|lower|upper }}",
]

TESTS = [
    "{{ x is defined }} {{ name is defined }} {{ x is undefined }} {{ nothing is none }} "
    "{{ n is number }} {{ f is number }} {{ t is number }} {{ n is integer }} {{ t is integer }} "
    "{{ f is float }} {{ t is boolean }} {{ t is true }} {{ t is false }} {{ s is string }} "
    "{{ d is mapping }} {{ items is mapping }} {{ items is iterable }} {{ s is iterable }} "
    "{{ n is iterable }} {{ x is iterable }} {{ items is sequence }} {{ d is sequence }} "
    "{{ n is sequence }} {{ x is sequence }} {{ nothing is iterable }}",
    "{{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} "
    "{{ n is eq 7 }} {{ n is equalto(7) }} {{ n is ne 7 }} {{ n is lt 8 }} {{ n is gt 8 }} "
    "{{ n is ge 7 }} {{ n is le 6 }} {{ n is lessthan 9 }} {{ n is greaterthan 1 }} "
    "{{ 2 is in [1, 2] }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'Abc' is lower }} "
    "{{ 7.0 is odd }} {{ 2.5 is even }}",
    "{{ nothing is sameas none }} {{ t is sameas true }} {{ 1 is sameas true }} {{ items is sameas items }} "
    "{{ name is not none }} {{ x is not defined }} {{ raise_exception is callable }} "
    "{{ name is callable }} {{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} "
    "{{ s is escaped }} {{ not x is defined }} {{ x is defined or 'fallback' }}",
    "{{ messages[0].content is string and messages[0].content is not mapping }}",
    # Qwen3's enable_thinking test and Gemma 3's content checks.
    "{{ false is false }} {{ 0 is false }} {{ none is false }} {{ '' is false }} "
    "{{ x is defined and x is false }} {{ [] is iterable }} {{ {} is iterable }} "
    "{{ 'x' is iterable }} {{ messages is iterable }} {{ [{'type': 'text'}] is string }}",
]

STATEMENTS = [
    "{% set ns = namespace(last=messages|length - 1, multi=true) %}{% for m in messages[::-1] %}"
    "{% set index = (messages|length - 1) - loop.index0 %}{% if ns.multi and m.role == 'user' %}"
    "{% set ns.multi = false %}{% set ns.last = index %}{% endif %}{{ index }}{{ loop.last }},"
    "{% endfor %} {{ ns.last }} {{ ns.multi }} {% for m in messages %}{% if loop.index0 > ns.last %}"
    "{{ m.role }}{% endif %}{% endfor %}",
    "{% for m in [{'content': [{'type': 'text', 'text': ' a '}, {'type': 'image'}]}] %}"
    "[{{ m['content'] | trim }}]{% for item in m['content'] %}{% if item['type'] == 'text' %}"
    "[{{ item['text'] | trim }}]{% endif %}{% endfor %}{% endfor %}",
    "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/"
    "{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/"
    "{{ loop.previtem is defined }}/{{ loop.nextitem.role if loop.nextitem else '-' }}/"
    "{{ loop.depth }};{% endfor %}",
    "{% for i in items if i > 1 %}{{ loop.index }}:{{ i }}{{ ',' if not loop.last }}{% endfor %}",
    "{% for i in [] %}x{% else %}empty{% endfor %} {% for i in items if i > 10 %}x{% else %}"
    "none passed{% endfor %} {% for i in items %}{{ i }}{% else %}never{% endfor %}",
    "{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %} {% for k, v in {'x': 1}.items() %}"
    "{{ k }}{{ v }}{% endfor %} {% for a, (b, c) in [(1, (2, 3))] %}{{ a }}{{ b }}{{ c }}{% endfor %} "
    "{% for a, b in ['xy', 'zw'] %}{{ b }}{{ a }}{% endfor %}",
    "{% for i in [1, 2] %}{% for j in 'ab' %}{{ i }}{{ j }}{{ loop.index }}{% endfor %}"
    "{{ loop.index }};{% endfor %}",
    "{% for i in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %} {% for k in d %}{{ k }},{% endfor %} "
    "{% for c in 'héllo' %}{{ c }}.{% endfor %} {% for x in undefined_x %}never{% endfor %}",
    "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} "
    "{% for i in range(0) %}x{% endfor %}{{ range(3)|length }} {{ range(-3)|list }}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}"
    "{% endif %}{{ i }}{% endfor %} {% for i in range(3) %}{% for j in range(3) %}"
    "{% if j == 1 %}{% break %}{% endif %}{{ i }}{{ j }} {% endfor %}{% endfor %}",
    "{% for i in [1, 2] %}{% break %}{% else %}else runs: no iteration reached its end{% endfor %} "
    "{% for i in [1, 2] %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% else %}E{% endfor %} "
    "{% for i in [1, 2] %}{% continue %}{% else %}all continued{% endfor %}",
    "{% for n in [1, 2, 3, 4] %}{% if n == 1 %}one{% elif n == 2 %}two{% elif n == 3 %}three"
    "{% else %}other{% endif %} {% endfor %}{% if (1, 2) %}tuple is truthy{% endif %}",
    "{% set x = 1 %}{% set y, z = 2, 3 %}{{ x }}{{ y }}{{ z }}{% set x = x + 10 %}{{ x }}"
    "{% set (p, q) = 'ab' %}{{ q }}{{ p }}{% set t = 1, 2 %}{{ t }}",
    "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}",
    "{% for i in [1, 2] %}{% if i == 2 %}[{{ y }}]{% endif %}{% set y = i %}{% endfor %}[{{ y }}]",
    "{% if true %}{% set inner = 'set in if' %}{% endif %}{{ inner }}",
    "{% for i in [1] %}{% set loopvar = 'x' %}{% endfor %}[{{ loopvar }}] [{{ i }}] [{{ loop }}]",
    "{% set messages = messages[1:] %}{{ messages|length }}{% for m in messages %}"
    "{% set messages = [] %}{{ messages|length }}{% endfor %}{{ messages|length }}",
    "{% set ns = namespace(count=0, roles=[]) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}"
    "{% set ns.roles = ns.roles + [m.role] %}{% endfor %}{{ ns.count }} {{ ns.roles }} "
    "{{ ns.missing is defined }} {{ ns['count'] }}",
    "{% set ns = namespace() %}{% set ns.a = 1 %}{{ ns.a }} {% set ns2 = namespace({'k': 'v'}, z=2) %}"
    "{{ ns2.k }}{{ ns2.z }} {% set ns3 = namespace(ns2=ns2) %}{{ ns3.ns2.k }}",
    "{% set ns = namespace(found=false) %}{% for m in messages %}{% if m.role == 'system' %}"
    "{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
    "{% set block %}Hello {{ name }}!{% endset %}[{{ block }}] {% set up | upper %}shout "
    "{{ name }}{% endset %}{{ up }} {% set t2 | trim | upper %}  pad  {% endset %}[{{ t2 }}]",
    "{% set block %}{% set leaked = 1 %}x{% endset %}{{ leaked is defined }}",
    "{% macro greet(who, punct='!') %}Hi {{ who }}{{ punct }}{% endmacro %}{{ greet('a') }} "
    "{{ greet('b', '?') }} {{ greet(who='c') }} [{{ greet() }}] {{ greet('d', punct='.') }}",
    "{% set g = 'G' %}{% macro m(x) %}{{ g }}{{ x }}{% set g = 'local' %}{{ g }}{% endmacro %}"
    "{{ m(1) }}{{ g }}",
    "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}"
    "{{ fact(5) }}",
    "{% macro a(x, y=x ~ '!') %}{{ y }}{% endmacro %}{{ a('q') }}",
    "{% macro render_tool(t) %}\n  - {{ t.function.name }}: {{ t.function.description }}\n"
    "{% endmacro %}\n{% for t in tools %}\n{{ render_tool(t) }}\n{% endfor %}",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}",
    "{% filter upper %}hello {{ name }}{% endfilter %} {% filter replace('a', 'b') | trim %} banana "
    "{% endfilter %}",
    "{% print 'x', 1 %}",
    "{% for m in messages %}{% generation %}{{ m.content[:5] }}|{% endgeneration %}{% endfor %}",
    "{{ strftime_now('%Y-%m-%d') }}",
    "{{ dict(a=1, b='x') }} {{ dict([('k', 1)]) }} {{ dict({'a': 1}, b=2) }}",
    "{% if messages|length > 1 %}{{ raise_exception('too many: ' ~ messages|length) }}{% endif %}",
    "{% if false %}{{ 'x'|wordwrap }}{{ x is nosuchtest }}{% endif %}ok",
    "{% for i in range(3) %}{% if false %}{{ 'x'|nosuchfilter }}{% endif %}{% endfor %}ok",
]

UNDEFINED = [
    "[{{ missing }}] [{{ missing|length }}] [{{ missing|trim }}] [{{ missing is defined }}] "
    "[{% for x in missing %}x{% endfor %}] [{{ missing ~ 'y' }}] [{{ missing == missing }}] "
    "[{{ missing|default('z') }}] [{{ 'a' in missing }}] [{{ not missing }}] [{{ missing|list }}] "
    "[{{ missing|join }}] [{{ missing|string }}] [{{ missing|upper }}] [{{ missing != none }}] "
    "[{{ missing is iterable }}] [{{ missing is sequence }}] [{{ missing is mapping }}] "
    "[{{ missing|first }}] [{{ missing|count }}] [{{ missing is callable }}]",
]

RAISES = [
    "{{ missing + 1 }}", "{{ missing.attr }}", "{{ missing['k'] }}", "{{ missing() }}",
    "{{ d.missing.attr }}", "{{ 1 + 'a' }}", "{{ 'a' + 1 }}", "{{ nothing + 'x' }}", "{{ 1 / 0 }}",
    "{{ 1 // 0 }}", "{{ 1 % 0 }}", "{{ 1.0 / 0 }}", "{{ [1] < 'a' }}", "{{ none < none }}",
    "{{ messages[10]['role'] }}", "{{ n() }}", "{{ items.append(4) }}", "{{ d.pop('b') }}",
    "{{ d.update({}) }}", "{{ range(200000)|list|length }}", "{{ 'x'|nosuchfilter }}",
    "{% if true %}{{ 'x'|nosuchfilter }}{% endif %}", "{{ x is nosuchtest }}",
    "{% set a, b = [1, 2, 3] %}", "{% set a, b = [1] %}", "{{ missing|tojson }}",
    "{{ namespace()|tojson }}", "{% set ns.x = 1 %}", "{% set q = 1 %}{% set q.x = 1 %}",
    "{{ '{}'.format() }}", "{{ 1 in 'abc' }}", "{{ 'a' in 5 }}", "{{ -'a' }}", "{{ -missing }}",
    "{{ missing|int }}", "{{ missing|float }}", "{{ nothing|abs }}", "{{ [1, 'a']|sort }}",
    "{{ (messages|selectattr('role', 'equalto', 'nobody')|list|first).content }}",
    "{{ 'abc'.index('z') }}", "{{ items.index(99) }}", "{{ ''.split('') }}", "{{ 5|length }}",
    "{% for x in 5 %}{% endfor %}", "{% for x in nothing %}{% endfor %}", "{{ {[1]: 2} }}",
    "{{ raise_exception('custom message') }}", "{{ raise_exception() }}",
    "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "{% macro m(a) %}{% endmacro %}{{ m(b=1) }}",
    "{{ range(1, 2, 0) }}", "{{ 'x'|round }}", "{{ items[::0] }}",
    "{{ d|dictsort(by='nope') }}", "{{ 'a'.join([1]) }}", "{{ 'x'.startswith(1) }}",
    "{{ (messages|selectattr('role'))|length }}", "{{ messages|selectattr('role')|last }}",
    "{{ 5|items|list }}", "{{ messages|map('nosuchfilter')|list }}",
    "{{ items|map(attribute='a')|tojson }}", "{{ 1|indent }}", "{{ none|indent }}",
    "{{ n[1:] }}", "{{ items['a':] }}", "{{ missing[1:] }}", "{{ nothing[:1] }}", "{{ d[1:] }}",
    "{{ '%d' % 'x' }}", "{{ '%s %s' % 'x' }}", "{{ '%s' % (1, 2) }}",
]

SYNTAX_ERRORS = [
    "{{ }}", "{% for %}", "{% for x in y %}", "{% if %}", "{% if true %}", "{{ 'abc }}",
    "{{ (1 }}", "{% endif %}", "{# abc", "{% raw %}x", "{{ 1 + }}", "{% set %}", "{% set x %}",
    "{% endfor %}", "{% else %}", "{% if true %}{% endfor %}", "{{ a b }}", "{{ a.'b' }}",
    "{{ [1, 2 }}", "{{ {'a' 1} }}", "{{ f(a=1, 2) }}", "{{ f(a=1, a=2) }}", "{{ x is }}",
    "{% macro m(a=1, b) %}{% endmacro %}", "{% break %}", "{% for x in y %}{% endfor %}{% continue %}",
    "{{ 1 ]] }}", "{{ ) }}", "{{ @ }}", "{{ x|1 }}", "{% for 1 in x %}{% endfor %}",
    "{% set 1 = 2 %}", "{{ x is defined is defined }}",
    "{% include 'x' %}", "{% extends 'x' %}", "{% import 'x' as y %}",
    "{% from 'x' import y %}", "{% call m() %}{% endcall %}", "{% nosuchtag %}",
    "{{ '\\x4' }}", "{%- if true -%}", "{{ x }", "{% if x }", "{{ 'a' }}{{", "{%", "{{",
]


class Constructs(JinjaComparison):
    def check_all(self, templates, context=CONTEXT):
        for template in templates:
            with self.subTest(template=template):
                self.assert_same(template, {**context, "tools": TOOLS})

    def test_whitespace_control(self):
        self.check_all(WHITESPACE)

    def test_literals(self):
        self.check_all(LITERALS)

    def test_expressions(self):
        self.check_all(EXPRESSIONS)

    def test_methods(self):
        self.check_all(METHODS)

    def test_filters(self):
        self.check_all(FILTERS)

    def test_tests(self):
        self.check_all(TESTS)

    def test_statements(self):
        self.check_all(STATEMENTS)

    def test_undefined(self):
        self.check_all(UNDEFINED)

    def test_runtime_errors_raise_on_both_sides(self):
        for template in RAISES:
            with self.subTest(template=template):
                self.assertEqual(render_jinja(template, CONTEXT)[0], "error")
                self.assertEqual(render_tokenflow(template, CONTEXT)[0], "error")

    def test_syntax_errors_raise_on_both_sides(self):
        for template in SYNTAX_ERRORS:
            with self.subTest(template=template):
                self.assertEqual(render_jinja(template, CONTEXT)[0], "error")
                self.assertEqual(render_tokenflow(template, CONTEXT)[0], "error")


# ---- error messages and limits ------------------------------------------------------------------

class Errors(unittest.TestCase):
    def error_of(self, template, context=None, limits=None):
        status, message = render_tokenflow(template, context or {}, limits)
        self.assertEqual(status, "error", f"{template!r} rendered")
        return message

    def test_unsupported_tags_are_named_with_their_line(self):
        for tag, template in [("include", "a\n\n{% include 'x.jinja' %}"),
                              ("extends", "{% extends 'base' %}"),
                              ("block", "x\n{% block body %}{% endblock %}"),
                              ("import", "{% import 'm' as m %}"),
                              ("call", "{% call f() %}{% endcall %}")]:
            with self.subTest(tag=tag):
                line = template[:template.index("{%")].count("\n") + 1
                self.assertEqual(self.error_of(template),
                                 f"chat template: unsupported tag '{tag}' at line {line}")

    def test_syntax_errors_name_the_problem_and_line(self):
        cases = [
            ("{% for m in messages %}\nx", ["'for'", "line 1", "'endfor'", "at line 2"]),
            ("a\n{% if x %}\n{% endfor %}", ["unexpected 'endfor'", "'if'", "at line 3"]),
            ("{{ 'abc }}", ["unexpected character", "at line 1"]),
            ("\n\n{{ x + }}", ["expected", "at line 3"]),
            ("{# never closed", ["missing end of comment", "at line 1"]),
            ("{% raw %}\nnever closed", ["missing end of raw", "at line 1"]),
            ("{{ x|nosuch }}", ["unknown filter 'nosuch'", "at line 1"]),
            ("{% nosuchtag %}", ["unknown tag 'nosuchtag'", "at line 1"]),
            ("{{ (1 ]", ["unexpected ']'", "expected ')'"]),
            ("{% break %}", ["'break' outside of a loop"]),
        ]
        for template, parts in cases:
            with self.subTest(template=template):
                message = self.error_of(template)
                self.assertTrue(message.startswith("chat template: "), message)
                for part in parts:
                    self.assertIn(part, message)

    def test_runtime_errors_name_the_line(self):
        message = self.error_of("line 1\n{{ 1 / 0 }}")
        self.assertIn("division by zero", message)
        self.assertIn("at line 2", message)
        message = self.error_of("\n\n{{ messages[0].content }}", {"messages": []})
        self.assertIn("at line 3", message)

    def test_raise_exception_message_is_verbatim(self):
        self.assertEqual(self.error_of("{{ raise_exception('Roles must alternate, got ' ~ 3) }}"),
                         "chat template: Roles must alternate, got 3")

    def test_deep_nesting_is_refused_not_crashing(self):
        for template in ["{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
                         "{{ " + "[" * 5000 + "]" * 5000 + " }}",
                         "{{ " + "not " * 5000 + "x }}",
                         "{{ " + "-" * 5000 + "1 }}",
                         "{{ x" + " + x" * 5000 + " }}",
                         "{{ x" + ".a" * 5000 + " }}",
                         "{{ x" + "|trim" * 5000 + " }}",
                         "{% if true %}" * 1000 + "{% endif %}" * 1000,
                         "{% for x in y %}" * 1000 + "{% endfor %}" * 1000]:
            with self.subTest(template=template[:40]):
                self.assertIn("deeper than", self.error_of(template))

    def test_unsupported_constructs_are_named(self):
        for template, words in [
                ("{% for x in y recursive %}{{ loop(x) }}{% endfor %}", "recursive for loop"),
                ("{% autoescape true %}x{% endautoescape %}", "unsupported tag 'autoescape'"),
                ("{{ f(*args) }}", "*args"),
                ("{{ '\\N{BULLET}' }}", "\\N{...}"),
                ("{{ 'x'|wordwrap }}", "unsupported filter 'wordwrap'"),
                ("{{ 99999999999999999999 }}", "too large")]:
            with self.subTest(template=template):
                self.assertIn(words, self.error_of(template))

    def test_runaway_rendering_hits_a_limit(self):
        fast = {"max_output_bytes": 1 << 20, "max_steps": 200000, "max_depth": 200}
        roomy = {"max_output_bytes": 1 << 20, "max_steps": 10 ** 8, "max_depth": 200}
        cases = [
            ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
             fast, "steps"),
            ("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", roomy, "output grows"),
            ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
             "{% endfor %}", roomy, "bytes"),
            ("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}"
             "{% endfor %}", roomy, "items"),
            ("{{ 'x' * 100000000 }}", roomy, "bytes"),
            ("{{ [1] * 100000000 }}", roomy, "items"),
            ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", roomy, "recursion"),
            ("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}"
             "{% endfor %}{{ ns.l }}", roomy, "deeper"),
            ("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", roomy, "deeper"),
            # Within every other limit, 10^10 iterations stop at the time limit.
            ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
             dict(roomy, max_steps=10 ** 15, max_time_ms=100), "longer than 100 ms"),
        ]
        for template, limits, word in cases:
            with self.subTest(template=template):
                self.assertIn(word, self.error_of(template, {}, limits))

    def test_bad_context_is_an_error(self):
        rc, _, err = run_tool({"template": "x", "context": [1, 2]})
        self.assertEqual(rc, 1)
        self.assertIn("must be a JSON object", err)


if __name__ == "__main__":
    unittest.main()
