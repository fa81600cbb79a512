"""GGUF against numpy: ggml's block formats dequantized by numpy, written from the formats'
descriptions (ggml-common.h's block structs; llama.cpp's docs), must equal tokenflow's
dequantization bit for bit, on random blocks with extreme scales and on every tensor of the
shared GGUF files; and stories260K.gguf must give the logits of stories260K.bin (the same
weights), its quantized copies logits close to them.

Environment: TF_DEQUANT_GGML (tests/tools/dequant_ggml), TF_DUMP_LOGITS, TF_SHARED_DIR.
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import gguf_io  # noqa: E402
import make_checkpoints  # noqa: E402
import np_model  # noqa: E402

F32 = np.float32
IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                 dtype=F32)
# type: (block values, block bytes)
LAYOUT = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
          8: (32, 34), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
          14: (256, 210), 20: (32, 18), 23: (256, 136), 39: (32, 17)}
NAMES = {0: "F32", 1: "F16", 30: "BF16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1",
         8: "Q8_0", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 20: "IQ4_NL",
         23: "IQ4_XS", 39: "MXFP4"}


def f16(blocks, at):
    """The f16 at byte `at` of every block, as f32."""
    return blocks[:, at:at + 2].copy().view(np.float16).astype(F32)[:, 0]


def nibbles(q):
    """[n, 16] bytes -> [n, 32]: the low nibbles, then the high ones."""
    return np.concatenate([q & 0xF, q >> 4], axis=1).astype(np.int32)


def bits_of(qh32):
    """[n, 4] bytes as a little-endian uint32 -> [n, 32] bits, bit j for value j."""
    w = qh32.copy().view("<u4")[:, 0].astype(np.uint64)
    return ((w[:, None] >> np.arange(32, dtype=np.uint64)) & 1).astype(np.int32)


def scale_min_k4(s):
    """Q4_K/Q5_K: [n, 12] bytes -> 8 six-bit scales and 8 mins per block."""
    s = s.astype(np.int32)
    sc = np.zeros((len(s), 8), np.int32)
    mn = np.zeros((len(s), 8), np.int32)
    for j in range(8):
        if j < 4:
            sc[:, j] = s[:, j] & 63
            mn[:, j] = s[:, j + 4] & 63
        else:
            sc[:, j] = (s[:, j + 4] & 0xF) | ((s[:, j - 4] >> 6) << 4)
            mn[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    return sc, mn


def dequant(ggml_type, raw):
    """Every value of the blocks in raw, as f32."""
    bs, ts = LAYOUT[ggml_type]
    b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, ts)
    n = len(b)
    if ggml_type == 0:
        return b.copy().view("<f4").reshape(-1)
    if ggml_type == 1:
        return b.copy().view("<f2").astype(F32).reshape(-1)
    if ggml_type == 30:
        return (b.copy().view("<u2").astype(np.uint32) << 16).view("<f4").reshape(-1)
    if ggml_type == 8:  # Q8_0: d, q[32]
        return (f16(b, 0)[:, None] * b[:, 2:].view(np.int8).astype(F32)).reshape(-1)
    if ggml_type == 2:  # Q4_0: d, nibbles; x = d (q - 8)
        return (f16(b, 0)[:, None] * (nibbles(b[:, 2:]) - 8).astype(F32)).reshape(-1)
    if ggml_type == 3:  # Q4_1: d, m, nibbles; x = d q + m
        return (f16(b, 0)[:, None] * nibbles(b[:, 4:]).astype(F32) + f16(b, 2)[:, None]).reshape(-1)
    if ggml_type in (6, 7):  # Q5_0 / Q5_1: the fifth bit of value j is bit j of qh
        with_min = ggml_type == 7
        p = 4 if with_min else 2
        q = nibbles(b[:, p + 4:]) | (bits_of(b[:, p:p + 4]) << 4)
        d = f16(b, 0)[:, None]
        if with_min:
            return (d * q.astype(F32) + f16(b, 2)[:, None]).reshape(-1)
        return (d * (q - 16).astype(F32)).reshape(-1)
    if ggml_type == 39:
        # MXFP4 (OCP Microscaling Formats v1.0): an E8M0 scale 2^(e - 127) and 32 FP4 E2M1
        # elements (sign, 2 exponent bits with bias 1, 1 mantissa bit; exponent 0 subnormal:
        # 0 or 0.5), low nibbles first. E2M1's negative zero is read as +0 (ggml's table, which
        # llama.cpp computes with; no dot product can tell), and e = 255 (NaN in the spec) as
        # the power of two, as ggml does.
        e = b[:, 0].astype(np.int64)
        q = nibbles(b[:, 1:]).astype(np.int64)
        ex, m = (q >> 1) & 3, (q & 1).astype(np.float64)
        mag = np.where(ex == 0, 0.5 * m, np.ldexp(1.0 + 0.5 * m, ex - 1))
        v = np.where((q >> 3) & 1, -mag, mag) + 0.0
        with np.errstate(over="ignore"):
            return np.ldexp(v, (e - 127)[:, None]).astype(F32).reshape(-1)
    if ggml_type == 20:  # IQ4_NL: d T[q]
        return (f16(b, 0)[:, None] * IQ4NL[nibbles(b[:, 2:])]).reshape(-1)
    if ggml_type == 23:  # IQ4_XS: d, scales_h (2 bits each), scales_l (4 bits each), nibbles
        d = f16(b, 0)
        sh = b[:, 2:4].copy().view("<u2")[:, 0].astype(np.int32)
        out = np.zeros((n, 256), F32)
        for ib in range(8):
            ls = ((b[:, 4 + ib // 2].astype(np.int32) >> (4 * (ib % 2))) & 0xF) | \
                (((sh >> (2 * ib)) & 3) << 4)
            dl = d * (ls - 32).astype(F32)
            q = nibbles(b[:, 8 + 16 * ib:8 + 16 * ib + 16])
            out[:, 32 * ib:32 * ib + 32] = dl[:, None] * IQ4NL[q]
        return out.reshape(-1)
    if ggml_type in (12, 13):  # Q4_K / Q5_K: d, dmin, scales, (qh), nibbles in 4 x 64
        d, dmin = f16(b, 0), f16(b, 2)
        sc, mn = scale_min_k4(b[:, 4:16])
        five = ggml_type == 13
        qh = b[:, 16:48].astype(np.int32) if five else None
        qs = b[:, 48:] if five else b[:, 16:]
        out = np.zeros((n, 256), F32)
        for j in range(4):  # 32 bytes: sub-block 2j in the low nibbles, 2j + 1 in the high
            q = qs[:, 32 * j:32 * j + 32].astype(np.int32)
            lo, hi = q & 0xF, q >> 4
            if five:
                lo = lo + ((qh >> (2 * j)) & 1) * 16
                hi = hi + ((qh >> (2 * j + 1)) & 1) * 16
            for k, v in ((2 * j, lo), (2 * j + 1, hi)):
                dl = d * sc[:, k].astype(F32)
                ml = dmin * mn[:, k].astype(F32)
                out[:, 32 * k:32 * k + 32] = dl[:, None] * v.astype(F32) - ml[:, None]
        return out.reshape(-1)
    if ggml_type == 14:  # Q6_K: ql[128], qh[64], scales int8[16], d
        ql, qh = b[:, :128].astype(np.int32), b[:, 128:192].astype(np.int32)
        sc = b[:, 192:208].view(np.int8).astype(F32)
        d = f16(b, 208)
        out = np.zeros((n, 256), F32)
        for h in range(2):  # halves of 128: ql 64 bytes, qh 32 bytes, scales 8
            L, H = ql[:, 64 * h:64 * h + 64], qh[:, 32 * h:32 * h + 32]
            parts = [(L[:, :32] & 0xF) | ((H & 3) << 4),
                     (L[:, 32:] & 0xF) | (((H >> 2) & 3) << 4),
                     (L[:, :32] >> 4) | (((H >> 4) & 3) << 4),
                     (L[:, 32:] >> 4) | (((H >> 6) & 3) << 4)]
            for k, q in enumerate(parts):  # 32 values each, two scales of 16
                for s in range(2):
                    ds = d * sc[:, 8 * h + 2 * k + s]
                    out[:, 128 * h + 32 * k + 16 * s:128 * h + 32 * k + 16 * s + 16] = \
                        ds[:, None] * (q[:, 16 * s:16 * s + 16] - 32).astype(F32)
        return out.reshape(-1)
    if ggml_type == 10:  # Q2_K: scales[16] (4-bit scale | 4-bit min << 4), q[64], d, dmin
        sc = b[:, :16].astype(np.int32)
        qs = b[:, 16:80].astype(np.int32)
        d, dmin = f16(b, 80), f16(b, 82)
        out = np.zeros((n, 256), F32)
        i = 0
        for h in range(2):
            q = qs[:, 32 * h:32 * h + 32]
            for shift in (0, 2, 4, 6):
                for part in range(2):  # 16 values per scale
                    dl = d * (sc[:, i] & 0xF).astype(F32)
                    ml = dmin * (sc[:, i] >> 4).astype(F32)
                    v = (q[:, 16 * part:16 * part + 16] >> shift) & 3
                    out[:, 16 * i:16 * i + 16] = dl[:, None] * v.astype(F32) - ml[:, None]
                    i += 1
        return out.reshape(-1)
    if ggml_type == 11:  # Q3_K: hmask[32], q[64], 12 bytes of 6-bit scales, d
        hm = b[:, :32].astype(np.int32)
        qs = b[:, 32:96].astype(np.int32)
        p = b[:, 96:108].astype(np.int32)
        d = f16(b, 108)
        scales = np.zeros((n, 16), np.int32)
        for i in range(16):
            low = p[:, i] & 0xF if i < 8 else p[:, i - 8] >> 4
            high = (p[:, 8 + i % 4] >> (2 * (i // 4))) & 3
            scales[:, i] = (low | (high << 4)) - 32
        out = np.zeros((n, 256), F32)
        i = 0
        bit = 0
        for h in range(2):
            q = qs[:, 32 * h:32 * h + 32]
            for shift in (0, 2, 4, 6):
                for part in range(2):
                    dl = d * scales[:, i].astype(F32)
                    sl = slice(16 * part, 16 * part + 16)
                    v = ((q[:, sl] >> shift) & 3) - np.where((hm[:, sl] >> bit) & 1, 0, 4)
                    out[:, 16 * i:16 * i + 16] = dl[:, None] * v.astype(F32)
                    i += 1
                bit += 1
        return out.reshape(-1)
    raise ValueError(ggml_type)


def tool():
    t = os.environ.get("TF_DEQUANT_GGML")
    if not t:
        raise unittest.SkipTest("TF_DEQUANT_GGML is not set")
    return t


def ours(args, n):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.f32")
        subprocess.run([tool(), *args, out], check=True, timeout=120)
        v = np.fromfile(out, dtype="<f4")
    assert len(v) == n, (len(v), n)
    return v


def same_bits(a, b):
    return np.array_equal(a.view(np.uint32), b.view(np.uint32))


# f16 scales at the edges: the largest, the smallest normal and subnormal, zero, negative zero,
# negatives, ordinary values.
EXTREME_F16 = np.array([65504.0, -65504.0, 6.1035e-05, 5.96e-08, 0.0, -0.0, -1.0, 0.0123, 3.5,
                        -0.5], dtype=np.float16)
SCALE_AT = {2: [0], 3: [0, 2], 6: [0], 7: [0, 2], 8: [0], 10: [80, 82], 11: [108],
            12: [0, 2], 13: [0, 2], 14: [208], 20: [0], 23: [0]}


class DequantTest(unittest.TestCase):
    def test_random_blocks_with_extreme_scales_equal_numpy_bit_for_bit(self):
        rng = np.random.default_rng(19)
        for t, (bs, ts) in LAYOUT.items():
            with self.subTest(type=NAMES[t]):
                blocks = rng.integers(0, 256, size=(40, ts), dtype=np.uint8)
                for at in SCALE_AT.get(t, []):
                    scales = rng.choice(EXTREME_F16, size=40)
                    blocks[:, at:at + 2] = scales.view(np.uint8).reshape(40, 2)
                if t in (0, 1, 30):  # plain floats: no NaN or infinity in the test data
                    blocks = np.frombuffer(
                        rng.standard_normal(40 * ts // {0: 4, 1: 2, 30: 2}[t]).astype(
                            {0: "<f4", 1: "<f2", 30: "<f4"}[t]).tobytes()[:40 * ts],
                        dtype=np.uint8).reshape(40, ts)
                if t == 39:  # the smallest and largest E8M0 bytes among random ones
                    blocks[:4, 0] = [0, 1, 254, 255]
                want = dequant(t, blocks.tobytes())
                with tempfile.TemporaryDirectory() as d:
                    path = os.path.join(d, "blocks")
                    blocks.tofile(path)
                    got = ours(["--type", str(t), path], 40 * bs)
                self.assertTrue(np.all(np.isfinite(want)) or t in (0, 1, 30, 39))
                mismatch = np.flatnonzero(want.view(np.uint32) != got.view(np.uint32))
                self.assertEqual(len(mismatch), 0,
                                 "first at %s: numpy %r, tokenflow %r" % (
                                     mismatch[:3], want[mismatch[:3]], got[mismatch[:3]]))

    def test_every_tensor_of_the_shared_files_equals_numpy(self):
        shared = os.environ.get("TF_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))
        files = [os.path.join(shared, "models", "stories260K", "stories260K-%s.gguf" % q)
                 for q in ("Q8_0", "Q4_0", "Q4_K_M", "Q6_K")]
        files += [os.path.join(shared, "models", "kquant256", "kquant-%s.gguf" % q)
                  for q in ("Q4_K_M", "Q5_K_M", "Q6_K")]
        seen = set()
        for path in files:
            _, tensors = gguf_io.read_gguf(path)
            for name, (dims, t, raw) in tensors.items():
                n = int(np.prod(dims))
                nbytes = n // LAYOUT[t][0] * LAYOUT[t][1]
                want = dequant(t, raw[:nbytes])
                got = ours(["--gguf", path, "--tensor", name], n)
                self.assertTrue(same_bits(want, got), "%s %s (%s)" % (path, name, NAMES[t]))
                seen.add(NAMES[t])
        # Every type these files hold was compared.
        self.assertTrue({"F32", "F16", "Q8_0", "Q4_0", "Q5_0", "Q4_K", "Q5_K", "Q6_K"} <= seen,
                        seen)


class LogitsMixin:
    def logits(self, model, prompts="1,403,407,261;1,500,30,7,9", extra=()):
        exe = os.environ.get("TF_DUMP_LOGITS")
        if not exe:
            raise unittest.SkipTest("TF_DUMP_LOGITS is not set")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "logits")
            subprocess.run([exe, "--model", model, "--prompts", prompts, "--out", out, *extra],
                           check=True, timeout=120, capture_output=True)
            return np.fromfile(out, dtype="<f4")


class GgufModelTest(LogitsMixin, unittest.TestCase):
    def test_stories_gguf_gives_the_checkpoints_logits_and_quantized_copies_stay_close(self):
        shared = os.environ.get("TF_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))
        d = os.path.join(shared, "models", "stories260K")
        ref = self.logits(os.path.join(d, "stories260K.bin"))
        self.assertTrue(np.array_equal(self.logits(os.path.join(d, "stories260K.gguf")), ref))
        scale = np.abs(ref).max()
        for q, bound in (("Q8_0", 0.02), ("Q6_K", 0.02), ("Q4_K_M", 0.15), ("Q4_0", 0.25)):
            with self.subTest(q=q):
                got = self.logits(os.path.join(d, "stories260K-%s.gguf" % q))
                err = np.abs(got - ref).max() / scale
                self.assertLess(err, bound)
                self.assertGreater(err, 0.0)

    def test_k_quant_mixes_run_in_place_close_to_their_dequantized_weights(self):
        # The block kernels read Q4_K / Q5_K / Q6_K in place with activations quantized per 32;
        # --dtype bf16 repacks the same dequantized weights (numpy-checked above) into bf16. The
        # two agree to within activation and bf16 rounding (~1 %), far closer than either is to
        # the F32 model the mixes were quantized from (3-10 %).
        shared = os.environ.get("TF_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))
        d = os.path.join(shared, "models", "kquant256")
        ref = self.logits(os.path.join(d, "kquant-F32.gguf"))
        scale = np.abs(ref).max()
        for q, bound in (("Q4_K_M", 0.15), ("Q5_K_M", 0.08), ("Q6_K", 0.05)):
            with self.subTest(q=q):
                path = os.path.join(d, "kquant-%s.gguf" % q)
                got = self.logits(path)
                repacked = self.logits(path, extra=("--dtype", "bf16"))
                self.assertLess(np.abs(got - repacked).max() / scale, 0.02)
                err = np.abs(got - ref).max() / scale
                self.assertLess(err, bound)
                self.assertGreater(err, 0.005)


# Hugging Face tensor names -> GGUF's, as llama.cpp's converter writes them.
_LLAMA = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
          "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
          "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_proj.bias": "attn_q.bias",
          "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
          "self_attn.q_norm.weight": "attn_q_norm.weight",
          "self_attn.k_norm.weight": "attn_k_norm.weight",
          "post_attention_layernorm.weight": "ffn_norm.weight",
          "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
          "mlp.down_proj.weight": "ffn_down.weight",
          # llama.cpp's mixture-of-experts tensors (the experts themselves are stacked below)
          "mlp.gate.weight": "ffn_gate_inp.weight",
          "block_sparse_moe.gate.weight": "ffn_gate_inp.weight",
          "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
          "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
          "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
          "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight"}
# GGUF architecture names of the Hugging Face model types (Mixtral is llama.cpp's "llama").
_GGUF_ARCH = {"qwen2": "qwen2", "qwen3": "qwen3", "qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe",
              "olmoe": "olmoe", "gemma": "gemma", "gemma2": "gemma2", "gemma3_text": "gemma3",
              "phi3": "phi3"}
# Gemma 2/3's four norms (llama.cpp's ffn_norm is the one before the MLP) and Phi-3's fused
# projections.
_GEMMA2 = {"post_attention_layernorm.weight": "post_attention_norm.weight",
           "pre_feedforward_layernorm.weight": "ffn_norm.weight",
           "post_feedforward_layernorm.weight": "post_ffw_norm.weight"}
_PHI3 = {"self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": "ffn_up.weight"}
_GPT2 = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output",
         "ln_2": "ffn_norm", "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}


_MAMBA = {"norm.weight": "attn_norm.weight", "mixer.in_proj.weight": "ssm_in.weight",
          "mixer.conv1d.weight": "ssm_conv1d.weight", "mixer.conv1d.bias": "ssm_conv1d.bias",
          "mixer.x_proj.weight": "ssm_x.weight", "mixer.dt_proj.weight": "ssm_dt.weight",
          "mixer.dt_proj.bias": "ssm_dt.bias", "mixer.A_log": "ssm_a", "mixer.D": "ssm_d",
          "mixer.out_proj.weight": "ssm_out.weight"}


def _f32_tensor(tensors, name, a):
    """Appends an F32 tensor in GGUF's form (dims innermost first) to tensors."""
    a = np.ascontiguousarray(a, dtype=F32)
    tensors.append((name, list(reversed(a.shape)), 0, a.tobytes()))


def _mamba_to_gguf(cfg, w, path):
    """llama.cpp's "mamba" layout: the mixer's sizes under mamba.ssm.*, A_log written as
    A = -exp(A_log), the convolution squeezed to [inner, kernel], tied embeddings without an
    output tensor."""
    d = cfg["hidden_size"]
    tensors = []

    def add(name, a):
        _f32_tensor(tensors, name, a)

    for name, a in w.items():
        if name == "backbone.embeddings.weight":
            add("token_embd.weight", a)
        elif name == "backbone.norm_f.weight":
            add("output_norm.weight", a)
        else:
            _, _, layer, rest = name.split(".", 3)
            if rest == "mixer.A_log":
                a = -np.exp(a.astype(np.float64))
            if rest == "mixer.conv1d.weight":
                a = a[:, 0, :]
            add("blk.%s.%s" % (layer, _MAMBA[rest]), a)
    meta = {"general.architecture": "mamba",
            "mamba.context_length": gguf_io.U32(1 << 20),
            "mamba.embedding_length": gguf_io.U32(d),
            "mamba.feed_forward_length": gguf_io.U32(0),
            "mamba.attention.head_count": gguf_io.U32(0),
            "mamba.block_count": gguf_io.U32(cfg["num_hidden_layers"]),
            "mamba.ssm.conv_kernel": gguf_io.U32(cfg["conv_kernel"]),
            "mamba.ssm.inner_size": gguf_io.U32(cfg["intermediate_size"]),
            "mamba.ssm.state_size": gguf_io.U32(cfg["state_size"]),
            "mamba.ssm.time_step_rank": gguf_io.U32(-(-d // 16)),
            "mamba.attention.layer_norm_rms_epsilon": gguf_io.F32(cfg["layer_norm_epsilon"]),
            "mamba.ssm.dt_b_c_rms": False,
            "tokenizer.ggml.bos_token_id": gguf_io.U32(cfg["bos_token_id"]),
            "tokenizer.ggml.eos_token_id": gguf_io.U32(cfg["eos_token_id"])}
    gguf_io.write_gguf(path, meta, tensors)
    return cfg


_NEOX = {"input_layernorm": "attn_norm", "attention.query_key_value": "attn_qkv",
         "attention.dense": "attn_output", "post_attention_layernorm": "ffn_norm",
         "mlp.dense_h_to_4h": "ffn_up", "mlp.dense_4h_to_h": "ffn_down"}


def _gptneox_to_gguf(cfg, w, path):
    """llama.cpp's "gptneox" layout (convert_hf_to_gguf's GPTNeoXModel): query_key_value's
    rows regrouped from head by head [q_h; k_h; v_h] to [q; k; v] (weights and biases), the
    rotated dimensions as rope.dimension_count, use_parallel_residual, LayerNorm epsilon."""
    d, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = d // heads
    tensors = []

    def add(name, a):
        _f32_tensor(tensors, name, a)

    for name, a in w.items():
        if name == "gpt_neox.embed_in.weight":
            add("token_embd.weight", a)
        elif name.startswith("gpt_neox.final_layer_norm."):
            add("output_norm." + name.rsplit(".", 1)[1], a)
        elif name == "embed_out.weight":
            add("output.weight", a)
        elif name.endswith("rotary_emb.inv_freq"):
            continue
        else:
            _, _, layer, rest = name.split(".", 3)
            mod, what = rest.rsplit(".", 1)
            if mod == "attention.query_key_value":
                a = a.reshape(heads, 3, hd, *a.shape[1:]).swapaxes(0, 1).reshape(a.shape)
            add("blk.%s.%s.%s" % (layer, _NEOX[mod], what), a)
    meta = {"general.architecture": "gptneox",
            "gptneox.context_length": gguf_io.U32(cfg["max_position_embeddings"]),
            "gptneox.embedding_length": gguf_io.U32(d),
            "gptneox.feed_forward_length": gguf_io.U32(cfg["intermediate_size"]),
            "gptneox.block_count": gguf_io.U32(cfg["num_hidden_layers"]),
            "gptneox.attention.head_count": gguf_io.U32(heads),
            "gptneox.rope.dimension_count": gguf_io.U32(int(cfg["rotary_pct"] * hd)),
            "gptneox.use_parallel_residual": bool(cfg["use_parallel_residual"]),
            "gptneox.attention.layer_norm_epsilon": gguf_io.F32(cfg["layer_norm_eps"]),
            "tokenizer.ggml.bos_token_id": gguf_io.U32(cfg["bos_token_id"]),
            "tokenizer.ggml.eos_token_id": gguf_io.U32(cfg["eos_token_id"])}
    gguf_io.write_gguf(path, meta, tensors)
    return cfg


# The Llama-family checkpoints' tensors outside the blocks, by their GGUF names.
_LLAMA_TOP = {"model.embed_tokens.weight": "token_embd.weight",
              "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}


def _mxfp4_ggml(blocks, scales):
    """OpenAI's MXFP4 ([..., G, 16] bytes holding elements 2i low / 2i + 1 high, [..., G] scales)
    as ggml's blocks ([..., G * 17]: the scale byte, then element j low and j + 16 high)."""
    b = np.asarray(blocks, dtype=np.uint8)
    el = np.empty(b.shape[:-1] + (32,), dtype=np.uint8)
    el[..., 0::2] = b & 0xF
    el[..., 1::2] = b >> 4
    out = np.empty(b.shape[:-1] + (17,), dtype=np.uint8)
    out[..., 0] = scales
    out[..., 1:] = el[..., :16] | (el[..., 16:] << 4)
    return out.reshape(b.shape[:-2] + (b.shape[-2] * 17,))


def _gpt_oss_to_gguf(cfg, w, path):
    """llama.cpp's "gpt-oss" layout (convert_hf_to_gguf's GptOssModel): the experts' interleaved
    gate_up split into ffn_gate_exps / ffn_up_exps (and their biases), MXFP4 kept (type 39, ggml's
    nibble order), the pre-MLP norm as post_attention_norm, sinks, the router as ffn_gate_inp."""
    d, E, I = cfg["hidden_size"], cfg["num_local_experts"], cfg["intermediate_size"]
    tensors = []

    def add(name, a):
        _f32_tensor(tensors, name, a)

    def add_mxfp4(name, blocks, scales, k):
        g = _mxfp4_ggml(blocks, scales)  # [E, rows, k / 32 * 17]
        tensors.append((name, [k, g.shape[1], g.shape[0]], 39, g.tobytes()))

    names = {"input_layernorm.weight": "attn_norm.weight",
             "post_attention_layernorm.weight": "post_attention_norm.weight",
             "self_attn.sinks": "attn_sinks.weight",
             "mlp.router.weight": "ffn_gate_inp.weight", "mlp.router.bias": "ffn_gate_inp.bias",
             "mlp.experts.down_proj_bias": "ffn_down_exps.bias"}
    for n in ("q", "k", "v"):
        for what in ("weight", "bias"):
            names["self_attn.%s_proj.%s" % (n, what)] = "attn_%s.%s" % (n, what)
    names["self_attn.o_proj.weight"] = "attn_output.weight"
    names["self_attn.o_proj.bias"] = "attn_output.bias"
    for name, a in w.items():
        if name in _LLAMA_TOP:
            add(_LLAMA_TOP[name], a)
        else:
            _, _, layer, rest = name.split(".", 3)
            b = "blk.%s." % layer
            if rest == "mlp.experts.gate_up_proj_bias":
                add(b + "ffn_gate_exps.bias", a[:, 0::2])
                add(b + "ffn_up_exps.bias", a[:, 1::2])
            elif rest == "mlp.experts.gate_up_proj_blocks":
                s = w[name.replace("_blocks", "_scales")]
                add_mxfp4(b + "ffn_gate_exps.weight", a[:, 0::2], s[:, 0::2], d)
                add_mxfp4(b + "ffn_up_exps.weight", a[:, 1::2], s[:, 1::2], d)
            elif rest == "mlp.experts.down_proj_blocks":
                add_mxfp4(b + "ffn_down_exps.weight", a, w[name.replace("_blocks", "_scales")], I)
            elif rest.endswith("_scales"):
                continue
            else:
                add(b + names[rest], a)
    rope = cfg["rope_scaling"]
    meta = {"general.architecture": "gpt-oss",
            "gpt-oss.context_length": gguf_io.U32(cfg["max_position_embeddings"]),
            "gpt-oss.embedding_length": gguf_io.U32(d),
            "gpt-oss.feed_forward_length": gguf_io.U32(I),
            "gpt-oss.block_count": gguf_io.U32(cfg["num_hidden_layers"]),
            "gpt-oss.attention.head_count": gguf_io.U32(cfg["num_attention_heads"]),
            "gpt-oss.attention.head_count_kv": gguf_io.U32(cfg["num_key_value_heads"]),
            "gpt-oss.attention.key_length": gguf_io.U32(cfg["head_dim"]),
            "gpt-oss.attention.value_length": gguf_io.U32(cfg["head_dim"]),
            "gpt-oss.attention.layer_norm_rms_epsilon": gguf_io.F32(cfg["rms_norm_eps"]),
            "gpt-oss.attention.sliding_window": gguf_io.U32(cfg["sliding_window"]),
            "gpt-oss.rope.freq_base": gguf_io.F32(cfg["rope_theta"]),
            "gpt-oss.rope.scaling.type": "yarn",
            "gpt-oss.rope.scaling.factor": gguf_io.F32(rope["factor"]),
            "gpt-oss.rope.scaling.original_context_length": gguf_io.U32(
                rope["original_max_position_embeddings"]),
            "gpt-oss.expert_count": gguf_io.U32(E),
            "gpt-oss.expert_used_count": gguf_io.U32(cfg["num_experts_per_tok"]),
            "gpt-oss.expert_feed_forward_length": gguf_io.U32(I),
            "tokenizer.ggml.bos_token_id": gguf_io.U32(1),
            "tokenizer.ggml.eos_token_id": gguf_io.U32(cfg["eos_token_id"])}
    gguf_io.write_gguf(path, meta, tensors)
    return cfg


def _t5_to_gguf(cfg, w, path, extra_meta=None):
    """llama.cpp's "t5" layout (convert_hf_to_gguf's T5Model): enc.blk.N / dec.blk.N names, the
    position biases [buckets, heads] (ne [heads, buckets]), t5.* sizes, the checkpoint's lm_head
    as output when it has one."""
    tensors = []
    gated = cfg["feed_forward_proj"].startswith("gated")
    block = {"layer.0.layer_norm.weight": "attn_norm.weight",
             "layer.0.SelfAttention.relative_attention_bias.weight": "attn_rel_b.weight"}
    for m in "qkv":
        block["layer.0.SelfAttention.%s.weight" % m] = "attn_%s.weight" % m
        block["layer.1.EncDecAttention.%s.weight" % m] = "cross_attn_%s.weight" % m
    block["layer.0.SelfAttention.o.weight"] = "attn_o.weight"
    block["layer.1.EncDecAttention.o.weight"] = "cross_attn_o.weight"
    for name, a in w.items():
        if name == "shared.weight":
            _f32_tensor(tensors, "token_embd.weight", a)
        elif name == "lm_head.weight":
            _f32_tensor(tensors, "output.weight", a)
        elif name.endswith("final_layer_norm.weight"):
            _f32_tensor(tensors, name[:3] + ".output_norm.weight", a)
        else:
            stack, _, layer, rest = name.split(".", 3)
            ffn = "layer.2." if stack == "decoder" else "layer.1."
            names = dict(block, **{
                ffn + "layer_norm.weight": "ffn_norm.weight",
                ffn + "DenseReluDense.wi_0.weight": "ffn_gate.weight",
                ffn + "DenseReluDense.wi_1.weight": "ffn_up.weight",
                ffn + "DenseReluDense.wi.weight": "ffn_up.weight",
                ffn + "DenseReluDense.wo.weight": "ffn_down.weight"})
            if stack == "decoder":
                names["layer.1.layer_norm.weight"] = "cross_attn_norm.weight"
            _f32_tensor(tensors, "%s.blk.%s.%s" % (stack[:3], layer, names[rest]), a)
    meta = {"general.architecture": "t5",
            "t5.context_length": gguf_io.U32(cfg["n_positions"]),
            "t5.embedding_length": gguf_io.U32(cfg["d_model"]),
            "t5.feed_forward_length": gguf_io.U32(cfg["d_ff"]),
            "t5.block_count": gguf_io.U32(cfg["num_layers"]),
            "t5.decoder_block_count": gguf_io.U32(cfg["num_decoder_layers"]),
            "t5.attention.head_count": gguf_io.U32(cfg["num_heads"]),
            "t5.attention.key_length": gguf_io.U32(cfg["d_kv"]),
            "t5.attention.value_length": gguf_io.U32(cfg["d_kv"]),
            "t5.attention.layer_norm_epsilon": gguf_io.F32(cfg["layer_norm_epsilon"]),
            "t5.attention.relative_buckets_count": gguf_io.U32(
                cfg["relative_attention_num_buckets"]),
            "t5.attention.layer_norm_rms_epsilon": gguf_io.F32(cfg["layer_norm_epsilon"]),
            "t5.decoder_start_token_id": gguf_io.U32(cfg["decoder_start_token_id"]),
            "tokenizer.ggml.eos_token_id": gguf_io.U32(cfg["eos_token_id"])}
    assert gated == any(t[0].endswith("ffn_gate.weight") for t in tensors)
    meta.update(extra_meta or {})
    gguf_io.write_gguf(path, meta, tensors)
    return cfg


def hf_to_gguf(kind, seed, path, extra_meta=None):
    """Writes make_checkpoints' checkpoint (kind, seed) as GGUF, F32, the way llama.cpp's
    converter lays it out: GGUF names, dims innermost first, GPT-2's Conv1D matrices transposed
    to [out, in], and for "llama" the rows of Q and K permuted so that RoPE rotates adjacent
    pairs (per head: the first half's row i goes to row 2i, the second half's to 2i + 1)."""
    cfg = make_checkpoints.KINDS[kind]("F32")
    rng = np.random.default_rng(seed)
    if cfg["model_type"] == "mamba":
        return _mamba_to_gguf(cfg, make_checkpoints._mamba_weights(cfg, rng), path)
    if cfg["model_type"] == "t5":
        return _t5_to_gguf(cfg, make_checkpoints._t5_weights(cfg, rng), path, extra_meta)
    if cfg["model_type"] == "gpt_neox":
        return _gptneox_to_gguf(cfg, make_checkpoints._gptj_weights(cfg, rng), path)
    if cfg["model_type"] == "gpt_oss":
        return _gpt_oss_to_gguf(cfg, make_checkpoints._gpt_oss_weights(cfg, rng), path)
    gpt2 = kind == "gpt2"
    gemma = cfg.get("model_type", "").startswith("gemma")
    w = make_checkpoints._gpt2_weights(cfg, rng, False) if gpt2 else \
        make_checkpoints._gemma_weights(cfg, rng) if gemma else \
        make_checkpoints._llama_weights(cfg, rng)
    arch = "gpt2" if gpt2 else _GGUF_ARCH.get(cfg["model_type"], "llama")
    tensors = []

    def add(name, a):
        _f32_tensor(tensors, name, a)

    if gpt2:
        d, heads = cfg["n_embd"], cfg["n_head"]
        meta = {"gpt2.context_length": gguf_io.U32(cfg["n_positions"]),
                "gpt2.embedding_length": gguf_io.U32(d),
                "gpt2.feed_forward_length": gguf_io.U32(cfg["n_inner"] or 4 * d),
                "gpt2.block_count": gguf_io.U32(cfg["n_layer"]),
                "gpt2.attention.head_count": gguf_io.U32(heads),
                "gpt2.attention.layer_norm_epsilon": gguf_io.F32(cfg["layer_norm_epsilon"])}
        for name, a in w.items():
            name = name[len("transformer."):]
            if name == "wte.weight":
                add("token_embd.weight", a)
            elif name == "wpe.weight":
                add("position_embd.weight", a)
            elif name.startswith("ln_f."):
                add("output_norm." + name[5:], a)
            else:
                _, layer, rest = name.split(".", 2)
                mod, what = rest.rsplit(".", 1)
                add("blk.%s.%s.%s" % (layer, _GPT2[mod], what), a.T if a.ndim == 2 else a)
    else:
        d, heads = cfg["hidden_size"], cfg["num_attention_heads"]
        kv = cfg.get("num_key_value_heads") or heads
        hd = cfg.get("head_dim") or d // heads
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        meta = {arch + ".context_length": gguf_io.U32(cfg["max_position_embeddings"]),
                arch + ".embedding_length": gguf_io.U32(d),
                arch + ".feed_forward_length": gguf_io.U32(cfg["intermediate_size"]),
                arch + ".block_count": gguf_io.U32(cfg["num_hidden_layers"]),
                arch + ".attention.head_count": gguf_io.U32(heads),
                arch + ".attention.head_count_kv": gguf_io.U32(kv),
                arch + ".attention.key_length": gguf_io.U32(hd),
                arch + ".attention.layer_norm_rms_epsilon": gguf_io.F32(cfg["rms_norm_eps"]),
                arch + ".rope.freq_base": gguf_io.F32(rope.get("rope_theta", cfg.get("rope_theta")))}
        kind_ = rope.get("rope_type", rope.get("type"))
        if cfg.get("partial_rotary_factor"):
            meta[arch + ".rope.dimension_count"] = gguf_io.U32(int(hd * cfg["partial_rotary_factor"]))
        if gemma:
            # llama.cpp's Gemma keys: soft-caps and the window (Gemma 2/3); the layer pattern and
            # Gemma 3's local RoPE base are implied by the architecture; norms stored as 1 + w.
            if cfg.get("attn_logit_softcapping"):
                meta[arch + ".attn_logit_softcapping"] = gguf_io.F32(cfg["attn_logit_softcapping"])
                meta[arch + ".final_logit_softcapping"] = gguf_io.F32(cfg["final_logit_softcapping"])
            if cfg.get("sliding_window"):
                meta[arch + ".attention.sliding_window"] = gguf_io.U32(cfg["sliding_window"])
            for name in [n for n in w if n.endswith("norm.weight")]:
                w[name] = w[name] + 1.0
        if kind_ == "linear":
            meta[arch + ".rope.scaling.type"] = "linear"
            meta[arch + ".rope.scaling.factor"] = gguf_io.F32(rope["factor"])
        elif kind_ == "longrope":  # Phi-3: the factor tensors, the pretrained context
            orig = cfg["original_max_position_embeddings"]
            scale = cfg["max_position_embeddings"] / orig
            meta[arch + ".rope.scaling.original_context_length"] = gguf_io.U32(orig)
            meta[arch + ".rope.scaling.attn_factor"] = gguf_io.F32(
                np.sqrt(1 + np.log(scale) / np.log(orig)))
            add("rope_factors_short.weight", np.array(rope["short_factor"]))
            add("rope_factors_long.weight", np.array(rope["long_factor"]))
        if kind_ == "yarn":  # llama.cpp's keys
            meta[arch + ".rope.scaling.type"] = "yarn"
            meta[arch + ".rope.scaling.factor"] = gguf_io.F32(rope["factor"])
            meta[arch + ".rope.scaling.original_context_length"] = gguf_io.U32(
                rope["original_max_position_embeddings"])
        elif kind_ == "llama3":  # llama.cpp's converter: one divisor per frequency, rope_freqs
            lo, hi, f = rope["low_freq_factor"], rope["high_freq_factor"], rope["factor"]
            L = rope["original_max_position_embeddings"]
            base = 1.0 / cfg["rope_theta"] ** (np.arange(0, hd, 2) / hd)
            factors = []
            for fr in base:
                wl = 2 * np.pi / fr
                if wl < L / hi:
                    factors.append(1.0)
                elif wl > L / lo:
                    factors.append(f)
                else:
                    sm = (L / wl - lo) / (hi - lo)
                    factors.append(1.0 / ((1 - sm) / f + sm))
            add("rope_freqs.weight", np.array(factors))

        E = cfg.get("num_local_experts") or cfg.get("num_experts")
        if E:  # llama.cpp's {arch}.expert_* keys
            meta[arch + ".expert_count"] = gguf_io.U32(E)
            meta[arch + ".expert_used_count"] = gguf_io.U32(cfg["num_experts_per_tok"])
            if "moe_intermediate_size" in cfg:
                meta[arch + ".expert_feed_forward_length"] = gguf_io.U32(
                    cfg["moe_intermediate_size"])
            if cfg.get("shared_expert_intermediate_size"):
                meta[arch + ".expert_shared_feed_forward_length"] = gguf_io.U32(
                    cfg["shared_expert_intermediate_size"])
            # Experts stacked [E, rows, cols] as ffn_{gate,up,down}_exps, from per-expert
            # tensors (v4 names; Mixtral's w1 / w3 / w2).
            stacks, stacked = {}, {}
            for name in [n for n in w if ".experts." in n]:
                _, _, layer, rest = name.split(".", 3)
                a = w.pop(name)
                if rest.endswith("experts.gate_up_proj"):  # transformers v5: [E, 2I, H]
                    I = a.shape[1] // 2
                    stacked[(int(layer), "gate")], stacked[(int(layer), "up")] = a[:, :I], a[:, I:]
                    continue
                if rest.endswith("experts.down_proj"):
                    stacked[(int(layer), "down")] = a
                    continue
                e, which = rest.split(".experts.")[1].split(".")[:2]
                which = {"w1": "gate", "w3": "up", "w2": "down", "gate_proj": "gate",
                         "up_proj": "up", "down_proj": "down"}[which]
                stacks.setdefault((int(layer), which), {})[int(e)] = a
            for key, per in stacks.items():
                stacked[key] = np.stack([per[e] for e in range(E)])
            for (layer, which), a in sorted(stacked.items()):
                add("blk.%d.ffn_%s_exps.weight" % (layer, which), a)

        def permute(a, n):  # llama.cpp's converter: halves -> adjacent pairs
            return a.reshape(n, 2, a.shape[0] // n // 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)

        for name, a in w.items():
            if name in _LLAMA_TOP:
                add(_LLAMA_TOP[name], a)
            else:
                _, _, layer, rest = name.split(".", 3)
                if arch == "llama" and rest in ("self_attn.q_proj.weight", "self_attn.k_proj.weight"):
                    a = permute(a, heads if "q_proj" in rest else kv)
                if rest == "mlp.shared_expert_gate.weight":
                    a = a.reshape(-1)  # llama.cpp keeps this [1, hidden] gate as a vector
                names = dict(_LLAMA, **(_GEMMA2 if arch in ("gemma2", "gemma3") else {}),
                             **(_PHI3 if arch == "phi3" else {}))
                add("blk.%s.%s" % (layer, names[rest]), a)
    meta = dict({"general.architecture": arch, "tokenizer.ggml.bos_token_id": gguf_io.U32(cfg["bos_token_id"]),
                 "tokenizer.ggml.eos_token_id": gguf_io.U32(cfg["eos_token_id"])}, **meta)
    gguf_io.write_gguf(path, meta, tensors)
    return cfg


class GgufArchitecturesTest(LogitsMixin, unittest.TestCase):
    """Every architecture tokenflow runs from safetensors runs from GGUF: the same random
    checkpoint written both ways gives the same logits (bit for bit where the layouts are the
    same; llama's permuted Q/K rows reorder the head's dot products, so within f32 rounding)."""

    def check(self, kind, exact):
        with tempfile.TemporaryDirectory() as d:
            hf = make_checkpoints.write_checkpoint(os.path.join(d, "hf"), kind, seed=4)
            g = os.path.join(d, kind + ".gguf")
            hf_to_gguf(kind, 4, g)
            prompts = "5,17,300,42,7;999,1,2"
            ref = self.logits(hf, prompts)
            got = self.logits(g, prompts)
            self.assertEqual(got.shape, ref.shape)
            if exact:
                self.assertTrue(np.array_equal(got, ref))
            else:
                np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4 * np.abs(ref).max())
            # And with weights packed to bf16 from either file, still the same model: the same bits
            # where the layouts are the same. Where they are not (llama's permuted Q/K rows sum in
            # another order), a few activations round to bf16 the other way, each moving logits
            # by a fraction of one bf16 step: within 2^-8 of the largest logit (seen: 2e-3 with
            # the AMX bf16 tiles in the ASan build).
            b16 = self.logits(g, prompts, extra=("--dtype", "bf16"))
            b16_ref = self.logits(hf, prompts, extra=("--dtype", "bf16"))
            if exact:
                self.assertTrue(np.array_equal(b16, b16_ref))
            else:
                np.testing.assert_allclose(b16, b16_ref, rtol=0, atol=2.0 ** -8 * np.abs(ref).max())

    def test_gpt2(self):
        self.check("gpt2", exact=True)

    def test_gpt_oss_mxfp4(self):
        # The same MXFP4 blocks in ggml's order, gate and up split: the same model but for YaRN's
        # correction range, which llama.cpp rounds to whole dimensions (gpt-oss's config says
        # not to): against numpy with that range rounded.
        with tempfile.TemporaryDirectory() as d:
            g = os.path.join(d, "gpt-oss.gguf")
            cfg = hf_to_gguf("gpt_oss", 4, g)
            hf = make_checkpoints.write_checkpoint(os.path.join(d, "hf"), "gpt_oss", seed=4)
            model = np_model.load_hf(hf)
            model.rope = np_model.Rope(dict(cfg, rope_scaling=dict(cfg["rope_scaling"],
                                                                  truncate=True)), cfg["head_dim"])
            ids = [5, 17, 300, 42, 7, 9, 11]
            ref = model.logits(ids)
            # f32 activations (the portable table): numpy's dequantized experts exactly (the int8
            # tables quantize activations for MXFP4 as llama.cpp does: test_reference.py).
            isa = os.environ.get("TOKENFLOW_ISA")
            os.environ["TOKENFLOW_ISA"] = "portable"
            try:
                got = self.logits(g, ",".join(map(str, ids))).reshape(-1, model.vocab_size)
            finally:
                if isa is None:
                    del os.environ["TOKENFLOW_ISA"]
                else:
                    os.environ["TOKENFLOW_ISA"] = isa
            self.assertEqual(got.shape, ref.shape)
            self.assertLess(np.abs(got - ref).max() / np.abs(ref).max(), 1e-4)

    def test_gptneox_parallel_and_sequential(self):
        # The same rows in another order: q, k and v are the same dot products, bit for bit.
        self.check("gpt_neox", exact=True)
        self.check("gpt_neox_seq", exact=True)

    def t5_generate(self, model, tokenizer):
        r = subprocess.run([os.environ["TOKENFLOW_BIN"], "generate", "-m", model, "--tokenizer",
                            tokenizer, "--prompt-ids", "5,17,300,42,9,77", "-n", "6", "-t", "0",
                            "--ignore-eos", "--logprobs", "3", "--no-echo"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        steps = [re.match(r"\s*(\d+)\s+\S+\s+(-?[\d.]+)", line)
                 for line in r.stderr.splitlines()]
        return [(int(m.group(1)), float(m.group(2))) for m in steps if m]

    def test_t5(self):
        # llama.cpp's "t5" (issue 51): the same checkpoint from safetensors and from GGUF. v1.1
        # (its own head): the same tokens and logprobs. v1.0 (tied): llama.cpp scales nothing
        # before the head, so the GGUF's logits are the checkpoint's times sqrt(d_model): the
        # same greedy tokens, and logprobs of the unscaled logits (numpy's, computed so).
        import np_model
        from test_t5 import write_vocab
        for kind in ("t5_v1_1", "t5"):
            with self.subTest(kind=kind), tempfile.TemporaryDirectory() as d:
                hf = make_checkpoints.write_checkpoint(os.path.join(d, "hf"), kind, seed=4)
                cfg = make_checkpoints.KINDS[kind]("F32")
                vocab = os.path.join(d, "tokenizer.bin")
                write_vocab(vocab, cfg["vocab_size"])
                g = os.path.join(d, kind + ".gguf")
                hf_to_gguf(kind, 4, g)
                a, b = self.t5_generate(hf, vocab), self.t5_generate(g, vocab)
                self.assertEqual(len(a), 6)
                self.assertEqual([t for t, _ in a], [t for t, _ in b])
                if kind == "t5_v1_1":
                    self.assertEqual(a, b)
                    continue
                ref = np_model.load_hf(hf)
                ref.tied = False
                ref.w["lm_head.weight"] = ref.w["shared.weight"]
                logits = ref.logits([5, 17, 300, 42, 9, 77], [0] + [t for t, _ in b][:-1])
                for row, (t, lp) in zip(logits, b):
                    want = row[t] - row.max() - np.log(np.exp(row - row.max()).sum())
                    self.assertAlmostEqual(lp, want, delta=2e-4)

    def test_mamba(self):
        # A = -exp(A_log) computed by the converter in float64 and stored as f32 (not the
        # float32 exp tokenflow computes from A_log): within f32 rounding, not bit for bit.
        self.check("mamba", exact=False)

    def test_qwen2(self):
        self.check("qwen2", exact=True)

    def test_llama_gqa(self):
        self.check("llama_gqa", exact=False)

    def test_llama_tied(self):
        self.check("llama_tied", exact=False)

    def test_llama31_rope_freqs(self):
        self.check("llama31", exact=False)

    def test_qwen3_yarn(self):
        self.check("qwen3", exact=True)

    # Mixtures of experts, the experts stacked as ffn_{gate,up,down}_exps.
    def test_mixtral(self):
        self.check("mixtral", exact=False)

    def test_qwen2moe_shared_expert(self):
        self.check("qwen2moe", exact=True)

    def test_qwen3moe(self):
        self.check("qwen3moe", exact=True)

    def test_olmoe(self):
        self.check("olmoe", exact=True)

    # Gemma (norms stored as 1 + w, as llama.cpp's converter writes them), Gemma 2 (soft-caps,
    # every 2nd layer global), Gemma 3 (every 6th global, local RoPE base 10000), Phi-3 (fused
    # projections, LongRoPE factors as tensors, partial rotary). llama.cpp derives Gemma's score
    # scale from head_dim, so these checkpoints keep query_pre_attn_scalar = head_dim.
    def test_gemma(self):
        self.check("gemma", exact=False)

    def test_gemma2(self):
        self.check("gemma2_gguf", exact=False)

    def test_gemma3(self):
        self.check("gemma3_gguf", exact=False)

    def test_phi3_longrope(self):
        self.check("phi3", exact=False)  # the attention factor stored as F32


def tokenflow(*args):
    exe = os.environ.get("TOKENFLOW_BIN")
    if not exe:
        raise unittest.SkipTest("TOKENFLOW_BIN is not set")
    return subprocess.run([exe, *args], check=True, timeout=300, capture_output=True, text=True)


def check_layout(test, path):
    """The format's invariants, read by gguf_io (independent of tokenflow's reader): version 3,
    general.alignment 32, every tensor's data at a multiple of it, exactly its type's bytes, the
    tensors packed in order without overlap up to the end of the file."""
    with open(path, "rb") as f:
        head = f.read(8)
    test.assertEqual(head[:4], b"GGUF")
    test.assertEqual(int.from_bytes(head[4:8], "little"), 3)
    meta, tensors = gguf_io.read_gguf(path)
    test.assertEqual(meta["general.alignment"], 32)
    for name, (dims, t, data) in tensors.items():
        bs, ts = LAYOUT[t]
        n = int(np.prod(dims))
        test.assertEqual(dims[0] % bs, 0, name)
        need = n // bs * ts
        test.assertGreaterEqual(len(data), need, name)
        test.assertLess(len(data) - need, 32, name)  # only the padding to the next tensor
    return meta, tensors


def rel_rms(a, b):
    return float(np.sqrt(np.mean((a - b) ** 2) / np.mean(b ** 2)))


class ConvertTest(LogitsMixin, unittest.TestCase):
    """`tokenflow convert` and `quantize` to GGUF: files that follow the format, load back to the
    same model and the same tokens, quantized within each format's error (numpy dequantizes)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        shared = os.environ.get("TF_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))
        cls.stories = os.path.join(shared, "models", "stories260K")
        cls.kquant = os.path.join(shared, "models", "kquant256")

    @classmethod
    def tearDownClass(cls):
        import shutil
        shutil.rmtree(cls.tmp)

    def test_llama2c_checkpoint_to_gguf_is_the_same_model(self):
        out = os.path.join(self.tmp, "s-f32.gguf")
        tokenflow("convert", os.path.join(self.stories, "stories260K.bin"), out, "--dtype", "f32")
        meta, tensors = check_layout(self, out)
        self.assertEqual(meta["general.architecture"], "llama")
        self.assertEqual(len(meta["tokenizer.ggml.tokens"]), 512)
        self.assertEqual(meta["tokenizer.ggml.token_type"][:4], [2, 3, 3, 6])
        ref = self.logits(os.path.join(self.stories, "stories260K.bin"))
        self.assertTrue(np.array_equal(self.logits(out), ref))
        # llama.cpp's own conversion of the same checkpoint holds the same F32 values.
        _, theirs = gguf_io.read_gguf(os.path.join(self.stories, "stories260K.gguf"))
        for name, (dims, t, data) in tensors.items():
            self.assertEqual(dims, theirs[name][0], name)
            n = int(np.prod(dims))
            self.assertTrue(np.array_equal(np.frombuffer(data[:4 * n], "<f4"),
                                           np.frombuffer(theirs[name][2][:4 * n], "<f4")), name)
        text = "Once upon a time, a little dog found a red ball."
        ids = tokenflow("tokenize", "-m", out, text).stdout
        self.assertEqual(ids, tokenflow("tokenize", "-m", os.path.join(self.stories, "stories260K.bin"),
                                        text).stdout)

    def test_quantized_conversions_stay_within_their_formats_error(self):
        src = os.path.join(self.tmp, "ref-f32.gguf")
        tokenflow("convert", os.path.join(self.stories, "stories260K.bin"), src, "--dtype", "f32")
        _, f32 = gguf_io.read_gguf(src)
        ref = self.logits(os.path.join(self.stories, "stories260K.bin"))
        scale = np.abs(ref).max()
        # stories260K is 64 wide: K-quants fall back to Q5_0 / Q8_0 as llama.cpp's do.
        for dtype, want, bound, logit_bound in (("q8_0", 8, 0.01, 0.02), ("q4_0", 2, 0.12, 0.3),
                                                ("q5_1", 7, 0.05, 0.1), ("q4_k_m", 6, 0.07, 0.2)):
            with self.subTest(dtype=dtype):
                out = os.path.join(self.tmp, "s-%s.gguf" % dtype)
                tokenflow("convert", os.path.join(self.stories, "stories260K.bin"), out,
                          "--dtype", dtype)
                _, tensors = check_layout(self, out)
                seen = set()
                for name, (dims, t, data) in tensors.items():
                    n = int(np.prod(dims))
                    orig = np.frombuffer(f32[name][2][:4 * n], "<f4")
                    if len(dims) == 1:
                        self.assertEqual(t, 0, name)
                        continue
                    seen.add(t)
                    bs, ts = LAYOUT[t]
                    got = dequant(t, data[:n // bs * ts])
                    self.assertLess(rel_rms(got, orig), bound, (name, NAMES[t]))
                self.assertIn(want, seen)
                if dtype == "q4_k_m":  # the fallbacks of a 64-wide model, as llama.cpp's file
                    # (which also stores the shared classifier as output.weight; ours ties it)
                    _, theirs = gguf_io.read_gguf(os.path.join(self.stories,
                                                               "stories260K-Q4_K_M.gguf"))
                    self.assertEqual(set(theirs) - set(tensors), {"output.weight"})
                    self.assertEqual({k: v[1] for k, v in tensors.items()},
                                     {k: theirs[k][1] for k in tensors})
                err = np.abs(self.logits(out) - ref).max() / scale
                self.assertLess(err, logit_bound)

    def test_hugging_face_checkpoints_convert_to_the_same_logits(self):
        for kind, exact in (("gpt2", True), ("qwen2", True), ("llama_gqa", False),
                            ("qwen2moe", True), ("mixtral_v5", False)):
            with self.subTest(kind=kind):
                hf = make_checkpoints.write_checkpoint(os.path.join(self.tmp, kind), kind, seed=6)
                out = os.path.join(self.tmp, kind + ".gguf")
                tokenflow("convert", hf, out, "--dtype", "f32", "--tokenizer", "none")
                check_layout(self, out)
                prompts = "5,17,300,42,7;999,1,2"
                ref, got = self.logits(hf, prompts), self.logits(out, prompts)
                if exact:
                    self.assertTrue(np.array_equal(got, ref))
                else:
                    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4 * np.abs(ref).max())
                # The converter's layout is the one hf_to_gguf writes from llama.cpp's rules.
                theirs = os.path.join(self.tmp, kind + "-rules.gguf")
                hf_to_gguf(kind, 6, theirs)
                _, a = gguf_io.read_gguf(out)
                _, b = gguf_io.read_gguf(theirs)
                self.assertEqual(sorted(a), sorted(b))
                for name in a:
                    n = int(np.prod(a[name][0]))
                    self.assertEqual(a[name][0], b[name][0], name)
                    self.assertTrue(np.array_equal(np.frombuffer(a[name][2][:4 * n], "<f4"),
                                                   np.frombuffer(b[name][2][:4 * n], "<f4")), name)

    def test_gpt2_with_its_tokenizer_json_gives_the_same_ids_from_the_gguf(self):
        shared = os.environ.get("TF_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))
        tok = os.path.join(shared, "tokenizers", "gpt2")
        cfg = make_checkpoints.KINDS["gpt2"]("F32")
        cfg["vocab_size"] = 50257
        hf = os.path.join(self.tmp, "gpt2-real-vocab")
        os.makedirs(hf)
        import json
        import safetensors_io
        with open(os.path.join(hf, "config.json"), "w") as f:
            json.dump(cfg, f)
        safetensors_io.save(os.path.join(hf, "model.safetensors"),
                            make_checkpoints._gpt2_weights(cfg, np.random.default_rng(2), False), "F32")
        out = os.path.join(self.tmp, "gpt2-real-vocab.gguf")
        tokenflow("convert", hf, out, "--dtype", "q8_0", "--tokenizer", tok)
        meta, _ = check_layout(self, out)
        self.assertEqual(meta["tokenizer.ggml.model"], "gpt2")
        self.assertEqual(meta["tokenizer.ggml.pre"], "gpt-2")
        self.assertEqual(len(meta["tokenizer.ggml.tokens"]), 50257)
        for text in ("Hello world, it's 2024!", "  spaces\tand\nlines ünïcödé 日本語 🙂"):
            self.assertEqual(tokenflow("tokenize", "-m", out, text).stdout,
                             tokenflow("tokenize", "-m", hf, "--tokenizer", tok, text).stdout)
        # A vocabulary larger than the model's embedding is refused.
        small = make_checkpoints.write_checkpoint(os.path.join(self.tmp, "gpt2-small"), "gpt2")
        exe = os.environ["TOKENFLOW_BIN"]
        p = subprocess.run([exe, "convert", small, os.path.join(self.tmp, "x.gguf"), "--tokenizer", tok],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("has 50257 tokens but the model only 1000", p.stderr)

    def test_gguf_requantized_keeps_its_metadata_and_mixes_as_llama_cpp(self):
        src = os.path.join(self.kquant, "kquant-F32.gguf")
        meta_in, f32 = gguf_io.read_gguf(src)
        ref = self.logits(src)
        scale = np.abs(ref).max()
        for dtype, base, bound in (("q4_k_m", 12, 0.15), ("q5_k_m", 13, 0.08), ("q6_k", 14, 0.05)):
            with self.subTest(dtype=dtype):
                out = os.path.join(self.tmp, "k-%s.gguf" % dtype)
                tokenflow("quantize", src, out, "--dtype", dtype)
                meta, tensors = check_layout(self, out)
                for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "llama.block_count"):
                    self.assertEqual(meta[key], meta_in[key], key)
                # Every tensor gets the type llama.cpp's quantizer gave it in the shared mixes
                # (Q6_K for the output and for attn_v / ffn_down of the layers given more bits).
                _, theirs = gguf_io.read_gguf(os.path.join(
                    self.kquant, "kquant-%s.gguf" % dtype.upper()))
                self.assertEqual({k: v[1] for k, v in tensors.items()},
                                 {k: v[1] for k, v in theirs.items()})
                self.assertEqual(tensors["blk.0.attn_q.weight"][1], base)
                for name, (dims, t, data) in tensors.items():
                    if t == 0:
                        continue
                    n = int(np.prod(dims))
                    bs, ts = LAYOUT[t]
                    err = rel_rms(dequant(t, data[:n // bs * ts]),
                                  np.frombuffer(f32[name][2][:4 * n], "<f4"))
                    self.assertLess(err, {12: 0.1, 13: 0.05, 14: 0.03}[t], (name, NAMES[t]))
                err = np.abs(self.logits(out) - ref).max() / scale
                self.assertLess(err, bound)
                self.assertGreater(err, 0.0)

    def test_bad_requests_are_clear_errors_that_write_nothing(self):
        out = os.path.join(self.tmp, "never.gguf")
        exe = os.environ.get("TOKENFLOW_BIN")
        if not exe:
            raise unittest.SkipTest("TOKENFLOW_BIN is not set")
        for args, msg in (
                (["convert", os.path.join(self.stories, "stories260K.bin"), out, "--dtype", "q3_k"],
                 "unknown --dtype 'q3_k'"),
                (["convert", os.path.join(self.stories, "stories260K.gguf"), out],
                 "is a GGUF already"),
                (["convert", os.path.join(self.stories, "stories260K.bin"), out[:-5] + ".bin"],
                 "must end in .gguf"),
                (["quantize", os.path.join(self.stories, "stories260K.gguf"), out, "--dtype", "int8"],
                 "unknown --dtype 'int8'")):
            p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn(msg, p.stderr, args)
            self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
