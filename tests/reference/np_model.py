"""Independent numpy reference forward passes (float64, no KV cache).

Each model computes the logits of every position of a whole sequence with
plain causal attention. A cached implementation must produce the same
logits, so this is the reference for prefill and for every decode step.

API:
    load_hf(model_dir) -> model       (GPT2LMHeadModel, LlamaForCausalLM,
                                       MistralForCausalLM, Qwen2ForCausalLM)
    load_llama2c(bin_path) -> model   (llama2.c legacy .bin)
    model.logits(ids) -> float64 array [len(ids), vocab]
    model.vocab_size
    greedy(model, prompt_ids, n) -> list of n generated ids

The decoder-only transformers live here; the building blocks (norms, attention, Rope, the
mixture of experts) in np_blocks, the encoders and T5 in np_encoders, the models with a
recurrent state (Mamba, Qwen3-Next) in np_recurrent; all of them reachable as np_model.*.
"""

import json
import math
import os
import struct

import numpy as np

import safetensors_io
from np_blocks import (F, Rope, _f, _moe_of, causal_attention, gelu_tanh, layer_norm, moe,  # noqa: F401
                       rms_norm, rope_adjacent, rope_rotate_half, silu, softmax)
from np_encoders import T5, Bert, JinaBert, NomicBert, gelu_erf, t5_position_bucket  # noqa: F401
from np_recurrent import Mamba, Qwen3Next, gated_delta_chunked, gated_delta_recurrent  # noqa: F401


# ---------------------------------------------------------------- GPT-2

class GPT2:
    """HF GPT2LMHeadModel. Conv1D weights are [in, out]: y = x @ W + b."""

    def __init__(self, cfg, w):
        self.cfg = cfg
        self.d = cfg["n_embd"]
        self.n_head = cfg["n_head"]
        self.n_layer = cfg["n_layer"]
        self.eps = cfg.get("layer_norm_epsilon", 1e-5)
        act = cfg.get("activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh"):
            raise ValueError("reference implements only the tanh GELU, not %r" % act)
        w = {(k[len("transformer."):] if k.startswith("transformer.") else k): v
             for k, v in w.items()}
        self.wte = _f(w["wte.weight"])
        self.wpe = _f(w["wpe.weight"])
        self.vocab_size = self.wte.shape[0]
        if not cfg.get("tie_word_embeddings", True) and "lm_head.weight" in w:
            self.head = _f(w["lm_head.weight"])
        else:
            self.head = self.wte
        self.layers = []
        for i in range(self.n_layer):
            p = "h.%d." % i
            self.layers.append({k: _f(w[p + k]) for k in (
                "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")})
        self.ln_f_w = _f(w["ln_f.weight"])
        self.ln_f_b = _f(w["ln_f.bias"])

    def logits(self, ids):
        ids = np.asarray(ids, dtype=np.int64)
        T = len(ids)
        if T > self.wpe.shape[0]:
            raise ValueError("sequence longer than n_positions")
        d, H = self.d, self.n_head
        hd = d // H
        x = self.wte[ids] + self.wpe[np.arange(T)]
        for L in self.layers:
            h = layer_norm(x, L["ln_1.weight"], L["ln_1.bias"], self.eps)
            qkv = h @ L["attn.c_attn.weight"] + L["attn.c_attn.bias"]
            q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(T, H, hd) for i in range(3))
            a = causal_attention(q, k, v)
            x = x + (a @ L["attn.c_proj.weight"] + L["attn.c_proj.bias"])
            h = layer_norm(x, L["ln_2.weight"], L["ln_2.bias"], self.eps)
            m = gelu_tanh(h @ L["mlp.c_fc.weight"] + L["mlp.c_fc.bias"])
            x = x + (m @ L["mlp.c_proj.weight"] + L["mlp.c_proj.bias"])
        x = layer_norm(x, self.ln_f_w, self.ln_f_b, self.eps)
        return x @ self.head.T


# ---------------------------------------------------------------- Llama family


class Llama:
    """Llama / Mistral / Qwen2 (and llama2.c, with adjacent-pair RoPE).

    Linear weights are PyTorch-style [out, in]: y = x @ W.T (+ b)."""

    def __init__(self, n_heads, n_kv_heads, head_dim, eps, rope_theta, rope_style,
                 embed, layers, norm, head, rope=None):
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_dim = head_dim
        self.eps = eps
        self.rope_theta = float(rope_theta)
        self.rope = {"rotate_half": rope_rotate_half, "adjacent": rope_adjacent}[rope_style]
        self.scaled_rope = rope  # a Rope (scaling, partial rotary) for Hugging Face configs
        self.embed = _f(embed)
        self.layers = [{k: (v if k == "moe" else _f(v)) for k, v in L.items() if v is not None}
                       for L in layers]
        self.norm = _f(norm)
        self.head = _f(head)
        self.vocab_size = self.head.shape[0]
        if n_heads % n_kv_heads:
            raise ValueError("n_heads must be a multiple of n_kv_heads")

    @staticmethod
    def _lin(x, L, name):
        y = x @ L[name + ".weight"].T
        b = L.get(name + ".bias")
        return y if b is None else y + b

    def logits(self, ids):
        return self.hidden(ids) @ self.head.T

    def hidden(self, ids):
        """The final hidden states (after the final norm), one row per token."""
        ids = np.asarray(ids, dtype=np.int64)
        T = len(ids)
        H, KV, hd = self.n_heads, self.n_kv_heads, self.head_dim
        pos = np.arange(T)
        x = self.embed[ids]
        for li, L in enumerate(self.layers):
            h = rms_norm(x, L["input_layernorm.weight"], self.eps)
            q = self._lin(h, L, "q_proj").reshape(T, H, hd)
            k = self._lin(h, L, "k_proj").reshape(T, KV, hd)
            v = self._lin(h, L, "v_proj").reshape(T, KV, hd)
            if "q_norm.weight" in L and L["q_norm.weight"].shape[0] == H * hd != hd:
                # OLMoE: one RMSNorm over the whole q projection and one over the whole k
                q = rms_norm(q.reshape(T, H * hd), L["q_norm.weight"], self.eps).reshape(T, H, hd)
                k = rms_norm(k.reshape(T, KV * hd), L["k_norm.weight"], self.eps).reshape(T, KV, hd)
            elif "q_norm.weight" in L:  # Qwen3: RMSNorm over each head before RoPE
                q = rms_norm(q, L["q_norm.weight"], self.eps)
                k = rms_norm(k, L["k_norm.weight"], self.eps)
            if self.scaled_rope is not None:
                q = self.scaled_rope.apply(q, pos)
                k = self.scaled_rope.apply(k, pos)
            else:
                q = self.rope(q, pos, self.rope_theta)
                k = self.rope(k, pos, self.rope_theta)
            kvq = getattr(self, "kv_quant", None)  # what a quantized KV cache keeps
            if kvq is not None:
                k, v = kvq(k), kvq(v)
            qq = getattr(self, "q_quant", None)  # queries as int8 scores see them
            if qq is not None:
                q = qq(q)
            win = self.windows[li] if getattr(self, "windows", None) else None
            if win:
                a = attention(q, k, v, 1.0 / math.sqrt(hd), window=win)
            else:
                a = causal_attention(q, k, v)
            x = x + self._lin(a, L, "o_proj")
            h = rms_norm(x, L["post_attention_layernorm.weight"], self.eps)
            if "moe" in L:
                x = x + moe(h, L["moe"])
                continue
            m = silu(self._lin(h, L, "gate_proj")) * self._lin(h, L, "up_proj")
            x = x + self._lin(m, L, "down_proj")
        return rms_norm(x, self.norm, self.eps)


_LAYER_KEYS = {
    "input_layernorm.weight": "input_layernorm.weight",
    "q_proj.weight": "self_attn.q_proj.weight", "q_proj.bias": "self_attn.q_proj.bias",
    "k_proj.weight": "self_attn.k_proj.weight", "k_proj.bias": "self_attn.k_proj.bias",
    "v_proj.weight": "self_attn.v_proj.weight", "v_proj.bias": "self_attn.v_proj.bias",
    "o_proj.weight": "self_attn.o_proj.weight", "o_proj.bias": "self_attn.o_proj.bias",
    "q_norm.weight": "self_attn.q_norm.weight", "k_norm.weight": "self_attn.k_norm.weight",
    "post_attention_layernorm.weight": "post_attention_layernorm.weight",
    "gate_proj.weight": "mlp.gate_proj.weight", "gate_proj.bias": "mlp.gate_proj.bias",
    "up_proj.weight": "mlp.up_proj.weight", "up_proj.bias": "mlp.up_proj.bias",
    "down_proj.weight": "mlp.down_proj.weight", "down_proj.bias": "mlp.down_proj.bias",
}


def _llama_from_hf(cfg, w, arch):
    hidden = cfg["hidden_size"]
    n_heads = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads") or n_heads
    head_dim = cfg.get("head_dim") or hidden // n_heads
    # Which optional biases the architecture has (HF ignores others in a file).
    qkv_bias = arch in ("qwen2", "qwen2_moe") or bool(cfg.get("attention_bias", False))
    o_bias = arch not in ("qwen2", "qwen2_moe") and bool(cfg.get("attention_bias", False))
    mlp_bias = arch == "llama" and bool(cfg.get("mlp_bias", False))
    want_bias = {"q_proj": qkv_bias, "k_proj": qkv_bias, "v_proj": qkv_bias,
                 "o_proj": o_bias, "gate_proj": mlp_bias, "up_proj": mlp_bias,
                 "down_proj": mlp_bias}
    layers = []
    if arch == "phi3":  # fused projections: qkv_proj = [q; k; v], gate_up_proj = [gate; up]
        w = dict(w)
        q_dim, kv_dim, ff = n_heads * head_dim, n_kv * head_dim, cfg["intermediate_size"]
        for i in range(cfg["num_hidden_layers"]):
            p = "model.layers.%d." % i
            qkv = w.pop(p + "self_attn.qkv_proj.weight")
            w[p + "self_attn.q_proj.weight"] = qkv[:q_dim]
            w[p + "self_attn.k_proj.weight"] = qkv[q_dim:q_dim + kv_dim]
            w[p + "self_attn.v_proj.weight"] = qkv[q_dim + kv_dim:]
            gu = w.pop(p + "mlp.gate_up_proj.weight")
            w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"] = gu[:ff], gu[ff:]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        L = {}
        moe_layer = _moe_of(cfg, arch, w, p, i)
        if moe_layer is not None:
            L["moe"] = moe_layer
        for short, full in _LAYER_KEYS.items():
            if moe_layer is not None and short.split(".")[0] in ("gate_proj", "up_proj",
                                                                 "down_proj"):
                continue
            if short.endswith(".bias"):
                if not want_bias[short.split(".")[0]]:
                    continue
            if short.startswith(("q_norm", "k_norm")) and arch not in ("qwen3", "qwen3_moe",
                                                                        "olmoe"):
                continue
            L[short] = w[p + full]  # KeyError = missing tensor
        layers.append(L)
    embed = w["model.embed_tokens.weight"]
    # LlamaConfig, MistralConfig and Qwen2Config all default to untied.
    head = embed if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    rope = Rope(cfg, head_dim)
    m = Llama(n_heads, n_kv, head_dim, cfg.get("rms_norm_eps", 1e-6), rope.theta, "rotate_half",
              embed, layers, w["model.norm.weight"], head, rope)
    m.cfg = cfg
    # Sliding windows: Mistral's on every layer; Qwen2/3's from max_window_layers when
    # use_sliding_window; layer_types where the config lists them.
    w_size = cfg.get("sliding_window")
    qwen = arch.startswith("qwen")
    n = cfg["num_hidden_layers"]
    if w_size and cfg.get("use_sliding_window", not qwen):
        if "layer_types" in cfg:
            m.windows = [w_size if t == "sliding_attention" else None for t in cfg["layer_types"]]
        else:
            first = cfg.get("max_window_layers", 0) if qwen else 0
            m.windows = [w_size if i >= first else None for i in range(n)]
    return m


def attention(q, k, v, scale, softcap=None, window=None):
    """Causal attention with the options Gemma adds: q [T, H, hd], k/v [T, KV, hd].
    softcap: scores become softcap * tanh(score / softcap); window W: query i sees keys
    i - W < j <= i (W keys, itself included)."""
    T, H, hd = q.shape
    group = H // k.shape[1]
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    mask = j > i
    if window:
        mask = mask | (j <= i - window)
    out = np.empty((T, H, hd), dtype=F)
    for h in range(H):
        s = (q[:, h, :] @ k[:, h // group, :].T) * scale
        if softcap:
            s = softcap * np.tanh(s / softcap)
        s[mask] = -np.inf
        out[:, h, :] = softmax(s) @ v[:, h // group, :]
    return out.reshape(T, H * hd)


class Gemma:
    """Gemma 1/2/3 text models, from the Gemma technical reports and model cards: GeGLU with the
    tanh GELU, RMSNorm scaling by (1 + w), embeddings times sqrt(hidden), tied head; Gemma 2/3
    add norms after attention and after the MLP, attention scaled by query_pre_attn_scalar^-1/2
    and local layers attending to the last sliding_window tokens (Gemma 2: every other layer;
    Gemma 3: all but every sliding_window_pattern-th); Gemma 2 soft-caps attention scores and
    logits (cap * tanh(x / cap)); Gemma 3 RMS-normalizes q and k per head and rotates local
    layers with rope_local_base_freq."""

    def __init__(self, cfg, w, version):
        self.cfg, self.version = cfg, version
        d = cfg["hidden_size"]
        self.H = cfg["num_attention_heads"]
        self.KV = cfg.get("num_key_value_heads") or self.H
        self.hd = cfg.get("head_dim") or d // self.H
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.d = d
        self.embed = _f(w["model.embed_tokens.weight"])
        self.head = _f(w["lm_head.weight"]) if "lm_head.weight" in w else self.embed
        self.vocab_size = self.head.shape[0]
        self.norm = _f(w["model.norm.weight"])
        n = cfg["num_hidden_layers"]
        self.layers = []
        for i in range(n):
            p = "model.layers.%d." % i
            self.layers.append({k[len(p):]: _f(v) for k, v in w.items() if k.startswith(p)})
        rp = cfg.get("rope_parameters")
        if rp and "full_attention" in rp:  # transformers v5: one per layer type
            glob = dict(cfg, rope_parameters=rp["full_attention"])
            loc = dict(cfg, rope_parameters=rp.get("sliding_attention", {}))
        else:
            glob = cfg
            loc = {"rope_theta": cfg.get("rope_local_base_freq", 10000.0),
                   "max_position_embeddings": cfg.get("max_position_embeddings")}
        self.rope_global = Rope(glob, self.hd)
        self.rope_local = Rope(loc, self.hd) if version == 3 else self.rope_global
        if version == 1:
            self.sliding = [False] * n
        elif "layer_types" in cfg:
            self.sliding = [t == "sliding_attention" for t in cfg["layer_types"]]
        elif version == 2:
            self.sliding = [(i + 1) % 2 != 0 for i in range(n)]
        else:
            pat = cfg.get("sliding_window_pattern", 6)
            self.sliding = [(i + 1) % pat != 0 for i in range(n)]
        qpas = cfg.get("query_pre_attn_scalar") if version > 1 else None
        self.scale = (qpas or self.hd) ** -0.5

    def _n(self, x, w):
        return rms_norm(x, 1.0 + w, self.eps)

    def logits(self, ids):
        ids = np.asarray(ids, dtype=np.int64)
        T = len(ids)
        pos = np.arange(T)
        cfg, v2 = self.cfg, self.version >= 2
        x = self.embed[ids] * math.sqrt(self.d)
        for i, L in enumerate(self.layers):
            h = self._n(x, L["input_layernorm.weight"])
            q = (h @ L["self_attn.q_proj.weight"].T).reshape(T, self.H, self.hd)
            k = (h @ L["self_attn.k_proj.weight"].T).reshape(T, self.KV, self.hd)
            v = (h @ L["self_attn.v_proj.weight"].T).reshape(T, self.KV, self.hd)
            if self.version == 3:
                q = self._n(q, L["self_attn.q_norm.weight"])
                k = self._n(k, L["self_attn.k_norm.weight"])
            rope = self.rope_local if self.sliding[i] else self.rope_global
            q, k = rope.apply(q, pos), rope.apply(k, pos)
            a = attention(q, k, v, self.scale, cfg.get("attn_logit_softcapping") if v2 else None,
                          cfg.get("sliding_window") if self.sliding[i] else None)
            o = a @ L["self_attn.o_proj.weight"].T
            if v2:
                o = self._n(o, L["post_attention_layernorm.weight"])
            x = x + o
            pre = L["pre_feedforward_layernorm.weight" if v2 else "post_attention_layernorm.weight"]
            h = self._n(x, pre)
            m = gelu_tanh(h @ L["mlp.gate_proj.weight"].T) * (h @ L["mlp.up_proj.weight"].T)
            m = m @ L["mlp.down_proj.weight"].T
            if v2:
                m = self._n(m, L["post_feedforward_layernorm.weight"])
            x = x + m
        y = self._n(x, self.norm) @ self.head.T
        cap = cfg.get("final_logit_softcapping") if v2 else None
        return cap * np.tanh(y / cap) if cap else y


_ARCHS = {
    "GPT2LMHeadModel": "gpt2",
    "MambaForCausalLM": "mamba",
    "T5ForConditionalGeneration": "t5",
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Phi3ForCausalLM": "phi3",
    "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "OlmoeForCausalLM": "olmoe",
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3",
    "GPTJForCausalLM": "gptj",
    "CodeGenForCausalLM": "codegen",
    "GPTNeoXForCausalLM": "gpt_neox",
    "GptOssForCausalLM": "gpt_oss",
    "Qwen3NextForCausalLM": "qwen3_next",
    "Qwen3_5ForCausalLM": "qwen3_next",
    "Qwen3_5MoeForCausalLM": "qwen3_next",
}


# ---------------------------------------------------------------- gpt-oss

# FP4 E2M1 (OCP Microscaling Formats v1.0): sign, two exponent bits (bias 1), one mantissa bit.
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=F)


def mxfp4_dequant(blocks, scales):
    """OpenAI's MXFP4 tensors as the gpt-oss release stores them: blocks [..., G, 16] bytes, each
    holding elements 2i (low nibble) and 2i + 1 (high nibble) of a block of 32; scales [..., G]
    E8M0 bytes, 2^(s - 127). -> float64 [..., G * 32]."""
    b = np.asarray(blocks, dtype=np.uint8)
    vals = np.empty(b.shape[:-1] + (32,), dtype=F)
    vals[..., 0::2] = E2M1[b & 0xF]
    vals[..., 1::2] = E2M1[b >> 4]
    vals = vals * np.ldexp(1.0, np.asarray(scales, dtype=np.int64) - 127)[..., None]
    return vals.reshape(b.shape[:-2] + (b.shape[-2] * 32,))


class GptOss:
    """gpt-oss (OpenAI, "gpt-oss-120b & gpt-oss-20b model card", 2025): pre-norm blocks with
    RMSNorm; grouped-query attention with biases on q, k, v and o, rotary positions (halves) with
    YaRN, and a learned sink logit per head that joins each query's softmax denominator; every
    other layer (from the first) attends only to its last `sliding_window` positions; a
    mixture of experts whose router (with a bias) picks the top-k experts by logit and weights
    them by the softmax of those k logits; each expert a SwiGLU variant with biases: gate clamped
    above at `limit`, up clamped to [-limit, limit], (up + 1) * gate * sigmoid(alpha * gate)."""

    def __init__(self, cfg, w):
        self.cfg = cfg
        self.d = cfg["hidden_size"]
        self.H = cfg["num_attention_heads"]
        self.KV = cfg["num_key_value_heads"]
        self.hd = cfg.get("head_dim") or self.d // self.H
        self.eps = cfg.get("rms_norm_eps", 1e-5)
        self.E = cfg["num_local_experts"]
        self.k = cfg.get("num_experts_per_tok", 4)
        self.I = cfg["intermediate_size"]
        self.window = cfg.get("sliding_window", 128)
        n = cfg["num_hidden_layers"]
        self.types = cfg.get("layer_types") or [
            "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
        self.alpha = cfg.get("swiglu_alpha", 1.702)
        self.limit = cfg.get("swiglu_limit", 7.0)
        self.rope = Rope(cfg, self.hd)
        self.embed = _f(w["model.embed_tokens.weight"])
        self.vocab_size = self.embed.shape[0]
        self.head = _f(w["lm_head.weight"])
        self.norm = _f(w["model.norm.weight"])
        self.layers = []
        for i in range(n):
            p = "model.layers.%d." % i
            g = lambda s: _f(w[p + s])  # noqa: E731
            L = {s: g(s) for s in (
                "input_layernorm.weight", "post_attention_layernorm.weight",
                "self_attn.q_proj.weight", "self_attn.q_proj.bias",
                "self_attn.k_proj.weight", "self_attn.k_proj.bias",
                "self_attn.v_proj.weight", "self_attn.v_proj.bias",
                "self_attn.o_proj.weight", "self_attn.o_proj.bias", "self_attn.sinks",
                "mlp.router.weight", "mlp.router.bias",
                "mlp.experts.gate_up_proj_bias", "mlp.experts.down_proj_bias")}
            x = p + "mlp.experts."
            if x + "gate_up_proj_blocks" in w:  # [E, out, in]
                L["gate_up"] = mxfp4_dequant(w[x + "gate_up_proj_blocks"],
                                             w[x + "gate_up_proj_scales"])
                L["down"] = mxfp4_dequant(w[x + "down_proj_blocks"], w[x + "down_proj_scales"])
            else:  # dequantized, [E, in, out]
                L["gate_up"] = np.swapaxes(_f(w[x + "gate_up_proj"]), 1, 2)
                L["down"] = np.swapaxes(_f(w[x + "down_proj"]), 1, 2)
            self.layers.append(L)

    def _attention(self, x, L, sliding):
        T = x.shape[0]
        pos = np.arange(T)
        q = (x @ L["self_attn.q_proj.weight"].T + L["self_attn.q_proj.bias"]).reshape(T, self.H, self.hd)
        k = (x @ L["self_attn.k_proj.weight"].T + L["self_attn.k_proj.bias"]).reshape(T, self.KV, self.hd)
        v = (x @ L["self_attn.v_proj.weight"].T + L["self_attn.v_proj.bias"]).reshape(T, self.KV, self.hd)
        q, k = self.rope.apply(q, pos), self.rope.apply(k, pos)
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        allowed = (j <= i) & ((i - j < self.window) if sliding else True)
        out = np.empty((T, self.H, self.hd), dtype=F)
        group = self.H // self.KV
        for h in range(self.H):
            s = q[:, h] @ k[:, h // group].T / math.sqrt(self.hd)
            s = np.where(allowed, s, -np.inf)
            sink = L["self_attn.sinks"][h]
            top = np.maximum(s.max(axis=1, keepdims=True), sink)
            e = np.exp(s - top)
            p = e / (e.sum(axis=1, keepdims=True) + np.exp(sink - top))
            out[:, h] = p @ v[:, h // group]
        return out.reshape(T, -1) @ L["self_attn.o_proj.weight"].T + L["self_attn.o_proj.bias"]

    def _experts(self, x, L):
        logits = x @ L["mlp.router.weight"].T + L["mlp.router.bias"]
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            order = sorted(range(self.E), key=lambda e: (-logits[t, e], e))[:self.k]
            top = logits[t, order]
            wts = np.exp(top - top.max())
            wts /= wts.sum()
            for e, wt in zip(order, wts):
                gu = L["gate_up"][e] @ x[t] + L["mlp.experts.gate_up_proj_bias"][e]
                gate = np.minimum(gu[0::2], self.limit)
                up = np.clip(gu[1::2], -self.limit, self.limit)
                h = (up + 1.0) * gate / (1.0 + np.exp(-self.alpha * gate))
                out[t] += wt * (L["down"][e] @ h + L["mlp.experts.down_proj_bias"][e])
        return out

    def logits(self, ids):
        x = self.embed[np.asarray(ids, dtype=np.int64)]
        for L, kind in zip(self.layers, self.types):
            x = x + self._attention(rms_norm(x, L["input_layernorm.weight"], self.eps), L,
                                    kind == "sliding_attention")
            x = x + self._experts(rms_norm(x, L["post_attention_layernorm.weight"], self.eps), L)
        return rms_norm(x, self.norm, self.eps) @ self.head.T



# ---------------------------------------------------------------- GPT-J, CodeGen, GPT-NeoX

def _gelu_exact(x):
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


def _rotary(x, pos, rot, theta, adjacent):
    """Rotary embeddings (Su et al., RoFormer) on the first `rot` dimensions of each head of
    x [T, H, hd]; frequencies theta^(-2i/rot). adjacent: pairs (2i, 2i+1), as GPT-J's
    rotate_every_two; else (i, i + rot/2), as GPT-NeoX's rotate_half."""
    half = rot // 2
    inv = theta ** (-(2.0 * np.arange(half, dtype=F)) / rot)
    ang = pos.astype(F)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x = x.copy()
    r = x[..., :rot]
    if adjacent:
        a, b = r[..., 0::2].copy(), r[..., 1::2].copy()
        r[..., 0::2] = a * cos - b * sin
        r[..., 1::2] = a * sin + b * cos
    else:
        a, b = r[..., :half].copy(), r[..., half:].copy()
        r[..., :half] = a * cos - b * sin
        r[..., half:] = a * sin + b * cos
    return x


class ParallelGPT:
    """GPT-J (Wang and Komatsuzaki 2021, mesh-transformer-jax), CodeGen (Nijkamp et al. 2022)
    and GPT-NeoX (Black et al. 2022), from their papers and model cards: pre-LN blocks whose
    attention and MLP both read the block's input, x + attn(ln1(x)) + mlp(ln2(x)) (GPT-J and
    CodeGen: ln2 = ln1; NeoX with use_parallel_residual false: x + attn(ln1(x)), then + mlp(ln2 .)),
    rotary positions on the first rotary dimensions of each head, scores scaled by 1/sqrt(hd), a
    GELU MLP with biases, an LM head (with a bias in GPT-J and CodeGen).

    The attention projections as each checkpoint stores them: GPT-J's q_proj/k_proj/v_proj;
    CodeGen's qkv_proj, trained on 4 TPU cores, rows in 4 shards each [q; v; k] of the shard's
    heads; NeoX's query_key_value, rows head by head [q_h; k_h; v_h]."""

    def __init__(self, cfg, w, kind):
        self.kind = kind
        neox = kind == "gpt_neox"
        if neox:
            d, H, n_layers = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
            hd = d // H
            self.rot = int(hd * cfg.get("rotary_pct", 0.25))
            self.theta = float(cfg.get("rotary_emb_base", 10000))
            self.eps = cfg.get("layer_norm_eps", 1e-5)
            act = cfg.get("hidden_act", "gelu")
            self.parallel = cfg.get("use_parallel_residual", True)
            pre = "gpt_neox."
            self.wte = _f(w[pre + "embed_in.weight"])
            self.head = _f(w["embed_out.weight"])
            self.head_b = None
            self.lnf = (_f(w[pre + "final_layer_norm.weight"]), _f(w[pre + "final_layer_norm.bias"]))
        else:
            d, H, n_layers = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
            hd = d // H
            self.rot = cfg.get("rotary_dim") or hd
            self.theta = 10000.0
            self.eps = cfg.get("layer_norm_epsilon", 1e-5)
            act = cfg.get("activation_function", "gelu_new")
            self.parallel = True
            pre = "transformer."
            self.wte = _f(w[pre + "wte.weight"])
            self.head = _f(w["lm_head.weight"])
            self.head_b = _f(w["lm_head.bias"])
            self.lnf = (_f(w[pre + "ln_f.weight"]), _f(w[pre + "ln_f.bias"]))
        self.act = _gelu_exact if act == "gelu" else gelu_tanh
        self.d, self.H, self.hd = d, H, hd
        self.vocab_size = self.wte.shape[0]
        self.layers = []
        for i in range(n_layers):
            p = pre + ("layers.%d." % i if neox else "h.%d." % i)
            g = lambda n: _f(w[p + n]) if (p + n) in w else None  # noqa: E731
            self.layers.append({k: g(v) for k, v in (
                ("ln1_w", "input_layernorm.weight" if neox else "ln_1.weight"),
                ("ln1_b", "input_layernorm.bias" if neox else "ln_1.bias"),
                ("ln2_w", "post_attention_layernorm.weight"),
                ("ln2_b", "post_attention_layernorm.bias"),
                ("qkv", "attention.query_key_value.weight" if neox else "attn.qkv_proj.weight"),
                ("qkv_b", "attention.query_key_value.bias"),
                ("q", "attn.q_proj.weight"), ("k", "attn.k_proj.weight"),
                ("v", "attn.v_proj.weight"),
                ("o", "attention.dense.weight" if neox else "attn.out_proj.weight"),
                ("o_b", "attention.dense.bias"),
                ("fc_in", "mlp.dense_h_to_4h.weight" if neox else "mlp.fc_in.weight"),
                ("fc_in_b", "mlp.dense_h_to_4h.bias" if neox else "mlp.fc_in.bias"),
                ("fc_out", "mlp.dense_4h_to_h.weight" if neox else "mlp.fc_out.weight"),
                ("fc_out_b", "mlp.dense_4h_to_h.bias" if neox else "mlp.fc_out.bias"))})

    @staticmethod
    def _lin(x, W, b):
        y = x @ W.T
        return y if b is None else y + b

    def _qkv(self, h, L):
        T, H, hd, d = h.shape[0], self.H, self.hd, self.d
        if self.kind == "gptj":
            return (self._lin(h, L[n], None).reshape(T, H, hd) for n in ("q", "k", "v"))
        qkv = self._lin(h, L["qkv"], L["qkv_b"])
        if self.kind == "gpt_neox":
            qkv = qkv.reshape(T, H, 3 * hd)
            return qkv[..., :hd], qkv[..., hd:2 * hd], qkv[..., 2 * hd:]
        mp = 4  # codegen
        local = d // mp
        qkv = qkv.reshape(T, mp, 3 * local)
        q, v, k = qkv[..., :local], qkv[..., local:2 * local], qkv[..., 2 * local:]
        return (a.reshape(T, mp, H // mp, hd).reshape(T, H, hd) for a in (q, k, v))

    def _mlp(self, h, L):
        return self._lin(self.act(self._lin(h, L["fc_in"], L["fc_in_b"])), L["fc_out"],
                         L["fc_out_b"])

    def logits(self, ids):
        ids = np.asarray(ids, dtype=np.int64)
        T = len(ids)
        pos = np.arange(T)
        x = self.wte[ids]
        adjacent = self.kind != "gpt_neox"
        for L in self.layers:
            h = layer_norm(x, L["ln1_w"], L["ln1_b"], self.eps)
            q, k, v = self._qkv(h, L)
            q = _rotary(q, pos, self.rot, self.theta, adjacent)
            k = _rotary(k, pos, self.rot, self.theta, adjacent)
            a = self._lin(causal_attention(q, k, v), L["o"], L["o_b"])
            if self.parallel:
                h2 = h if L["ln2_w"] is None else layer_norm(x, L["ln2_w"], L["ln2_b"], self.eps)
                x = x + a + self._mlp(h2, L)
            else:
                x = x + a
                x = x + self._mlp(layer_norm(x, L["ln2_w"], L["ln2_b"], self.eps), L)
        x = layer_norm(x, self.lnf[0], self.lnf[1], self.eps)
        return self._lin(x, self.head, self.head_b)


def load_hf(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    arch = None
    for a in cfg.get("architectures") or []:
        arch = _ARCHS.get(a, arch)
    if arch is None:
        arch = cfg.get("model_type")
    w = safetensors_io.load_dir(model_dir)
    if arch == "gpt2":
        return GPT2(cfg, w)
    if arch == "mamba":
        return Mamba(cfg, w)
    if arch == "t5":
        return T5(cfg, w)
    if cfg.get("position_embedding_type") == "alibi":
        return JinaBert(cfg, w)
    if cfg.get("model_type") in ("bert", "roberta", "xlm-roberta"):
        return Bert(cfg, w)
    if cfg.get("model_type") == "nomic_bert":
        return NomicBert(cfg, w)
    if arch == "gpt_oss":
        return GptOss(cfg, w)
    if arch == "qwen3_next":
        return Qwen3Next(cfg, w)
    if arch in ("gptj", "codegen", "gpt_neox"):
        return ParallelGPT(cfg, w, arch)
    if arch in ("gemma", "gemma2", "gemma3"):
        return Gemma(cfg, w, {"gemma": 1, "gemma2": 2, "gemma3": 3}[arch])
    if arch in ("llama", "mistral", "qwen2", "qwen3", "phi3", "mixtral", "qwen2_moe",
                "qwen3_moe", "olmoe"):
        return _llama_from_hf(cfg, w, arch)
    raise ValueError("unsupported architecture %r" % (cfg.get("architectures"),))


# ---------------------------------------------------------------- llama2.c .bin

def read_llama2c(path):
    """-> (header dict, dict of float32 arrays named as in llama2.c)."""
    with open(path, "rb") as f:
        raw = f.read()
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    hs = dim // n_heads
    kv_dim = n_kv * hs
    data = np.frombuffer(raw, dtype="<f4", offset=28)
    hdr = dict(dim=dim, hidden_dim=hidden, n_layers=n_layers, n_heads=n_heads,
               n_kv_heads=n_kv, vocab_size=vocab, seq_len=seq_len, shared_classifier=shared)
    shapes = [
        ("token_embedding_table", (vocab, dim)),
        ("rms_att_weight", (n_layers, dim)),
        ("wq", (n_layers, n_heads * hs, dim)),
        ("wk", (n_layers, kv_dim, dim)),
        ("wv", (n_layers, kv_dim, dim)),
        ("wo", (n_layers, dim, n_heads * hs)),
        ("rms_ffn_weight", (n_layers, dim)),
        ("w1", (n_layers, hidden, dim)),
        ("w2", (n_layers, dim, hidden)),
        ("w3", (n_layers, hidden, dim)),
        ("rms_final_weight", (dim,)),
        ("freq_cis_real", (seq_len, hs // 2)),
        ("freq_cis_imag", (seq_len, hs // 2)),
    ]
    if not shared:
        shapes.append(("wcls", (vocab, dim)))
    w = {}
    off = 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        if off + n > data.size:
            raise ValueError("%s: file too short reading %s" % (path, name))
        w[name] = data[off:off + n].reshape(shape).astype(np.float32)
        off += n
    if off != data.size:
        raise ValueError("%s: %d trailing floats" % (path, data.size - off))
    if shared:
        w["wcls"] = w["token_embedding_table"]
    return hdr, w


def load_llama2c(path):
    hdr, w = read_llama2c(path)
    layers = []
    for i in range(hdr["n_layers"]):
        layers.append({
            "input_layernorm.weight": w["rms_att_weight"][i],
            "q_proj.weight": w["wq"][i], "k_proj.weight": w["wk"][i],
            "v_proj.weight": w["wv"][i], "o_proj.weight": w["wo"][i],
            "post_attention_layernorm.weight": w["rms_ffn_weight"][i],
            "gate_proj.weight": w["w1"][i], "down_proj.weight": w["w2"][i],
            "up_proj.weight": w["w3"][i],
        })
    m = Llama(hdr["n_heads"], hdr["n_kv_heads"], hdr["dim"] // hdr["n_heads"], 1e-5, 10000.0,
              "adjacent", w["token_embedding_table"], layers, w["rms_final_weight"], w["wcls"])
    m.cfg = hdr
    return m


# ---------------------------------------------------------------- decoding

def greedy(model, prompt_ids, n, margins=None):
    """Generate exactly n tokens by argmax (lowest id on ties), no EOS stop.
    If `margins` is a list, the top-1 minus top-2 logit of each step is
    appended to it (to tell a real mismatch from a near tie)."""
    ids = [int(t) for t in prompt_ids]
    out = []
    for _ in range(n):
        last = model.logits(ids)[-1]
        t = int(np.argmax(last))
        if margins is not None:
            top2 = np.partition(last, -2)[-2:]
            margins.append(float(top2[1] - top2[0]))
        out.append(t)
        ids.append(t)
    return out


def q_q8(x):
    """A query as the AVX-512 VNNI tables score it against a q8_0 cache (isa_attention.inc:
    quantize_query): per token and head, d = max|x| / 127 in float32, each value round(x / d)
    (half to even) clipped to [-127, 127], read back as d * q. x: [T, heads, head_dim]."""
    x = np.asarray(x, dtype=np.float32)
    d = (np.abs(x).max(axis=-1, keepdims=True) / np.float32(127)).astype(np.float32)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
    q = np.clip(np.rint(x * inv), -127, 127).astype(np.float32)
    return (q * d).astype(np.float32)


def kv_q8_0(x):
    """A q8_0 KV cache's values (docs/architecture.md): per token and KV head, the scale
    max|x| / 127 rounded to float16, each value round(x / scale) clipped to [-127, 127], read back
    as scale * q. x: [T, heads, head_dim]."""
    x = np.asarray(x, dtype=np.float32)
    scale = (np.abs(x).max(axis=-1, keepdims=True) / np.float32(127)).astype(np.float16)
    d = scale.astype(np.float32)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
    q = np.clip(np.rint(x * inv), -127, 127)
    return (q * d).astype(np.float32)
