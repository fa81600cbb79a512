"""Ollama's API (issue 50, item 5): /api/chat and /api/generate whole and as NDJSON, options
mapped onto the sampling parameters, format, the model listings (/api/tags, /api/ps, /api/show,
/api/version), /api/embed and /api/embeddings, name:tag model names, errors in Ollama's shape,
and the official `ollama` npm client. Answers are checked against the same request through the
OpenAI doors (one template, one planner, the same seeded draws): the door only reads and
renders."""

import json
import os
import subprocess
import unittest

from test_server import NODE_MODULES, STORIES_BIN, ServerCase

SCHEMA = {"type": "object", "properties": {"mood": {"enum": ["happy", "sad"]},
                                           "n": {"type": "integer", "minimum": 0,
                                                 "maximum": 9}},
          "required": ["mood", "n"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string",
                                                             "maxLength": 12}},
                   "required": ["city"], "additionalProperties": False}}}


def ndjson(body):
    """The lines of an NDJSON body, each one JSON object; the last is done, no other is."""
    assert body.endswith("\n"), "NDJSON ends with a newline: %r" % body[-40:]
    lines = [json.loads(x) for x in body[:-1].split("\n")]
    assert all(not x["done"] for x in lines[:-1]), lines
    assert lines[-1]["done"] is True, lines[-1]
    return lines


class OllamaCase(ServerCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.model = cls.c.get("/v1/models")[1]["data"][0]["id"]

    def ollama(self, path, body, status=200):
        st, out, text, _ = self.c.post(path, dict({"model": self.model}, **body))
        self.assertEqual(st, status, text)
        return out

    def stream(self, path, body):
        head, raw = self.c.raw_stream(path, dict({"model": self.model}, **body))
        self.assertIn("200", head.split("\r\n")[0])
        self.assertIn("application/x-ndjson", head)
        return ndjson(raw)

    def chat(self, messages, max_tokens, **extra):
        st, out, text, _ = self.c.post("/v1/chat/completions", dict(
            {"model": self.model, "messages": messages, "max_tokens": max_tokens,
             "temperature": 0}, **extra))
        self.assertEqual(st, 200, text)
        return out

    def check_stats(self, line, prompt_tokens, output_tokens):
        self.assertEqual(line["prompt_eval_count"], prompt_tokens)
        self.assertEqual(line["eval_count"], output_tokens)
        self.assertEqual(line["load_duration"], 0)
        for k in ("total_duration", "prompt_eval_duration", "eval_duration"):
            self.assertIsInstance(line[k], int)
            self.assertGreaterEqual(line[k], 0)
        self.assertGreaterEqual(line["total_duration"],
                                line["prompt_eval_duration"] + line["eval_duration"] - 1)
        self.assertRegex(line["created_at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$")


class OllamaTest(OllamaCase):

    def test_chat_is_the_chat_completion_in_ollamas_shape(self):
        conv = [{"role": "system", "content": "Be brief"},
                {"role": "user", "content": "Tell me a story"}]
        whole = self.ollama("/api/chat", {"messages": conv, "stream": False,
                                          "options": {"temperature": 0, "num_predict": 20}})
        ref = self.chat(conv, 20)
        self.assertEqual(whole["model"], self.model)
        self.assertEqual(whole["message"], {"role": "assistant",
                                            "content": ref["choices"][0]["message"]["content"]})
        self.assertEqual(whole["done_reason"],
                         {"length": "length", "stop": "stop"}[ref["choices"][0]["finish_reason"]])
        self.check_stats(whole, ref["usage"]["prompt_tokens"], ref["usage"]["completion_tokens"])
        # Streamed by default: the same text in NDJSON lines, the counts on the last.
        lines = self.stream("/api/chat", {"messages": conv,
                                          "options": {"temperature": 0, "num_predict": 20}})
        self.assertGreater(len(lines), 2)
        self.assertEqual("".join(x["message"]["content"] for x in lines),
                         whole["message"]["content"])
        self.assertTrue(all(x["message"]["role"] == "assistant" for x in lines))
        self.assertEqual(lines[-1]["done_reason"], whole["done_reason"])
        self.check_stats(lines[-1], whole["prompt_eval_count"], whole["eval_count"])
        # name:latest and name:1 are the model (its one version).
        for name in (self.model + ":latest", self.model + ":1"):
            again = self.ollama("/api/chat", {"model": name, "messages": conv, "stream": False,
                                              "options": {"temperature": 0, "num_predict": 20}})
            self.assertEqual((again["model"], again["message"]), (name, whole["message"]))

    def test_generate_renders_the_prompt_as_a_user_turn_or_sends_it_raw(self):
        opts = {"temperature": 0, "num_predict": 16}
        templated = self.ollama("/api/generate", {"prompt": "Tell me a story", "system": "Be brief",
                                                  "stream": False, "options": opts})
        ref = self.chat([{"role": "system", "content": "Be brief"},
                         {"role": "user", "content": "Tell me a story"}], 16)
        self.assertEqual(templated["response"], ref["choices"][0]["message"]["content"])
        self.check_stats(templated, ref["usage"]["prompt_tokens"],
                         ref["usage"]["completion_tokens"])
        raw = self.ollama("/api/generate", {"prompt": "Once upon a time", "raw": True,
                                            "stream": False, "options": opts})
        st, comp, text, _ = self.c.post("/v1/completions", {
            "model": self.model, "prompt": "Once upon a time", "max_tokens": 16,
            "temperature": 0})
        self.assertEqual(st, 200, text)
        self.assertEqual(raw["response"], comp["choices"][0]["text"])
        # context: the prompt's tokens, then the answer's.
        ids = self.c.post("/tokenize", {"model": self.model, "prompt": "Once upon a time"})[1]
        self.assertEqual(raw["context"][:ids["count"]], ids["tokens"])
        self.assertEqual(len(raw["context"]), raw["prompt_eval_count"] + raw["eval_count"])
        lines = self.stream("/api/generate", {"prompt": "Once upon a time", "raw": True,
                                              "options": opts})
        self.assertEqual("".join(x["response"] for x in lines), raw["response"])
        self.assertEqual(lines[-1]["context"], raw["context"])
        # Without num_predict a raw prompt runs to the end of its text or the context, not 16.
        long = self.ollama("/api/generate", {"prompt": "Once upon a time", "raw": True,
                                             "stream": False, "options": {"temperature": 0}})
        self.assertGreater(long["eval_count"], 16)

    def test_options_map_onto_the_sampling_parameters(self):
        conv = [{"role": "user", "content": "Tell me a story"}]
        # A seeded draw is the chat completion's with the same seed and parameters.
        seeded = self.ollama("/api/chat", {"messages": conv, "stream": False, "options": {
            "temperature": 0.9, "top_k": 20, "top_p": 0.9, "min_p": 0.05, "seed": 11,
            "repeat_penalty": 1.2, "presence_penalty": 0.5, "num_predict": 24}})
        ref = self.chat(conv, 24, temperature=0.9, top_k=20, top_p=0.9, min_p=0.05, seed=11,
                        repetition_penalty=1.2, presence_penalty=0.5)
        self.assertEqual(seeded["message"]["content"], ref["choices"][0]["message"]["content"])
        # Ollama's runner options are accepted (and change nothing).
        same = self.ollama("/api/chat", {"messages": conv, "stream": False, "options": {
            "temperature": 0.9, "top_k": 20, "top_p": 0.9, "min_p": 0.05, "seed": 11,
            "repeat_penalty": 1.2, "presence_penalty": 0.5, "num_predict": 24, "num_gpu": 99,
            "num_thread": 2, "use_mmap": True, "mirostat": 0, "repeat_last_n": -1}})
        self.assertEqual(same["message"], seeded["message"])
        # stop cuts the answer before the stop string.
        whole = self.ollama("/api/chat", {"messages": conv, "stream": False,
                                          "options": {"temperature": 0, "num_predict": 40}})
        words = whole["message"]["content"].split()
        self.assertGreater(len(words), 4, whole)
        stop = " " + words[3]
        cut = self.ollama("/api/chat", {"messages": conv, "stream": False, "options": {
            "temperature": 0, "num_predict": 40, "stop": [stop]}})
        text = whole["message"]["content"]
        self.assertEqual(cut["message"]["content"], text[:text.index(stop)])
        self.assertEqual(cut["done_reason"], "stop")
        # num_ctx: the prompt and its answer fit it.
        n = whole["prompt_eval_count"]
        small = self.ollama("/api/chat", {"messages": conv, "stream": False, "options": {
            "temperature": 0, "num_ctx": n + 3}})
        self.assertEqual((small["eval_count"], small["done_reason"]), (3, "length"))
        self.assertTrue(text.startswith(small["message"]["content"]))

    def test_logprobs_are_the_chat_doors(self):
        conv = [{"role": "user", "content": "Tell me a story"}]
        ref = self.chat(conv, 10, logprobs=True, top_logprobs=2)["choices"][0]["logprobs"]
        body = {"messages": conv, "logprobs": True, "top_logprobs": 2,
                "options": {"temperature": 0, "num_predict": 10}}
        whole = self.ollama("/api/chat", dict(body, stream=False))
        self.assertEqual(whole["logprobs"], ref["content"])
        lines = self.stream("/api/chat", body)
        self.assertEqual([lp for x in lines for lp in x.get("logprobs", [])], ref["content"])
        # Each line's logprobs are those of the tokens behind its text.
        for x in lines[:-1]:
            self.assertEqual("".join(lp["token"] for lp in x["logprobs"]),
                             x["message"]["content"])

    def test_format_holds_the_answer_to_json_or_a_schema(self):
        conv = [{"role": "user", "content": "How are you?"}]
        out = self.ollama("/api/chat", {"messages": conv, "stream": False, "format": SCHEMA,
                                        "options": {"temperature": 0.7, "seed": 3}})
        obj = json.loads(out["message"]["content"])
        self.assertIn(obj["mood"], ("happy", "sad"))
        self.assertTrue(0 <= obj["n"] <= 9)
        self.assertEqual(out["done_reason"], "stop")
        gen = self.ollama("/api/generate", {"prompt": "Say something", "stream": False,
                                            "format": "json",
                                            "options": {"temperature": 0.7, "seed": 3,
                                                        "num_predict": 400}})
        if gen["done_reason"] == "stop":
            self.assertIsInstance(json.loads(gen["response"]), dict)
        else:  # cut by num_predict: a JSON object's beginning
            self.assertTrue(gen["response"].lstrip().startswith("{"), gen)

    def test_listings_show_the_models_as_name_tag(self):
        st, tags, text, _ = self.c.get("/api/tags")
        self.assertEqual(st, 200, text)
        names = [m["name"] for m in tags["models"]]
        self.assertEqual(names, [self.model + ":latest"])
        m = tags["models"][0]
        self.assertEqual(m["model"], m["name"])
        self.assertRegex(m["digest"], r"^[0-9a-f]{64}$")
        self.assertEqual(m["size"], os.path.getsize(STORIES_BIN))
        self.assertEqual(m["details"]["format"], "llama2c")
        self.assertEqual(m["details"]["family"], "llama")
        self.assertEqual(m["details"]["quantization_level"], "F32")
        # stories260K: 260K in its name, 292,800 parameters counted with the classifier.
        self.assertRegex(m["details"]["parameter_size"], r"^2\d\dK$")
        st, ps, text, _ = self.c.get("/api/ps")
        self.assertEqual(st, 200, text)
        self.assertEqual([x["name"] for x in ps["models"]], names)
        self.assertEqual(ps["models"][0]["context_length"], 512)
        show = self.ollama("/api/show", {"model": self.model + ":latest"})
        self.assertEqual(show["details"], m["details"])
        self.assertEqual(show["model_info"]["general.architecture"], "llama")
        self.assertEqual(show["model_info"]["llama.context_length"], 512)
        self.assertEqual(show["model_info"]["llama.embedding_length"], 64)
        self.assertIn("[INST]", show["template"])  # the model's (llama 2) chat template
        self.assertIn("completion", show["capabilities"])
        self.assertEqual(self.c.get("/api/version")[1], {"version": "0.12.0"})

    def test_embed_is_the_embeddings_door_in_ollamas_shape(self):
        st, ref, text, _ = self.c.post("/v1/embeddings", {"model": self.model,
                                                          "input": ["hello", "a cat"]})
        self.assertEqual(st, 200, text)
        out = self.ollama("/api/embed", {"input": ["hello", "a cat"]})
        self.assertEqual(len(out["embeddings"]), 2)
        for got, want in zip(out["embeddings"], ref["data"]):
            self.assertEqual(len(got), len(want["embedding"]))
            for a, b in zip(got, want["embedding"]):
                self.assertAlmostEqual(a, b, places=6)
        self.assertEqual(out["prompt_eval_count"], ref["usage"]["prompt_tokens"])
        one = self.ollama("/api/embed", {"input": "hello"})
        self.assertEqual(one["embeddings"][0], out["embeddings"][0])
        st, raw, text, _ = self.c.post("/v1/embeddings", {"model": self.model, "input": "hello",
                                                          "normalize": False})
        legacy = self.ollama("/api/embeddings", {"prompt": "hello"})
        for a, b in zip(legacy["embedding"], raw["data"][0]["embedding"]):
            self.assertAlmostEqual(a, b, places=5)
        # truncate (the default) cuts an input past the context; false refuses it.
        long = "once upon a time " * 400
        self.assertEqual(len(self.ollama("/api/embed", {"input": long})["embeddings"]), 1)
        err = self.ollama("/api/embed", {"input": long, "truncate": False}, status=400)
        self.assertIn("context length", err["error"])

    def test_an_empty_request_loads_the_model(self):
        out = self.ollama("/api/generate", {"stream": False})
        self.assertEqual((out["response"], out["done"], out["done_reason"]), ("", True, "load"))
        out = self.ollama("/api/chat", {"messages": [], "stream": False})
        self.assertEqual((out["message"]["content"], out["done_reason"]), ("", "load"))
        out = self.ollama("/api/chat", {"model": "nope", "messages": []}, status=404)
        self.assertIn("nope", out["error"])

    def test_bad_requests_are_ollama_errors_naming_the_problem(self):
        conv = [{"role": "user", "content": "hi"}]
        for path, body, status, words in (
                ("/api/chat", {"messages": conv, "model": "nope:latest"}, 404, "nope"),
                ("/api/chat", {"messages": conv, "model": self.model + ":bogus"}, 404, "bogus"),
                ("/api/chat", {"messages": conv, "bogus": 1}, 400, "bogus"),
                ("/api/chat", {"messages": "hi"}, 400, "messages"),
                ("/api/chat", {"messages": [{"role": "robot", "content": "x"}]}, 400, "role"),
                ("/api/chat", {"messages": [{"role": "user", "content": "x",
                                             "images": ["aGk="]}]}, 400, "images"),
                ("/api/chat", {"messages": conv, "options": {"bogus": 1}}, 400, "bogus"),
                ("/api/chat", {"messages": conv, "options": {"temperature": "hot"}}, 400,
                 "temperature"),
                ("/api/chat", {"messages": conv, "options": {"num_predict": 0}}, 400,
                 "num_predict"),
                ("/api/chat", {"messages": conv, "options": {"mirostat": 2}}, 400, "mirostat"),
                ("/api/chat", {"messages": conv, "options": {"repeat_penalty": 1.3,
                                                             "repeat_last_n": 64}}, 400,
                 "repeat_last_n"),
                ("/api/chat", {"messages": conv, "options": {"num_ctx": 100000}}, 400, "num_ctx"),
                ("/api/chat", {"messages": conv, "format": "yaml"}, 400, "format"),
                ("/api/chat", {"messages": conv, "format": {"type": "bogus"}}, 400, "format"),
                ("/api/chat", {"messages": conv, "think": "very"}, 400, "think"),
                ("/api/chat", {"messages": conv, "tools": [{"type": "web"}]}, 400, "tools"),
                ("/api/chat", {"messages": conv, "stream": "yes"}, 400, "stream"),
                ("/api/generate", {"prompt": "x", "suffix": "y"}, 400, "suffix"),
                ("/api/generate", {"prompt": "x", "template": "{{ .Prompt }}"}, 400,
                 "template"),
                ("/api/generate", {"prompt": "x", "context": [1, 2]}, 400, "context"),
                ("/api/generate", {"prompt": 5}, 400, "prompt"),
                ("/api/generate", {"prompt": "x" * 20000, "raw": True}, 400, "context length"),
                ("/api/embed", {"input": 5}, 400, "input"),
                ("/api/embed", {"input": []}, 400, "input"),
                ("/api/embed", {"input": "x", "dimensions": 3}, 400, "dimensions"),
                ("/api/show", {"model": "nope"}, 404, "nope"),
                ("/api/pull", {"model": "llama3"}, 501, "not supported")):
            st, out, text, _ = self.c.post(path, dict({"model": self.model}, **body))
            self.assertEqual(st, status, (path, body, text))
            self.assertEqual(list(out), ["error"], text)
            self.assertIn(words, out["error"], (path, body))
        st, out, text, _ = self.c.request("POST", "/api/chat", raw="{oops")
        self.assertEqual((st, list(out)), (400, ["error"]), text)
        st, out, text, _ = self.c.get("/api/chat")
        self.assertEqual(st, 405, text)


class OllamaToolsTest(OllamaCase):
    """Tools through ChatML with calls parsed as JSON objects: a schema in `format` makes the
    tiny model write a call (Ollama has no tool_choice), which comes back as tool_calls; the call
    and its result go back through the template in the next turn. Then the official client."""
    server_args = ("--threads", "1", "--chat-template", "chatml", "--tool-call-parser", "json")
    CALL = {"type": "object", "properties": {
        "name": {"const": "get_weather"},
        "arguments": WEATHER["function"]["parameters"]},
        "required": ["name", "arguments"], "additionalProperties": False}

    def test_show_names_the_operators_template(self):
        show = self.ollama("/api/show", {"model": self.model})
        self.assertIn("<|im_start|>", show["template"])  # the operator's template
        # ChatML writes no tool definitions and no think blocks.
        self.assertNotIn("tools", show["capabilities"])
        self.assertNotIn("thinking", show["capabilities"])

    def test_a_call_is_tool_calls_and_its_result_a_turn(self):
        conv = [{"role": "user", "content": "Weather in Paris?"}]
        out = self.ollama("/api/chat", {"messages": conv, "tools": [WEATHER], "stream": False,
                                        "format": self.CALL, "options": {"temperature": 0}})
        calls = out["message"]["tool_calls"]
        self.assertEqual(len(calls), 1, out)
        fn = calls[0]["function"]
        self.assertEqual((fn["name"], fn["index"]), ("get_weather", 0))
        self.assertIsInstance(fn["arguments"]["city"], str)
        self.assertEqual(out["message"]["content"], "")
        lines = self.stream("/api/chat", {"messages": conv, "tools": [WEATHER],
                                          "format": self.CALL, "options": {"temperature": 0}})
        streamed = [c for x in lines for c in x["message"].get("tool_calls", [])]
        self.assertEqual([c["function"] for c in streamed], [fn])
        # The next turn renders as the same conversation through the chat door does.
        turn = conv + [{"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": fn["name"], "arguments": fn["arguments"]}}]},
            {"role": "tool", "tool_name": "get_weather", "content": "sunny, 21 C"}]
        follow = self.ollama("/api/chat", {"messages": turn, "tools": [WEATHER], "stream": False,
                                           "options": {"temperature": 0, "num_predict": 4}})
        openai_turn = conv + [
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_0", "type": "function", "function": {
                    "name": fn["name"], "arguments": json.dumps(fn["arguments"])}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": "sunny, 21 C"}]
        ref = self.chat(openai_turn, 4, tools=[WEATHER])
        self.assertEqual(follow["prompt_eval_count"], ref["usage"]["prompt_tokens"])
        self.assertEqual(follow["message"]["content"], ref["choices"][0]["message"]["content"])

    def test_the_ollama_npm_client(self):
        """list, show, chat (whole and streamed), generate, embed and a tool call through the
        official client (tests/js/ollama_client.mjs)."""
        js = os.path.dirname(NODE_MODULES)
        env = dict(os.environ, TF_HOST="http://127.0.0.1:%d" % self.c.port, TF_MODEL=self.model)
        p = subprocess.run(["node", os.path.join(js, "ollama_client.mjs")], capture_output=True,
                           text=True, timeout=120, env=env, cwd=js)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("all ollama client checks passed", p.stdout)


class OllamaThinkingTest(OllamaCase):
    """Qwen3's template (tool definitions, think blocks): /api/show says so, and `think` is
    the template's enable_thinking (false closes an empty think block in the prompt)."""
    server_args = ("--threads", "1", "--chat-template", "qwen3")

    def test_think_is_the_templates_enable_thinking(self):
        show = self.ollama("/api/show", {"model": self.model})
        self.assertIn("tools", show["capabilities"])
        self.assertIn("thinking", show["capabilities"])
        conv = [{"role": "user", "content": "Tell me a story"}]
        counts = {}
        for think in (True, False):
            out = self.ollama("/api/chat", {"messages": conv, "think": think, "stream": False,
                                            "options": {"temperature": 0, "num_predict": 4}})
            ids = self.c.post("/tokenize", {"model": self.model, "messages": conv,
                                            "chat_template_kwargs": {"enable_thinking": think}})
            self.assertEqual(out["prompt_eval_count"], ids[1]["count"], think)
            counts[think] = out["prompt_eval_count"]
        self.assertGreater(counts[False], counts[True])  # "<think>\n\n</think>\n\n" added
        # gpt-oss's levels are accepted as thinking on.
        high = self.ollama("/api/chat", {"messages": conv, "think": "high", "stream": False,
                                         "options": {"temperature": 0, "num_predict": 4}})
        self.assertEqual(high["prompt_eval_count"], counts[True])


class OllamaOpenThinkTest(OllamaCase):
    """A template whose prompt opens the think block: the tiny model's answer is all reasoning,
    which comes back as message.thinking (response's thinking in generate), whole and streamed,
    as the chat door's reasoning_content."""
    server_args = ("--threads", "1", "--chat-template",
                   "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                   "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant"
                   "\n<think>\n{% endif %}")

    def test_the_think_block_is_thinking(self):
        conv = [{"role": "user", "content": "Tell me a story"}]
        ref = self.chat(conv, 12)["choices"][0]["message"]
        self.assertTrue(ref["reasoning_content"])
        opts = {"temperature": 0, "num_predict": 12}
        whole = self.ollama("/api/chat", {"messages": conv, "stream": False, "options": opts})
        self.assertEqual(whole["message"]["thinking"], ref["reasoning_content"])
        self.assertEqual(whole["message"]["content"], ref["content"] or "")
        lines = self.stream("/api/chat", {"messages": conv, "options": opts})
        self.assertEqual("".join(x["message"].get("thinking", "") for x in lines),
                         ref["reasoning_content"])
        gen = self.ollama("/api/generate", {"prompt": "Tell me a story", "stream": False,
                                            "options": opts})
        self.assertEqual(gen["thinking"], ref["reasoning_content"])


if __name__ == "__main__":
    unittest.main()
