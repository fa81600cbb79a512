"""Structured output (issue 24): JSON schemas, regular expressions and choices enforced while
decoding, through OpenAI's response_format, vLLM's guided_* / structured_outputs, llama.cpp's
json_schema, a batch file and gRPC. Every output is parsed and validated by an independent
validator (Debian's python3-jsonschema, with its format checker; Python's `re` for patterns) on
stories260K (a real trained model with a 512-token vocabulary) and on a random GPT-2-shaped model
with GPT-2's real 50,257-token vocabulary (tokens spanning several JSON symbols).

Env: TOKENFLOW_BIN, TF_SHARED_DIR, TF_REFERENCE_DIR.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import jsonschema
import numpy as np

from test_server import BIN, STORIES_BIN, ServerCase, sse_events

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("TF_REFERENCE_DIR",
                                  os.path.join(os.path.dirname(HERE), "reference")))
import make_checkpoints  # noqa: E402
import safetensors_io  # noqa: E402

SHARED = os.environ.get("TF_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))

# Schemas whose every instance is short (bounded strings, counts and depth), so that any
# sampled output ends well inside max_tokens on any machine.
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"enum": ["cat", "dog", "sun"]}, "maxItems": 3},
    },
    "required": ["name", "age"],
}
ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "lines": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
            "type": "object",
            "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-\\d{2}$"},
                           "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
            "required": ["sku", "qty"], "additionalProperties": False}},
        "shipped": {"type": "boolean"},
        "on": {"type": "string", "format": "date"},
        "price": {"type": "number", "minimum": 0, "maximum": 100},
    },
    "required": ["id", "lines", "shipped", "on", "price"],
    "additionalProperties": False,
}
SHAPES = {
    "$defs": {
        "circle": {"type": "object", "properties": {"kind": {"const": "circle"},
                                                     "r": {"type": "integer", "minimum": 1,
                                                           "maximum": 50}},
                   "required": ["kind", "r"]},
        "square": {"type": "object", "properties": {"kind": {"const": "square"},
                                                     "side": {"type": "integer", "maximum": 9,
                                                              "minimum": -9}},
                   "required": ["kind", "side"]},
    },
    "type": "object",
    "properties": {
        "shape": {"oneOf": [{"$ref": "#/$defs/circle"}, {"$ref": "#/$defs/square"}]},
        "color": {"enum": ["red", "green", None, 7]},
        "note": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]},
        "when": {"type": "string", "format": "date-time"},
    },
    "required": ["shape", "color", "note"],
}
TUPLE = {"type": "array", "prefixItems": [{"type": "string", "format": "date"},
                                          {"type": "integer", "minimum": -5, "maximum": 5},
                                          {"type": "boolean"}],
         "items": False, "minItems": 2}
# Recursive: a list as nested nodes, each with an optional next one (depth is the model's
# choice; the grammar can always close).
CHAIN = {"$defs": {"node": {"type": "object",
                            "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
                                           "next": {"$ref": "#/$defs/node"}},
                            "required": ["v"]}},
         "$ref": "#/$defs/node"}
SCHEMAS = {"person": PERSON, "order": ORDER, "shapes": SHAPES, "tuple": TUPLE, "chain": CHAIN}


def validate(test, schema, text, label):
    try:
        value = json.loads(text)
    except ValueError as e:
        test.fail("%s: not JSON (%s): %r" % (label, e, text))
    errors = list(jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.FormatChecker()).iter_errors(value))
    test.assertEqual(errors, [], "%s: %r" % (label, text))
    return value


def close_chain(text):
    """A CHAIN output cut by max_tokens, cut back to its last whole "v" and closed."""
    ends = [m.end() for m in re.finditer(r'"v":\d', text)]
    if not ends:
        return text
    head = text[:ends[-1]]
    return head + "}" * (head.count("{") - head.count("}"))


def compact(text):
    """True if no whitespace stands outside JSON strings."""
    in_string = escaped = False
    for c in text:
        if in_string:
            escaped = not escaped and c == "\\"
            if c == '"' and not escaped:
                in_string = False
        elif c == '"':
            in_string = True
        elif c in " \t\r\n":
            return False
    return True


class StructuredOutputTest(ServerCase):
    def post(self, body, path="/v1/chat/completions", status=200):
        s, b, text, _ = self.c.post(path, body)
        self.assertEqual(s, status, text)
        return b

    def chat(self, **kw):
        return dict({"messages": [{"role": "user", "content": "Tell me about a cat."}],
                     "max_tokens": 420}, **kw)

    def test_every_schema_validates_through_each_field(self):
        for name, schema in SCHEMAS.items():
            for body in (
                    self.chat(response_format={"type": "json_schema", "json_schema": {
                        "name": name, "schema": schema, "strict": True}},
                        temperature=1.0, n=3, seed=11),
                    self.chat(guided_json=schema, temperature=0.7, seed=3),
                    self.chat(json_schema=schema, temperature=0),
                    self.chat(structured_outputs={"json": schema}, temperature=1.3, seed=5)):
                b = self.post(body)
                for ch in b["choices"]:
                    text = ch["message"]["content"]
                    self.assertTrue(compact(text), text)
                    if name == "chain" and ch["finish_reason"] == "length":
                        # Recursion has no bound a schema can state: the model may nest past
                        # max_tokens. What it wrote must still be a prefix of an instance.
                        validate(self, schema, close_chain(text), name + " (cut)")
                        continue
                    self.assertEqual(ch["finish_reason"], "stop", text)
                    validate(self, schema, text, name)
            b = self.post({"prompt": "Once upon a time", "max_tokens": 420, "temperature": 0.9,
                           "seed": 1, "n": 2, "guided_json": json.dumps(schema)},
                          path="/v1/completions")
            for ch in b["choices"]:
                text = ch["text"]
                if name == "chain" and ch["finish_reason"] == "length":
                    text = close_chain(text)
                else:
                    self.assertEqual(ch["finish_reason"], "stop", text)
                validate(self, schema, text, name + " (completions)")

    def test_properties_come_in_the_schema_order(self):
        schema = {"type": "object", "properties": {"zeta": {"type": "boolean"},
                                                   "alpha": {"type": "boolean"}},
                  "required": ["zeta", "alpha"]}
        text = self.post(self.chat(guided_json=schema, temperature=0))["choices"][0][
            "message"]["content"]
        self.assertLess(text.index('"zeta"'), text.index('"alpha"'), text)

    def test_json_object_regex_and_choice(self):
        b = self.post(self.chat(response_format={"type": "json_object"}, temperature=1.0, n=2,
                                seed=9, max_tokens=300))
        for ch in b["choices"]:
            if ch["finish_reason"] == "stop":
                self.assertIsInstance(json.loads(ch["message"]["content"]), dict)
        pattern = r"(yes|no), [a-z]{2,6}( [0-9]{1,3})?\."
        for body in (self.chat(guided_regex=pattern, temperature=1.0, n=4, seed=2),
                     self.chat(structured_outputs={"regex": pattern}, temperature=0)):
            for ch in self.post(body)["choices"]:
                self.assertIsNotNone(re.fullmatch(pattern, ch["message"]["content"]),
                                     ch["message"]["content"])
        choices = ["a small red ball", "the moon", "Lily"]
        for body in (self.chat(guided_choice=choices, temperature=1.0, n=4, seed=4),
                     self.chat(structured_outputs={"choice": choices}, temperature=0)):
            for ch in self.post(body)["choices"]:
                self.assertIn(ch["message"]["content"], choices)

    def test_whitespace_pattern(self):
        schema = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99},
                  "minItems": 3, "maxItems": 3}
        b = self.post(self.chat(guided_json=schema, guided_whitespace_pattern="[ ]{1}",
                                temperature=0))
        text = b["choices"][0]["message"]["content"]
        validate(self, schema, text, "whitespace")
        self.assertTrue(text.startswith("[ ") and text.endswith(" ]"), text)

    def test_streaming_n_best_of_and_the_prefix_cache_agree(self):
        body = self.chat(response_format={"type": "json_schema",
                                          "json_schema": {"name": "p", "schema": PERSON}},
                         temperature=0.9, seed=21, n=2)
        once = self.post(body)
        head, raw = self.c.raw_stream("/v1/chat/completions", dict(body, stream=True))
        texts = ["", ""]
        for e in sse_events(raw):
            for ch in e.get("choices", []):
                texts[ch["index"]] += ch["delta"].get("content") or ""
        self.assertEqual(texts, [ch["message"]["content"] for ch in once["choices"]])
        again = self.post(body)  # the prompt now comes from the prefix cache
        self.assertEqual(again["choices"], once["choices"])
        self.assertGreater(again["usage"].get("prompt_tokens_details", {}).get(
            "cached_tokens", 1), 0)
        best = self.post(self.chat(guided_json=ORDER, temperature=1.0, seed=8, n=1, best_of=3))
        validate(self, ORDER, best["choices"][0]["message"]["content"], "best_of")

    def test_bad_constraints_are_400_naming_the_field(self):
        cases = [
            (self.chat(response_format={"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "string", "not": {}}}}),
             "response_format", "'not' is not supported"),
            (self.chat(guided_json={"type": "object", "properties": {
                "a": {"type": "integer", "multipleOf": 2}}}),
             "guided_json", "#/properties/a: 'multipleOf' is not supported"),
            (self.chat(guided_regex="(a)\\1"), "guided_regex", "backreferences"),
            (self.chat(guided_json="{not json"), "guided_json", "not valid JSON"),
            (self.chat(guided_choice=[]), "guided_choice", "non-empty list"),
            (self.chat(response_format={"type": "yaml"}), "response_format", "'yaml'"),
            (self.chat(guided_regex="a", guided_choice=["a"]), "guided_choice",
             "give one structured output"),
            (self.chat(structured_outputs={"structural_tag": "x"}), "structured_outputs",
             "structural_tag"),
            (self.chat(guided_regex="a", guided_whitespace_pattern=" "),
             "guided_whitespace_pattern", "JSON output only"),
            (self.chat(guided_json={"type": "string", "format": "hostname"}), "guided_json",
             "format 'hostname'"),
            (self.chat(guided_json=PERSON, use_beam_search=True), "guided_json",
             "beam search"),
        ]
        for body, field, message in cases:
            b = self.post(body, status=400)
            self.assertEqual(b["error"]["param"], field, b)
            self.assertIn(message, b["error"]["message"])

    def test_batch_file(self):
        with tempfile.TemporaryDirectory() as d:
            inp, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
            with open(inp, "w") as f:
                for i, name in enumerate(("order", "shapes")):
                    f.write(json.dumps({"custom_id": name, "url": "/v1/chat/completions",
                                        "body": self.chat(temperature=1.0, seed=i,
                                                          response_format={
                                                              "type": "json_schema",
                                                              "json_schema": {
                                                                  "name": name,
                                                                  "schema": SCHEMAS[name]}})})
                            + "\n")
            r = subprocess.run([BIN, "generate", "-m", STORIES_BIN, "--input-file", inp,
                                "--output-file", out], capture_output=True, text=True,
                               timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            with open(out) as f:
                lines = [json.loads(line) for line in f]
        self.assertEqual(len(lines), 2)
        for line in lines:
            msg = line["response"]["body"]["choices"][0]["message"]["content"]
            validate(self, SCHEMAS[line["custom_id"]], msg, "batch " + line["custom_id"])


class LargeVocabularyTest(ServerCase):
    """A random GPT-2-shaped model over GPT-2's real vocabulary: near-uniform choices among
    50,257 tokens, many of which span several JSON symbols (`":"`, `"},{"`, ` 42,`)."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tf_so_")
        cfg = make_checkpoints._scaled(make_checkpoints._gpt2_config("F32"), vocab_size=50257,
                                       bos_token_id=50256, eos_token_id=50256, n_ctx=512,
                                       n_positions=512, n_layer=2)
        w = make_checkpoints._gpt2_weights(cfg, np.random.default_rng(3), False)
        with open(os.path.join(cls.dir, "config.json"), "w") as f:
            json.dump(cfg, f)
        safetensors_io.save(os.path.join(cls.dir, "model.safetensors"), w, "F32")
        shutil.copy(os.path.join(SHARED, "tokenizers", "gpt2", "tokenizer.json"), cls.dir)
        cls.model_dir, cls.model_flags = cls.dir, ("--model", cls.dir)
        super().setUpClass()

    def test_schemas_validate(self):
        for name in ("person", "shapes", "tuple"):
            schema = SCHEMAS[name]
            s, b, text, _ = self.c.post("/v1/completions", {
                "prompt": "JSON:", "max_tokens": 300, "temperature": 1.0, "seed": 17, "n": 2,
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": name, "schema": schema}}})
            self.assertEqual(s, 200, text)
            for ch in b["choices"]:
                self.assertEqual(ch["finish_reason"], "stop", ch["text"])
                validate(self, schema, ch["text"], name + " (gpt2 vocabulary)")
        s, b, text, _ = self.c.post("/v1/completions", {
            "prompt": "x", "max_tokens": 40, "temperature": 1.0, "seed": 5, "n": 3,
            "guided_regex": r"[a-z]{3} \d{2}!"})
        self.assertEqual(s, 200, text)
        for ch in b["choices"]:
            self.assertIsNotNone(re.fullmatch(r"[a-z]{3} \d{2}!", ch["text"]), ch["text"])


if __name__ == "__main__":
    unittest.main()
