"""Compare the C++ forward pass (through its dump-logits tool) with numpy.

Run:
    TF_DUMP_LOGITS=/path/to/tf_dump_logits python3 tests/reference/test_reference.py
    (or: python3 -m unittest discover -s tests/reference -v)

Environment:
    TF_DUMP_LOGITS  path of the C++ tool (required; every C++ test fails
                    without it)
    TF_SHARED_DIR   the shared test-data folder (default: <repo>/../shared)

The tool's interface:
    $TF_DUMP_LOGITS --model PATH --prompts "1,2,3;4,5" [--decode "10,11;12,13"] --out FILE
        one ragged batched prefill over all prompts, then one batched decode
        step per decode column; FILE = little-endian float32 rows: every
        prompt position of sequence 0, of sequence 1, ...; then for each
        decode step j one row per sequence. stdout: {"vocab": V, "rows": R}
    $TF_DUMP_LOGITS --model PATH --prompts "1,2,3;4,5" --greedy N
        stdout: one line per sequence, N generated ids comma-separated.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # tiny matrices; stay light
os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import make_checkpoints  # noqa: E402
import np_model  # noqa: E402
import safetensors_io  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
TOL = 1e-4          # max|ours - numpy| / max|numpy| over all rows
N_DECODE = 4
GREEDY_N = 40
TOOL_TIMEOUT_S = 120

# llama2.c's documented greedy output of stories260K from "<s> Once" begins
# "Once upon a time, there was a little girl named Lily. She loved to play
# outside in the park. One day, she saw a big, red". These are its ids.
STORIES_GREEDY_FROM_1_403 = [
    407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401,
    396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328,
    432, 358, 394, 261, 370, 432, 352, 266]


def shared_dir():
    return os.environ.get("TF_SHARED_DIR") or os.path.normpath(os.path.join(REPO, "..", "shared"))


def stories_bin():
    return os.path.join(shared_dir(), "models", "stories260K", "stories260K.bin")


def engine_scores_in_int8():
    """Whether the kernel table the engine runs (TOKENFLOW_ISA or the CPU's best) quantizes its
    queries against a q8_0 cache (the AVX-512 VNNI tables' int8 scores), as dump_logits says."""
    out = subprocess.run([os.environ["TF_DUMP_LOGITS"], "--isa"], capture_output=True,
                         text=True, check=True).stdout.split()
    return out[1] == "1"


def _fmt(seqs):
    return ";".join(",".join(str(int(t)) for t in s) for s in seqs)


def _random_batch(seed, lengths, vocab, n_decode=N_DECODE):
    rng = np.random.default_rng(seed)
    prompts = [[int(t) for t in rng.integers(0, vocab, size=n)] for n in lengths]
    decode = [[int(t) for t in rng.integers(0, vocab, size=n_decode)] for _ in lengths]
    return prompts, decode


class _env:
    """Sets (value) or removes (None) an environment variable for a with-block."""

    def __init__(self, name, value):
        self.name, self.value = name, value

    def __enter__(self):
        self.old = os.environ.get(self.name)
        if self.value is None:
            os.environ.pop(self.name, None)
        else:
            os.environ[self.name] = self.value

    def __exit__(self, *exc):
        if self.old is None:
            os.environ.pop(self.name, None)
        else:
            os.environ[self.name] = self.old


class _Checkpoints:
    """Random checkpoints written once per run, with their numpy models."""

    def __init__(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="tf_ref_")
        self._cache = {}

    def get(self, kind, dtype="F32", sharded=False, legacy=False):
        key = (kind, dtype, sharded, legacy)
        if key not in self._cache:
            name = "%s_%s%s%s" % (kind, dtype, "_sharded" if sharded else "",
                                  "_legacy" if legacy else "")
            path = make_checkpoints.write_checkpoint(
                os.path.join(self._tmp.name, name), kind, dtype=dtype, sharded=sharded,
                seed=0, legacy_gpt2_names=legacy)
            # The reference loads the file back, so F16/BF16 rounding is shared.
            self._cache[key] = (path, np_model.load_hf(path))
        return self._cache[key]

    def path(self, name):
        return os.path.join(self._tmp.name, name)

    def close(self):
        self._tmp.cleanup()


_CKPTS = None


def setUpModule():
    global _CKPTS
    _CKPTS = _Checkpoints()


def tearDownModule():
    _CKPTS.close()


class ToolCase(unittest.TestCase):
    """Helpers that run the C++ tool and compare with numpy."""

    maxDiff = None

    def tool(self):
        p = os.environ.get("TF_DUMP_LOGITS")
        if not p:
            self.fail("TF_DUMP_LOGITS is not set: it must be the path of the C++ dump-logits "
                      "tool (e.g. TF_DUMP_LOGITS=build/tf_dump_logits). These tests compare "
                      "its logits with the numpy reference and are never skipped.")
        if not (os.path.isfile(p) and os.access(p, os.X_OK)):
            self.fail("TF_DUMP_LOGITS=%r is not an executable file" % p)
        return p

    def run_tool(self, args):
        cmd = [self.tool()] + args
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True, timeout=TOOL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.fail("timed out after %ds: %s" % (TOOL_TIMEOUT_S, " ".join(cmd)))
        if r.returncode != 0:
            self.fail("exit status %d: %s\nstderr:\n%s\nstdout:\n%s" % (
                r.returncode, " ".join(cmd), r.stderr[-3000:], r.stdout[-2000:]))
        return r.stdout

    def dump_logits(self, model_path, prompts, decode, dtype="f32", kv_dtype="f32", lora=None):
        with tempfile.TemporaryDirectory(prefix="tf_out_") as td:
            out = os.path.join(td, "logits.f32")
            args = ["--model", model_path, "--prompts", _fmt(prompts), "--out", out,
                    "--dtype", dtype, "--kv-dtype", kv_dtype]
            if lora:
                args += ["--lora", lora]
            if decode and decode[0]:
                args[4:4] = ["--decode", _fmt(decode)]
            stdout = self.run_tool(args)
            info = None
            for line in reversed(stdout.splitlines()):
                line = line.strip()
                if line.startswith("{"):
                    try:
                        info = json.loads(line)
                        break
                    except ValueError:
                        pass
            if not isinstance(info, dict) or "vocab" not in info or "rows" not in info:
                self.fail("no JSON line {\"vocab\": V, \"rows\": R} on stdout:\n%s" % stdout[-2000:])
            V, R = int(info["vocab"]), int(info["rows"])
            size = os.path.getsize(out) if os.path.exists(out) else -1
            if size != R * V * 4:
                self.fail("%s has %d bytes, expected rows*vocab*4 = %d*%d*4" % (out, size, R, V))
            return np.fromfile(out, dtype="<f4").reshape(R, V)

    def check_logits(self, model_path, model, prompts, decode, dtype="f32", tol=None,
                     kv_dtype="f32", lora=None):
        """One batched prefill + len(decode[0]) batched decode steps in C++ (weights in
        `dtype`) vs. numpy full-sequence f32 logits at the same positions."""
        n_dec = len(decode[0]) if decode else 0
        refs = [model.logits(list(p) + list(d)) for p, d in zip(prompts, decode)]
        labels = []
        rows = []
        for s, p in enumerate(prompts):
            for t in range(len(p)):
                rows.append(refs[s][t])
                labels.append("seq %d prefill pos %d" % (s, t))
        for j in range(n_dec):
            for s, p in enumerate(prompts):
                rows.append(refs[s][len(p) + j])
                labels.append("seq %d decode step %d (pos %d)" % (s, j, len(p) + j))
        ref = np.stack(rows)

        ours = self.dump_logits(model_path, prompts, decode, dtype, kv_dtype, lora)
        self.assertEqual(ours.shape[1], model.vocab_size, "vocab size")
        self.assertEqual(ours.shape[0], len(rows),
                         "rows: expected sum of prompt lengths + n_seq * n_decode")
        bad = ~np.isfinite(ours)
        if bad.any():
            r = int(np.argwhere(bad)[0][0])
            self.fail("non-finite logits, first in row %d (%s)" % (r, labels[r]))
        err = np.abs(ours.astype(np.float64) - ref)
        scale = np.abs(ref).max()
        rel = err.max() / scale
        r, c = np.unravel_index(int(np.argmax(err)), err.shape)
        per_row = err.max(axis=1) / scale
        worst = ", ".join("%s: %.2e" % (labels[i], per_row[i])
                          for i in np.argsort(-per_row)[:4])
        self.assertLess(rel, tol or TOL, "%s: max|ours-numpy|/max|numpy| = %.3e at row %d (%s), "
                        "token %d: "
                        "ours %.6f numpy %.6f; worst rows: %s" % (
                            dtype, rel, r, labels[r], c, ours[r, c], ref[r, c], worst))

    def check_greedy(self, model_path, model, prompts, n=GREEDY_N):
        stdout = self.run_tool(["--model", model_path, "--prompts", _fmt(prompts),
                                "--greedy", str(n)])
        lines = [ln.strip() for ln in stdout.splitlines()
                 if re.fullmatch(r"\s*\d+(\s*,\s*\d+)*\s*", ln)]
        self.assertEqual(len(lines), len(prompts),
                         "expected one line of ids per sequence on stdout, got:\n%s" % stdout[-2000:])
        for s, (p, line) in enumerate(zip(prompts, lines)):
            ours = [int(t) for t in line.split(",")]
            margins = []
            want = np_model.greedy(model, p, n, margins)
            if ours != want:
                i = next((i for i, (a, b) in enumerate(zip(ours, want)) if a != b),
                         min(len(ours), len(want)))
                self.fail("seq %d (prompt %s): greedy differs at step %d (ours %d tokens, numpy %d); "
                          "numpy top1-top2 margin there %.4g\nours:  %s\nnumpy: %s" % (
                              s, p, i, len(ours), len(want),
                              margins[i] if i < len(margins) else float("nan"), ours, want))


class RandomCheckpoints(ToolCase):
    """Random-weight HF checkpoints: 3 sequences (5, 11, 1 tokens) + 4 decode steps."""

    LENGTHS = (5, 11, 1)

    def _run(self, kind, dtype="F32", sharded=False, legacy=False, seed=1):
        path, model = _CKPTS.get(kind, dtype, sharded, legacy)
        prompts, decode = _random_batch(seed, self.LENGTHS, model.vocab_size)
        self.check_logits(path, model, prompts, decode)

    def test_gpt2(self):
        self._run("gpt2")

    def test_gpt2_legacy_names(self):
        self._run("gpt2", legacy=True)

    def test_gpt2_f16(self):
        self._run("gpt2", dtype="F16")

    def test_llama_gqa(self):
        self._run("llama_gqa")

    def test_llama_gqa_bf16(self):
        self._run("llama_gqa", dtype="BF16")

    def test_llama_gqa_q8_0_kv_cache(self):
        # Grouped KV heads in a q8_0 cache against numpy keeping the same quantized K and V.
        import copy
        path, model = _CKPTS.get("llama_gqa")
        quantized = copy.copy(model)
        quantized.kv_quant = np_model.kv_q8_0
        if engine_scores_in_int8():
            quantized.q_quant = np_model.q_q8
        prompts, decode = _random_batch(1, self.LENGTHS, model.vocab_size)
        self.check_logits(path, quantized, prompts, decode, kv_dtype="q8_0")

    def test_llama_gqa_sharded(self):
        self._run("llama_gqa", sharded=True)

    def test_llama_tied(self):
        self._run("llama_tied")

    def test_qwen2(self):
        self._run("qwen2")

    def test_mistral(self):
        self._run("mistral")

    def test_llama31_rope_scaling(self):
        self._run("llama31")

    def test_llama_linear_rope_scaling(self):
        self._run("llama_linear")

    def test_qwen3_qk_norm_yarn_v5_config(self):
        self._run("qwen3")

    def test_greedy_gpt2(self):
        path, model = _CKPTS.get("gpt2")
        self.check_greedy(path, model, [[5, 7, 11, 13, 17], [100]])

    def test_greedy_llama_gqa(self):
        path, model = _CKPTS.get("llama_gqa")
        self.check_greedy(path, model, [[5, 7, 11, 13, 17], [100]])


    def test_gpt_oss_mxfp4_experts_sinks_windows_yarn(self):
        # MXFP4 experts with f32 activations (the portable table) are numpy's dequantized
        # experts; the tables with int8 dot products quantize the activations per 32 as llama.cpp
        # does for MXFP4 (its q8_0 vec_dot type), which moves the logits by about 1e-3 of their
        # scale -- and where two experts' router logits are that close, picks the other one, so
        # those tables are held to the int8 bound (their kernels are checked value for value
        # against the dequantized blocks in kernels_tests).
        isa = os.environ.get("TOKENFLOW_ISA")
        os.environ["TOKENFLOW_ISA"] = "portable"
        try:
            self._run("gpt_oss")
            path, model = _CKPTS.get("gpt_oss")
            self.check_greedy(path, model, [[5, 17, 300, 42, 7, 9, 11, 13], [999]], n=64)
        finally:
            if isa is None:
                del os.environ["TOKENFLOW_ISA"]
            else:
                os.environ["TOKENFLOW_ISA"] = isa
        path, model = _CKPTS.get("gpt_oss")
        prompts, decode = _random_batch(1, self.LENGTHS, model.vocab_size)
        self.check_logits(path, model, prompts, decode, tol=0.25)

    def test_gpt_oss_dequantized_experts(self):
        self._run("gpt_oss_float", dtype="BF16")
        path, model = _CKPTS.get("gpt_oss_float", "BF16")
        self.check_greedy(path, model, [[5, 17, 300, 42, 7, 9, 11, 13], [999]], n=64)

    def test_gptj_interleaved_partial_rotary(self):
        self._run("gptj")

    def test_codegen_sharded_qkv(self):
        self._run("codegen")

    def test_codegen_bf16(self):
        self._run("codegen", dtype="BF16")

    def test_gpt_neox_parallel_residual(self):
        self._run("gpt_neox")

    def test_gpt_neox_sequential_residual(self):
        self._run("gpt_neox_seq", sharded=True)

    def test_greedy_parallel_family(self):
        # 64 greedy tokens against numpy for each layout of the family.
        for kind in ("gptj", "codegen", "gpt_neox"):
            with self.subTest(kind=kind):
                path, model = _CKPTS.get(kind)
                self.check_greedy(path, model, [[5, 17, 300, 42], [999]], n=64)


class _LongPrompts(ToolCase):
    LENGTHS = (5, 20, 1)

    def _run(self, kind, seed=1):
        path, model = _CKPTS.get(kind)
        prompts, decode = _random_batch(seed, self.LENGTHS, model.vocab_size)
        self.check_logits(path, model, prompts, decode)


class ScaledRopeAcrossTheOriginalContext(_LongPrompts):
    """Position-dependent scalings: prompts longer than the original context of 8, so tokens
    rotate with the extended frequencies past it (and the short ones before)."""

    def test_dynamic_ntk(self):
        self._run("llama_dynamic")

    def test_longrope_partial_rotary(self):
        self._run("llama_longrope")

    def test_phi3_fused_projections_longrope(self):
        self._run("phi3")


class MixtureOfExperts(_LongPrompts):
    """Top-k routing with and without renormalization, a shared expert with its gate, dense
    layers among sparse ones."""

    def test_mixtral(self):
        self._run("mixtral")

    def test_qwen2_moe_shared_expert(self):
        self._run("qwen2moe")

    def test_qwen3_moe(self):
        self._run("qwen3moe")

    def test_olmoe_whole_projection_qk_norm(self):
        self._run("olmoe")

    def test_experts_stacked_as_transformers_v5_saves_them(self):
        self._run("qwen3moe_v5")
        self._run("mixtral_v5")


class SlidingWindowsAndGemma(_LongPrompts):
    """Windows of 4 keys under prompts of up to 20 tokens; Gemma's norms, GeGLU, soft-caps,
    local and global layers with their RoPE bases."""

    def test_mistral_sliding_window(self):
        self._run("mistral_window")

    def test_mamba_selective_scan(self):
        # Issue 51: the recurrent state carried from the prefill through every decode step.
        self._run("mamba")

    def test_mamba_long_prompt_and_greedy(self):
        # A prompt longer than the engine's tokens per chunk is not needed here: 40 tokens, 4
        # decode steps; then greedy decoding against numpy's.
        path, model = _CKPTS.get("mamba", "F32", False, False)
        prompts, decode = _random_batch(3, (40, 2), model.vocab_size)
        self.check_logits(path, model, prompts, decode)
        self.check_greedy(path, model, [prompts[0][:7]])

    def test_qwen3_next_gated_deltanet_beside_gated_attention(self):
        # Issue 53: three Gated DeltaNet layers (recurrent state carried from the prefill through
        # the decode steps, grouped value heads) and a gated attention layer (partial rotary,
        # zero-centered q/k norms), experts with a gated shared expert, a dense layer. Runs of 8
        # or more tokens take the chunkwise form, shorter ones (decode) the recurrent one;
        # either form alone must give the same logits.
        path, model = _CKPTS.get("qwen3_next")
        prompts, decode = _random_batch(1, (5, 20, 1, 100), model.vocab_size)
        for form in (None, "recurrent", "chunked"):
            with self.subTest(form=form or "default"):
                with _env("TOKENFLOW_GDN_FORM", form):
                    self.check_logits(path, model, prompts, decode)

    def test_qwen3_next_greedy_and_bf16(self):
        path, model = _CKPTS.get("qwen3_next")
        self.check_greedy(path, model, [[5, 17, 300, 42, 7, 9, 11, 13], [999]], n=64)
        path, model = _CKPTS.get("qwen3_next", "BF16", True)
        prompts, decode = _random_batch(2, self.LENGTHS, model.vocab_size)
        self.check_logits(path, model, prompts, decode)

    def test_qwen3_5_split_projections(self):
        # Qwen3.5's text model: the DeltaNet's projections apart, dense MLPs, rope_parameters
        # with multimodal sections (plain RoPE for text), alternating layer types.
        self._run("qwen3_5")
        path, model = _CKPTS.get("qwen3_5")
        self.check_greedy(path, model, [[5, 17, 300, 42], [999]], n=64)
        # The multimodal release (Qwen3_5ForConditionalGeneration): its text model, read from
        # text_config and model.language_model.*, is the same model.
        wrapper = make_checkpoints.write_qwen3_5_wrapper(path, _CKPTS.path("qwen3_5_wrapper"))
        prompts, decode = _random_batch(1, self.LENGTHS, model.vocab_size)
        self.check_logits(wrapper, model, prompts, decode)

    def test_gemma(self):
        self._run("gemma")

    def test_gemma2_softcaps_and_windows(self):
        self._run("gemma2")

    def test_gemma3_qk_norm_and_local_rope(self):
        self._run("gemma3")


class Stories260K(ToolCase):
    """The real trained llama2.c model."""

    PROMPTS = [[1, 403, 407, 261],
               [1, 403, 407, 261, 378, 432, 383, 286, 261],
               [1]]
    DECODE = [[378, 432, 383, 286],
              [376, 298, 315, 421],
              [403, 407, 261, 378]]

    @classmethod
    def setUpClass(cls):
        cls.bin = stories_bin()
        cls.model = np_model.load_llama2c(cls.bin) if os.path.exists(cls.bin) else None

    def setUp(self):
        if self.model is None:
            self.fail("stories260K.bin not found at %s (set TF_SHARED_DIR)" % self.bin)

    def test_logits_llama2c_bin(self):
        self.check_logits(self.bin, self.model, self.PROMPTS, self.DECODE)

    # Weights packed into narrower types at load (--dtype) against the f32 numpy model: the
    # documented bounds of docs/architecture.md (max error over max |logit|).
    DTYPE_BOUNDS = {"bf16": 1e-2, "f16": 2e-3, "int8": 4e-2, "q4": 0.35}

    KV_BOUNDS = {"bf16": 1e-2, "f16": 2e-3}

    def test_logits_per_kv_cache_dtype(self):
        for kv, bound in self.KV_BOUNDS.items():
            with self.subTest(kv=kv):
                self.check_logits(self.bin, self.model, self.PROMPTS, self.DECODE, "f32", bound,
                                  kv_dtype=kv)

    def test_logits_q8_0_kv_cache(self):
        # The numpy model keeping what a q8_0 cache keeps (np_model.kv_q8_0: quantized per token
        # and head, read back as scale * q) equals the engine with --kv-dtype q8_0 to f32
        # rounding; the plain f32 model differs by the quantization's own error, bounded.
        import copy
        quantized = copy.copy(self.model)
        quantized.kv_quant = np_model.kv_q8_0
        if engine_scores_in_int8():  # the queries too, as those tables' int8 scores take them
            quantized.q_quant = np_model.q_q8
            plain_queries = copy.copy(quantized)
            del plain_queries.q_quant
            with self.assertRaises(AssertionError):  # their quantization is seen at f32's bound
                self.check_logits(self.bin, plain_queries, self.PROMPTS, self.DECODE, "f32",
                                  kv_dtype="q8_0")
        self.check_logits(self.bin, quantized, self.PROMPTS, self.DECODE, "f32", kv_dtype="q8_0")
        self.check_logits(self.bin, self.model, self.PROMPTS, self.DECODE, "f32", 4e-2,
                          kv_dtype="q8_0")
        with self.assertRaises(AssertionError):  # the quantization is seen at f32's bound
            self.check_logits(self.bin, self.model, self.PROMPTS, self.DECODE, "f32",
                              kv_dtype="q8_0")

    def test_logits_per_dtype(self):
        for dtype, bound in self.DTYPE_BOUNDS.items():
            with self.subTest(dtype=dtype):
                self.check_logits(self.bin, self.model, self.PROMPTS, self.DECODE, dtype, bound)

    def test_greedy_llama2c_bin(self):
        self.check_greedy(self.bin, self.model, [[1], [1, 403]])

    def test_logits_converted_to_hf(self):
        # The same weights as a HF LlamaForCausalLM directory (q/k rows
        # permuted for rotate_half RoPE): the HF Llama path on trained weights.
        path = _CKPTS.path("stories260K_hf")
        if not os.path.exists(path):
            make_checkpoints.convert_llama2c(self.bin, path)
        self.check_logits(path, np_model.load_hf(path), self.PROMPTS, self.DECODE)


class NumpySelfCheck(unittest.TestCase):
    """The reference's own checks; these need no C++ tool."""

    def test_gated_delta_rule_chunked_equals_recurrent(self):
        # The reference's two forms of Gated DeltaNet (the paper's recurrence and its chunkwise
        # form) agree, on random inputs and on a whole Qwen3-Next model, for chunks that do and
        # do not divide the sequence: the forms the engine's prefill and decode will take.
        rng = np.random.default_rng(5)
        T, H, dk, dv = 11, 3, 8, 6
        q, k = rng.standard_normal((T, H, dk)), rng.standard_normal((T, H, dk))
        k /= np.linalg.norm(k, axis=-1, keepdims=True)
        v = rng.standard_normal((T, H, dv))
        g = -rng.uniform(0.01, 2.0, (T, H))
        beta = rng.uniform(0.0, 1.0, (T, H))
        s0 = rng.standard_normal((H, dk, dv))
        want, want_s = np_model.gated_delta_recurrent(q, k, v, g, beta, s0)
        for chunk in (1, 4, 11, 64):
            got, got_s = np_model.gated_delta_chunked(q, k, v, g, beta, chunk, s0)
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(got_s, want_s, rtol=1e-9, atol=1e-9)
        # Split anywhere with the state carried: the same.
        a, sa = np_model.gated_delta_recurrent(q[:5], k[:5], v[:5], g[:5], beta[:5], s0)
        b, _ = np_model.gated_delta_recurrent(q[5:], k[5:], v[5:], g[5:], beta[5:], sa)
        np.testing.assert_allclose(np.concatenate([a, b]), want, rtol=1e-12, atol=1e-12)
        with tempfile.TemporaryDirectory() as td:
            m = np_model.load_hf(make_checkpoints.write_checkpoint(td, "qwen3_next"))
            ids = [5, 17, 300, 42, 7, 9, 11, 13, 999, 1]
            ref = m.logits(ids)
            self.assertTrue(np.all(np.isfinite(ref)))
            self.assertGreater(np.abs(ref).max(), 0.5)
            np.testing.assert_allclose(m.logits(ids, chunk=4), ref, rtol=1e-9, atol=1e-9)

    def test_safetensors_roundtrip(self):
        rng = np.random.default_rng(0)
        t = {"a": rng.standard_normal((3, 5)).astype(np.float32),
             "b.weight": rng.standard_normal(7).astype(np.float32),
             "scalar_like": np.array([1.5], np.float32)}
        with tempfile.TemporaryDirectory() as td:
            for dt in ("F32", "F16", "BF16"):
                p = os.path.join(td, dt + ".safetensors")
                safetensors_io.save(p, t, dt)
                header, start = safetensors_io.read_header(p)
                self.assertEqual(start % 8, 0)
                self.assertEqual(header["__metadata__"], {"format": "pt"})
                back = safetensors_io.load(p)
                self.assertEqual(set(back), set(t))
                for k in t:
                    self.assertEqual(back[k].dtype, np.float32)
                    np.testing.assert_array_equal(back[k], safetensors_io.round_to_dtype(t[k], dt))

    def test_bf16_rounding(self):
        x = np.array([1.0, -2.5, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 1.0 + 2 ** -8 + 2 ** -20,
                      np.inf, -np.inf, np.nan, 3.0e38], np.float32)
        bits = safetensors_io.f32_to_bf16_bits(x)
        self.assertEqual([int(b) for b in bits[:7]],
                         [0x3F80, 0xC020, 0x3F80, 0x3F82, 0x3F81, 0x7F80, 0xFF80])
        self.assertTrue(np.isnan(safetensors_io.bf16_bits_to_f32(bits[7:8]))[0])
        self.assertEqual(int(bits[8]), 0x7F62)  # 3.0e38 rounds to a finite bf16

    def test_sharded_equals_single(self):
        with tempfile.TemporaryDirectory() as td:
            a = make_checkpoints.write_checkpoint(os.path.join(td, "a"), "llama_gqa")
            b = make_checkpoints.write_checkpoint(os.path.join(td, "b"), "llama_gqa", sharded=True)
            with open(os.path.join(b, "model.safetensors.index.json")) as f:
                index = json.load(f)
            self.assertEqual(sorted(set(index["weight_map"].values())),
                             [safetensors_io.shard_name(i, 3) for i in (1, 2, 3)])
            wa, wb = safetensors_io.load_dir(a), safetensors_io.load_dir(b)
            self.assertEqual(set(wa), set(wb))
            for k in wa:
                np.testing.assert_array_equal(wa[k], wb[k])

    def test_gpt2_legacy_names_same_model(self):
        with tempfile.TemporaryDirectory() as td:
            a = np_model.load_hf(make_checkpoints.write_checkpoint(os.path.join(td, "a"), "gpt2"))
            b = np_model.load_hf(make_checkpoints.write_checkpoint(
                os.path.join(td, "b"), "gpt2", legacy_gpt2_names=True))
            ids = [3, 1, 4, 1, 5, 9, 2, 6]
            np.testing.assert_array_equal(a.logits(ids), b.logits(ids))

    def test_configs_match_weights(self):
        with tempfile.TemporaryDirectory() as td:
            for kind in make_checkpoints.KINDS:
                d = make_checkpoints.write_checkpoint(os.path.join(td, kind), kind)
                with open(os.path.join(d, "config.json")) as f:
                    cfg = json.load(f)
                w = safetensors_io.load_dir(d)
                if kind == "gpt2":
                    self.assertEqual(w["transformer.h.0.attn.c_attn.weight"].shape, (72, 216))
                    self.assertNotIn("lm_head.weight", w)
                    continue
                if cfg["model_type"] == "t5":
                    inner = cfg["num_heads"] * cfg["d_kv"]
                    self.assertEqual(w["encoder.block.0.layer.0.SelfAttention.q.weight"].shape,
                                     (inner, cfg["d_model"]))
                    self.assertEqual(len([n for n in w if n.startswith("decoder.block.") and
                                          n.endswith("EncDecAttention.k.weight")]),
                                     cfg["num_decoder_layers"])
                    self.assertEqual("lm_head.weight" in w, not cfg["tie_word_embeddings"])
                    continue
                if kind == "jina":
                    d, ff = cfg["hidden_size"], cfg["intermediate_size"]
                    self.assertEqual(w["encoder.layer.0.mlp.gated_layers.weight"].shape, (2 * ff, d))
                    self.assertNotIn("embeddings.position_embeddings.weight", w)
                    continue
                if cfg["model_type"] in ("bert", "xlm-roberta"):
                    P = ""
                    if cfg["architectures"][0].endswith("SequenceClassification"):
                        P = "roberta." if cfg["model_type"] == "xlm-roberta" else "bert."
                    d = cfg["hidden_size"]
                    self.assertEqual(w[P + "encoder.layer.0.attention.self.query.weight"].shape, (d, d))
                    self.assertEqual(w[P + "embeddings.token_type_embeddings.weight"].shape,
                                     (cfg["type_vocab_size"], d))
                    self.assertEqual(len([n for n in w if n.endswith("output.LayerNorm.bias")]),
                                     2 * cfg["num_hidden_layers"])
                    continue
                if kind == "nomic":
                    d = cfg["n_embd"]
                    self.assertEqual(w["encoder.layers.0.attn.Wqkv.weight"].shape, (3 * d, d))
                    self.assertEqual(w["encoder.layers.0.mlp.fc12.weight"].shape, (cfg["n_inner"], d))
                    self.assertEqual(len([n for n in w if n.endswith("norm2.bias")]), cfg["n_layer"])
                    continue
                if kind == "mamba":
                    inner = cfg["intermediate_size"]
                    self.assertEqual(w["backbone.layers.0.mixer.in_proj.weight"].shape,
                                     (2 * inner, cfg["hidden_size"]))
                    self.assertEqual(w["backbone.layers.0.mixer.A_log"].shape,
                                     (inner, cfg["state_size"]))
                    self.assertEqual(w["backbone.layers.0.mixer.x_proj.weight"].shape,
                                     (3 + 2 * cfg["state_size"], inner))
                    continue
                if cfg["model_type"] in ("gptj", "codegen"):
                    d = cfg["n_embd"]
                    fused = "transformer.h.0.attn.qkv_proj.weight"
                    self.assertEqual(fused in w, kind == "codegen")
                    self.assertEqual(w["lm_head.bias"].shape, (cfg["vocab_size"],))
                    self.assertEqual(w["transformer.h.0.mlp.fc_in.weight"].shape, (cfg["n_inner"], d))
                    continue
                if cfg["model_type"] == "gpt_neox":
                    d = cfg["hidden_size"]
                    self.assertEqual(
                        w["gpt_neox.layers.0.attention.query_key_value.weight"].shape, (3 * d, d))
                    self.assertEqual(w["embed_out.weight"].shape, (cfg["vocab_size"], d))
                    continue
                if cfg["model_type"] in ("qwen3_next", "qwen3_5_text"):
                    nk, dk = cfg["linear_num_key_heads"], cfg["linear_key_head_dim"]
                    nv, dv = cfg["linear_num_value_heads"], cfg["linear_value_head_dim"]
                    a = "model.layers.0.linear_attn."
                    self.assertEqual(w[a + "conv1d.weight"].shape,
                                     (2 * nk * dk + nv * dv, 1, cfg["linear_conv_kernel_dim"]))
                    if cfg["model_type"] == "qwen3_5_text":  # the projections apart
                        self.assertEqual(w[a + "in_proj_qkv.weight"].shape,
                                         (2 * nk * dk + nv * dv, cfg["hidden_size"]))
                        self.assertEqual(w[a + "in_proj_z.weight"].shape, (nv * dv, cfg["hidden_size"]))
                    else:  # grouped per key head
                        self.assertEqual(w[a + "in_proj_qkvz.weight"].shape,
                                         (2 * nk * dk + 2 * nv * dv, cfg["hidden_size"]))
                    full = cfg["layer_types"].index("full_attention")
                    q = "model.layers.%d.self_attn." % full
                    self.assertIn(q + "q_norm.weight", w)
                    hd = cfg["head_dim"]  # q_proj writes each head's query and its gate
                    self.assertEqual(w[q + "q_proj.weight"].shape,
                                     (2 * cfg["num_attention_heads"] * hd, cfg["hidden_size"]))
                    continue
                if cfg["model_type"] == "gpt_oss":
                    E, I, d = cfg["num_local_experts"], cfg["intermediate_size"], cfg["hidden_size"]
                    x = "model.layers.0.mlp.experts."
                    if kind == "gpt_oss":
                        self.assertEqual(w[x + "gate_up_proj_blocks"].shape, (E, 2 * I, d // 32, 16))
                        self.assertEqual(w[x + "down_proj_scales"].shape, (E, d, I // 32))
                    else:
                        self.assertEqual(w[x + "gate_up_proj"].shape, (E, d, 2 * I))
                    self.assertEqual(w["model.layers.0.self_attn.sinks"].shape,
                                     (cfg["num_attention_heads"],))
                    continue
                hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
                if kind in ("mixtral", "qwen2moe", "qwen3moe"):
                    continue
                if kind == "phi3":
                    q_kv = (cfg["num_attention_heads"] + 2 * cfg["num_key_value_heads"]) * hd
                    self.assertEqual(w["model.layers.0.self_attn.qkv_proj.weight"].shape,
                                     (q_kv, cfg["hidden_size"]))
                    continue
                self.assertEqual(w["model.layers.0.self_attn.q_proj.weight"].shape,
                                 (cfg["num_attention_heads"] * hd, cfg["hidden_size"]))
                self.assertEqual(w["model.layers.0.self_attn.k_proj.weight"].shape,
                                 (cfg["num_key_value_heads"] * hd, cfg["hidden_size"]))
                self.assertEqual("lm_head.weight" in w, not cfg["tie_word_embeddings"])
                self.assertEqual("model.layers.0.self_attn.q_proj.bias" in w, kind == "qwen2")

    def test_stories260k_documented_greedy(self):
        if not os.path.exists(stories_bin()):
            self.fail("stories260K.bin not found at %s (set TF_SHARED_DIR)" % stories_bin())
        m = np_model.load_llama2c(stories_bin())
        self.assertEqual(np_model.greedy(m, [1, 403], GREEDY_N), STORIES_GREEDY_FROM_1_403)

    def test_rope_conventions_agree_on_stories260k(self):
        if not os.path.exists(stories_bin()):
            self.fail("stories260K.bin not found at %s (set TF_SHARED_DIR)" % stories_bin())
        with tempfile.TemporaryDirectory() as td:
            hf = np_model.load_hf(make_checkpoints.convert_llama2c(stories_bin(), td))
            l2c = np_model.load_llama2c(stories_bin())
            ids = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376]
            np.testing.assert_allclose(hf.logits(ids), l2c.logits(ids), rtol=0, atol=1e-9)


if __name__ == "__main__":
    unittest.main()
