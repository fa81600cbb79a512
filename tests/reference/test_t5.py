"""T5 through the engine (issue 51): an encoder-decoder against the independent numpy T5.

Random-weight T5 checkpoints (make_checkpoints: v1.0 with ReLU and tied embeddings, v1.1 with
gated GELU and its own LM head; position buckets, heads and layer counts chosen so that every
part binds) run as batch jobs through `tokenflow generate --input-file`: the prompt is the
encoder's input, the decoder starts from decoder_start_token_id. Each request's greedy tokens
and their log-probabilities must be numpy's; the same when all requests run at once in a KV
cache too small for them (preemption frees a sequence's cross-attention blocks too: it is
encoded again), with n = 2 (forks share the encoder's K/V), and the top-5 alternatives' values.

Needs TOKENFLOW_BIN (the tokenflow binary).
"""

import json
import os
import re
import subprocess
import tempfile
import unittest

import numpy as np

import make_checkpoints
import np_model

SPECIAL = {"<pad>": 0, "</s>": 1, "<unk>": 2}
STEPS = 20  # past a block of 16: decoders grow while the small cache is full


def write_vocab(path, n):
    """A llama2.c tokenizer.bin whose every piece is its own word (" t<id>"), so that the text of
    an output names its token ids."""
    make_checkpoints.write_llama2c_vocab(
        path, [b"<pad>", b"</s>", b"<unk>"] + [(" t%d" % i).encode() for i in range(3, n)])


def ids_of(pieces):
    out = []
    for p in pieces:
        m = re.fullmatch(r" t(\d+)", p)
        if m is None:
            raise AssertionError("token %r is not a word of the test vocabulary" % p)
        out.append(int(m.group(1)))
    return out


class T5Engine(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.bin = os.environ.get("TOKENFLOW_BIN")
        if not cls.bin:
            raise unittest.SkipTest("TOKENFLOW_BIN is not set")
        cls.tmp = tempfile.TemporaryDirectory(prefix="tf_t5_")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_job(self, model, requests, concurrency, kv_memory):
        d = self.tmp.name
        inp, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
        if os.path.exists(out):
            os.remove(out)
        with open(inp, "w") as f:
            for r in requests:
                f.write(json.dumps(r) + "\n")
        cmd = [self.bin, "generate", "-m", model, "--input-file", inp, "--output-file", out,
               "--concurrency", str(concurrency), "--kv-cache-memory", kv_memory, "-v"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, "%s\n%s" % (" ".join(cmd), r.stderr[-2000:]))
        m = re.search(r"engine: (\d+) preemptions", r.stderr)
        with open(out) as f:
            bodies = [json.loads(line)["response"]["body"] for line in f]
        return bodies, int(m.group(1))

    def check(self, kind):
        model = make_checkpoints.write_checkpoint(os.path.join(self.tmp.name, kind), kind, seed=11)
        cfg = make_checkpoints.KINDS[kind]("F32")
        write_vocab(os.path.join(model, "tokenizer.bin"), cfg["vocab_size"])
        ref = np_model.load_hf(model)
        rng = np.random.default_rng(5)
        # Encoder inputs of 1 to 45 tokens (past the 20 of the buckets' max distance).
        prompts = [[int(t) for t in rng.integers(3, cfg["vocab_size"], n)]
                   for n in (1, 3, 9, 17, 30, 45)]
        want = [ref.greedy(p, STEPS) for p in prompts]
        requests = [{"prompt": p, "max_tokens": STEPS, "temperature": 0, "ignore_eos": True}
                    for p in prompts]

        # Alone: each request's tokens, their log-probabilities and the top-5 alternatives'
        # values (the whole distribution, not only its argmax) against numpy's.
        for i, p in enumerate(prompts):
            r = subprocess.run(
                [self.bin, "generate", "-m", model, "--prompt-ids", ",".join(map(str, p)),
                 "-n", str(STEPS), "-t", "0", "--ignore-eos", "--logprobs", "5", "--no-echo"],
                capture_output=True, text=True, timeout=600)
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            steps = [m for m in (re.match(r"\s*(\d+)\s+\S+\s+(-?[\d.]+)(.*)$", line)
                                 for line in r.stderr.splitlines()) if m]
            self.assertEqual([int(m.group(1)) for m in steps], want[i][0], "%s request %d" % (kind, i))
            # 4e-4: float32's noise in this random-weight T5 (unscaled attention over large
            # values: one ulp more or less in a softmax's exponentials moves a log-probability by
            # ~1e-4; 1.7-2.8e-4 measured across the kernel tables), printed to 4 decimals.
            np.testing.assert_allclose([float(m.group(2)) for m in steps], want[i][1], atol=4e-4,
                                       err_msg="%s request %d" % (kind, i))
            logits = ref.logits(p, [cfg["decoder_start_token_id"]] + want[i][0][:-1])
            for step, m in enumerate(steps):
                row = logits[step] - logits[step].max()
                row = row - np.log(np.exp(row).sum())
                alts = re.findall(r"(<pad>|</s>|<unk>|t\d+):(-?[\d.]+)", m.group(3))
                self.assertEqual(len(alts), 5, m.group(0))
                for tok, value in alts:
                    tid = SPECIAL[tok] if tok in SPECIAL else int(tok[1:])
                    self.assertAlmostEqual(float(value), row[tid], delta=4e-4)

        def texts(bodies, n=1):
            out = []
            for body in bodies:
                self.assertEqual(len(body["choices"]), n)
                out.append([ids_of(c["text"].split(" ")[1:] and
                                   [" " + w for w in c["text"].split(" ")[1:]])
                            for c in body["choices"]])
            return out

        # All at once in the smallest cache (1 MiB: ~60 blocks of 16 positions for these
        # shapes; each sequence holds its decoder's blocks and its encoder's): some wait, some
        # are preempted (their cross-attention blocks freed, encoded again). The same tokens.
        together, preemptions = self.run_job(model, requests * 8, 48, "1MiB")
        for j, got in enumerate(texts(together)):
            self.assertEqual(got, [want[j % len(prompts)][0]], "%s batched request %d" % (kind, j))
            self.assertEqual(together[j]["usage"]["prompt_tokens"], len(prompts[j % len(prompts)]))
        # Beam search (what T5 users run): each returned beam's cumulative log-probability is
        # numpy's for its tokens, and the best is at least the greedy sequence's.
        p = prompts[3]
        r = subprocess.run(
            [self.bin, "generate", "-m", model, "--prompt-ids", ",".join(map(str, p)), "-n", "8",
             "--num-beams", "4", "--num-return-sequences", "2", "--ignore-eos", "--no-echo"],
            capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        beams = re.findall(r"cumulative logprob (-?[\d.]+)\) ---\n(.*)\n", r.stdout)
        self.assertEqual(len(beams), 2, r.stdout)
        for score, text in beams:
            ids = ids_of([" " + w for w in text.split(" ")[1:]])
            self.assertEqual(len(ids), 8)
            logits = ref.logits(p, [cfg["decoder_start_token_id"]] + ids[:-1])
            total = sum(float(row[t] - row.max() - np.log(np.exp(row - row.max()).sum()))
                        for row, t in zip(logits, ids))
            self.assertAlmostEqual(float(score), total, delta=1e-3)
        self.assertGreaterEqual(float(beams[0][0]), sum(want[3][1][:8]) - 1e-3)
        # n = 2: the forks share the encoder's K/V.
        forked, _ = self.run_job(model, [dict(r, n=2) for r in requests], 6, "64MiB")
        for j, got in enumerate(texts(forked, n=2)):
            self.assertEqual(got, [want[j][0]] * 2, "%s n=2 request %d" % (kind, j))
        return preemptions

    def greedy_text(self, model, text, n):
        """The greedy token ids `tokenflow generate` gives for a text prompt."""
        r = subprocess.run([self.bin, "generate", "-m", model, "-p", text, "-n", str(n), "-t", "0",
                            "--ignore-eos", "--logprobs", "1", "--no-echo"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        # One line per step: the id, its piece (empty past this small tokenizer's vocabulary),
        # its logprob, the alternatives.
        return [int(m.group(1)) for m in (re.match(r"\s*(\d+)\s.*\s-?\d+\.\d{4}\s", line)
                                          for line in r.stderr.splitlines()) if m]

    def test_spiece_model_is_t5s_tokenizer(self):
        # T5Tokenizer's spiece.model, a SentencePiece Unigram model (here trained with T5's ids:
        # pad 0, eos 1, unk 2, no bos): found beside the model, the EOS appended to the
        # encoder's input, no BOS; the text's ids go through the encoder as numpy's do.
        import sentencepiece as spm
        model = make_checkpoints.write_checkpoint(os.path.join(self.tmp.name, "t5_sp"), "t5",
                                                  seed=12)
        words = ["translate", "English", "German", "summarize", "the", "house", "is", "small",
                 "wonderful", "question", "answer", "cat", "sat", "on", "mat", "blue", "sky"]
        rng = np.random.default_rng(1)
        lines = [" ".join(rng.choice(words, 8)) for _ in range(400)]
        prefix = os.path.join(self.tmp.name, "sp")
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=prefix,
                                       vocab_size=120, model_type="unigram", pad_id=0, eos_id=1, minloglevel=2,
                                       unk_id=2, bos_id=-1, hard_vocab_limit=False)
        os.replace(prefix + ".model", os.path.join(model, "spiece.model"))
        # A T5 directory also ships transformers' conversion, a Unigram tokenizer.json: the
        # spiece.model is the one read.
        with open(os.path.join(model, "tokenizer.json"), "w") as f:
            json.dump({"version": "1.0", "model": {"type": "Unigram", "unk_id": 2,
                                                   "vocab": [["<pad>", 0.0], ["</s>", 0.0],
                                                             ["<unk>", 0.0]]}}, f)
        sp = spm.SentencePieceProcessor(model_file=os.path.join(model, "spiece.model"))
        text = "translate English to German: the house is wonderful"
        want_ids = sp.encode(text) + [1]
        r = subprocess.run([self.bin, "tokenize", "-m", model, text], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout.splitlines()[0]), want_ids)
        ref = np_model.load_hf(model)
        want, _ = ref.greedy(want_ids, 5)
        self.assertEqual(self.greedy_text(model, text, 5), want)
        # T5's sentinels: <extra_id_N> is the id N after the last of SentencePiece's (the config's
        # vocabulary holds them; T5Tokenizer's 100), the text around it encoded on its own.
        n = sp.get_piece_size()
        r = subprocess.run([self.bin, "tokenize", "-m", model, "fill <extra_id_0> the <extra_id_1>"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout.splitlines()[0]),
                         sp.encode("fill") + [n + 99] + sp.encode("the") + [n + 98, 1])
        # The same model as llama.cpp's GGUF, its vocabulary in the file (tokenizer.ggml.model
        # "t5": pieces, scores, types, the character map): the same ids from the text, and the
        # same greedy tokens (v1.0's GGUF scales its logits, not their order).
        import gguf_io
        import test_gguf
        g = os.path.join(self.tmp.name, "t5_sp.gguf")
        cfg = make_checkpoints.KINDS["t5"]("F32")
        test_gguf.hf_to_gguf("t5", 12, g, gguf_io.sentencepiece_unigram_metadata(
            os.path.join(model, "spiece.model"), cfg["vocab_size"]))
        r = subprocess.run([self.bin, "tokenize", "-m", g, text], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout.splitlines()[0]), want_ids)
        self.assertEqual(self.greedy_text(g, text, 5), want)

    def test_t5_v1_0_relu_tied(self):
        self.assertGreater(self.check("t5"), 0, "the small cache must force preemption")

    def test_t5_v1_1_gated_gelu_own_head(self):
        self.check("t5_v1_1")


if __name__ == "__main__":
    unittest.main()
