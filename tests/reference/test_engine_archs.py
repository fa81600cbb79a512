"""Every architecture through the engine: the same greedy tokens alone and among many.

For each architecture (random weights from make_checkpoints, every feature switched on), a
batch job of 24 greedy requests whose prompts share a preamble longer than a KV block runs
twice through `tokenflow generate --input-file`: one request at a time with room to spare, and
all 48 at once in a KV cache far too small for them (continuous batching, prefix caching,
preemption by recompute, blocks behind a sliding window released and reused). Each request must
produce the same tokens both ways, and the same again with speculative decoding (issue 27): a
draft model (the same checkpoint at int8, so that some proposals hold and some are rolled back)
proposing for 8 of them at once.

Needs TOKENFLOW_BIN (the tokenflow binary). TF_ENGINE_KINDS (comma-separated) runs some of the
kinds only (the sanitizer stages' subset, tests/CMakeLists.txt).
"""

import json
import re
import os
import subprocess
import tempfile
import unittest

import make_checkpoints

KINDS = ("llama31", "llama_longrope", "mistral_window", "qwen3", "phi3",
         "gemma", "gemma2", "gemma3", "mixtral", "qwen2moe", "qwen3moe", "olmoe", "mamba",
         "codegen", "gpt_neox", "gpt_oss", "qwen3_next")
TIMEOUT_S = 600
# Architectures whose sliding-window layers sit beside global ones (cache groups of each kind).
SLIDING_BESIDE_GLOBAL = ("gemma2", "gemma3", "gpt_oss")
# Architectures that keep a recurrent state instead of K/V (one block per sequence).
RECURRENT = ("mamba",)
# Recurrent-state layers beside attention layers (a paged group and recurrent groups).
HYBRID = ("qwen3_next",)


def write_vocab(path, n):
    """A llama2.c tokenizer.bin of n pieces (byte pieces at 3..258), so texts decode."""
    make_checkpoints.write_llama2c_vocab(path, [
        [b"<unk>", b"<s>", b"</s>"][i] if i < 3 else
        ("<0x%02X>" % (i - 3)).encode() if i < 259 else (" w%d" % i).encode() for i in range(n)])


class EngineArchitectures(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.bin = os.environ.get("TOKENFLOW_BIN")
        if not cls.bin:
            raise unittest.SkipTest("TOKENFLOW_BIN is not set")
        if os.environ.get("TOKENFLOW_ISA"):
            # The reference suite runs once per kernel table; the engine's behaviour does not
            # depend on it and is checked in the native run (each table's kernels against numpy
            # by test_reference.py in every run, their batch invariance by kernels_test).
            raise unittest.SkipTest("engine behaviour is checked in the native-ISA run")
        cls.tmp = tempfile.TemporaryDirectory(prefix="tf_engine_archs_")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_job(self, model, requests, concurrency, kv_memory, stats=None, extra=(), n=1):
        d = self.tmp.name
        inp, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
        if os.path.exists(out):
            os.remove(out)  # an existing output file would be resumed, not rewritten
        with open(inp, "w") as f:
            for r in requests:
                f.write(json.dumps(r) + "\n")
        cmd = [self.bin, "generate", "-m", model, "--input-file", inp, "--output-file", out,
               "--concurrency", str(concurrency), "--kv-cache-memory", kv_memory, "-v", *extra]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=TIMEOUT_S)
        self.assertEqual(r.returncode, 0, "%s\n%s" % (" ".join(cmd), r.stderr[-2000:]))
        m = re.search(r"engine: (\d+) preemptions, (\d+) of (\d+) prompt tokens from the prefix "
                      r"cache, (\d+) blocks released behind the sliding window, at most (\d+) "
                      r"sequences running; (\d+) KV blocks", r.stderr)
        self.assertIsNotNone(m, r.stderr[-2000:])
        if stats is not None:
            stats.update(preemptions=int(m.group(1)), prefix_hits=int(m.group(2)),
                         window_releases=int(m.group(4)), peak=int(m.group(5)),
                         blocks=int(m.group(6)))
            spec = re.search(r"speculation: (\d+) verification steps, (\d+) tokens proposed, "
                             r"(\d+) accepted", r.stderr)
            stats.update(proposed=int(spec.group(2)) if spec else 0,
                         accepted=int(spec.group(3)) if spec else 0)
        texts = []
        with open(out) as f:
            for line in f:
                o = json.loads(line)
                self.assertIsNone(o["error"], line)
                body = o["response"]["body"]
                # Every request runs to its max_tokens (an engine step that failed would end
                # them all "abort" with the same, short, texts).
                self.assertEqual(len(body["choices"]), n, line)
                for choice in body["choices"]:
                    self.assertEqual(choice["finish_reason"], "length", line)
                    texts.append(choice["text"])
                self.assertEqual(body["usage"]["completion_tokens"], 64 * n, line)
        self.assertEqual(len(texts), len(requests) * n)
        return texts

    def test_same_tokens_alone_and_batched_cached_preempted(self):
        preamble = list(range(300, 320))  # 20 tokens: more than one block of 16
        tails = [[400, 401], [500], [600, 601, 602, 603], [700, 701, 702]]
        requests = [{"prompt": preamble + tails[i % 4] + [800 + i // 4], "max_tokens": 64,
                     "temperature": 0, "ignore_eos": True} for i in range(48)]
        for kind in os.environ.get("TF_ENGINE_KINDS", ",".join(KINDS)).split(","):
            with self.subTest(kind=kind):
                model = make_checkpoints.write_checkpoint(
                    os.path.join(self.tmp.name, kind), kind, seed=7)
                cfg = make_checkpoints.KINDS[kind]("F32")
                write_vocab(os.path.join(model, "tokenizer.bin"), cfg["vocab_size"])
                # ~90 tokens (6 blocks) per request and 48 at once in the smallest cache allowed
                # (1 MiB: 64-113 blocks at these shapes): preemption is forced.
                st = {}
                batched = self.run_job(model, requests, 48, "1MiB", st)
                if kind == "mistral_window":
                    # Every layer slides (a window of 4): blocks behind the window go back to the
                    # pool as soon as a sequence is past them (the preamble's block right after
                    # the prompt), and others reuse them at once in this small cache; the tokens
                    # below stay right only if nothing reads a released block. Each sequence
                    # then holds ~2 blocks, so neither preemption nor a later hit on the
                    # released preamble is forced here.
                    self.assertGreater(st["window_releases"], 0, kind)
                elif kind in SLIDING_BESIDE_GLOBAL:
                    # Sliding layers beside global ones (issue 51): their cache groups release
                    # the blocks behind the window while the global layers' group keeps every
                    # block; preempted sequences are recomputed and the preamble is shared.
                    self.assertGreater(st["window_releases"], 0, kind)
                    self.assertGreater(st["preemptions"], 0, kind + ": the cache must force preemption")
                    self.assertGreater(st["prefix_hits"], 0, kind + ": the preamble must be shared")
                    # One group for every layer (--disable-hybrid-kv-cache-manager): nothing is
                    # released, and the tokens are the same.
                    kept = {}
                    one_group = self.run_job(model, requests, 48, "1MiB", kept,
                                             ("--disable-hybrid-kv-cache-manager",))
                    self.assertEqual(kept["window_releases"], 0, kind)
                    self.assertEqual(one_group, batched, kind + ": one cache group")
                elif kind in RECURRENT:
                    # One state block per sequence, whatever its length: the small cache admits
                    # as many sequences as it has blocks, the others wait for them (a running
                    # sequence never grows, so none is preempted), and nothing is found in the
                    # prefix cache (the state after a prefix is not kept).
                    self.assertLess(st["blocks"], len(requests), kind + ": the cache must be short")
                    self.assertEqual(st["peak"], st["blocks"], kind)
                    self.assertEqual(st["preemptions"], 0, kind)
                    self.assertEqual(st["prefix_hits"], 0, kind)
                    self.assertEqual(st["window_releases"], 0, kind)
                elif kind in HYBRID:
                    # Gated DeltaNet layers' state blocks beside the attention layer's paged ones
                    # (issue 53): sequences grow in the attention group, so this cache preempts
                    # (recomputing from position 0 restarts the state); nothing is found in the
                    # prefix cache (the state after a prefix is not kept), nothing is released.
                    self.assertGreater(st["preemptions"], 0, kind + ": the cache must force preemption")
                    self.assertEqual(st["prefix_hits"], 0, kind)
                    self.assertEqual(st["window_releases"], 0, kind)
                else:
                    # Where every layer attends to everything, nothing may go.
                    self.assertEqual(st["window_releases"], 0, kind)
                    self.assertGreater(st["preemptions"], 0, kind + ": the cache must force preemption")
                    self.assertGreater(st["prefix_hits"], 0, kind + ": the preamble must be shared")
                alone = [self.run_job(model, [requests[i]], 1, "64MiB")[0] for i in range(8)]
                for i in range(8):
                    self.assertEqual(batched[i], alone[i], "%s request %d" % (kind, i))
                if kind in RECURRENT or kind in HYBRID:
                    # n > 1 shares the prompt's state and copies it on the first write.
                    forked = self.run_job(model, [dict(requests[0], n=3)], 1, "64MiB", n=3)
                    self.assertEqual(forked, [alone[0]] * 3, kind + ": n=3 greedy")
                    # A rejected proposal cannot be rolled back out of a recurrent state:
                    # speculation is refused by name.
                    r = subprocess.run(
                        [self.bin, "generate", "-m", model, "--prompt-ids", "5,6,7", "-n", "4",
                         "--speculative", "ngram"], capture_output=True, text=True,
                        timeout=TIMEOUT_S)
                    self.assertNotEqual(r.returncode, 0)
                    self.assertIn("recurrent state cannot be rolled back", r.stderr)
                    continue
                spec = {}
                speculated = self.run_job(
                    model, requests[:8], 8, "64MiB", spec,
                    ("--speculative", "draft:" + model, "--draft-dtype", "int8",
                     "--num-speculative-tokens", "3", "--spec-max-running", "1000",
                     "--spec-min-acceptance", "0"))
                self.assertEqual(speculated, alone, kind + " with a draft model")
                # Under sliding windows too: a window's blocks are released only behind the
                # first position a rejected proposal's rollback writes again.
                self.assertGreater(spec["accepted"], 0, kind + ": some proposals must hold")
                self.assertLess(spec["accepted"], spec["proposed"], kind + ": and some fail")


if __name__ == "__main__":
    unittest.main()
