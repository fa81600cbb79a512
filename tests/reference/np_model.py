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
"""

import json
import math
import os
import struct

import numpy as np

import safetensors_io

F = np.float64


# ---------------------------------------------------------------- building blocks

def layer_norm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(s):
    s = s - s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


def causal_attention(q, k, v):
    """q: [T, H, hd], k/v: [T, KV, hd] with H % KV == 0 -> [T, H*hd].
    Query head h reads K/V head h // (H // KV)."""
    T, H, hd = q.shape
    KV = k.shape[1]
    group = H // KV
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)  # True above the diagonal
    out = np.empty((T, H, hd), dtype=F)
    scale = 1.0 / math.sqrt(hd)
    for h in range(H):
        g = h // group
        s = (q[:, h, :] @ k[:, g, :].T) * scale
        s[mask] = -np.inf
        out[:, h, :] = softmax(s) @ v[:, g, :]
    return out.reshape(T, H * hd)


def rope_rotate_half(x, pos, theta):
    """HF Llama RoPE. x: [T, heads, hd]; pairs (i, i + hd/2)."""
    hd = x.shape[-1]
    half = hd // 2
    inv_freq = 1.0 / (theta ** (np.arange(0, half, dtype=F) * 2.0 / hd))
    ang = pos.astype(F)[:, None] * inv_freq[None, :]  # [T, half]
    cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=-1)[:, None, :]
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


def rope_adjacent(x, pos, theta):
    """llama2.c RoPE. x: [T, heads, hd]; pairs (2j, 2j+1),
    freq_j = theta^(-2j/hd)."""
    hd = x.shape[-1]
    j = np.arange(hd // 2, dtype=F)
    freq = theta ** (-(2.0 * j) / hd)
    ang = pos.astype(F)[:, None] * freq[None, :]
    cos = np.cos(ang)[:, None, :]
    sin = np.sin(ang)[:, None, :]
    a = x[..., 0::2]
    b = x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = a * sin + b * cos
    return out


class Rope:
    """Rotary embeddings with the scalings models ship with, from their papers and model
    cards, in the config forms transformers writes (v4: rope_theta, partial_rotary_factor and
    rope_scaling at the top; v5: all of it inside rope_parameters):

    default   theta^(-2i/d) (Su et al., RoFormer)
    linear    positions divided by the factor (Chen et al., position interpolation)
    dynamic   NTK-aware: beyond the context L, base * (s*len/L - (s-1))^(d/(d-2))
    yarn      per-dimension blend of interpolated and kept frequencies by how many turns the
              dimension makes over the original context (Peng et al.; the released code's ramp
              over dimension indices between floor/ceil of the beta_fast/beta_slow dimensions),
              cos/sin times 0.1 ln(s) + 1
    llama3    Meta's Llama 3.1 release: wavelengths above L/low kept divided by s, below L/high
              kept, smooth in between
    longrope  per-dimension divisors, short below the original context, long beyond (Ding et
              al., Phi-3); cos/sin times sqrt(1 + ln(s)/ln(L)), s = max_pos / L

    Position-dependent kinds (dynamic, longrope) take the length as the token's position + 1.
    Only the first rot_dim = head_dim * partial_rotary_factor dimensions rotate."""

    def __init__(self, cfg, head_dim):
        rp = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        self.theta = float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))
        partial = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
        self.dim = int(head_dim * partial)
        self.kind = rp.get("rope_type", rp.get("type", "default"))
        if self.kind == "su":
            self.kind = "longrope"
        if self.kind not in ("default", "linear", "dynamic", "yarn", "llama3", "longrope"):
            raise ValueError("unknown rope kind %r" % self.kind)
        self.rp = rp
        self.max_pos = cfg.get("max_position_embeddings")
        self.scale = 1.0
        d = self.dim
        self.base = 1.0 / self.theta ** (np.arange(0, d, 2, dtype=F) / d)
        s = float(rp.get("factor", 1.0))
        if self.kind == "linear":
            self.inv = self.base / s
        elif self.kind == "yarn":
            L = rp.get("original_max_position_embeddings") or self.max_pos

            def dim_of(turns):  # the dimension index turning `turns` times over L
                return d * math.log(L / (turns * 2 * math.pi)) / (2 * math.log(self.theta))
            lo, hi = dim_of(rp.get("beta_fast") or 32), dim_of(rp.get("beta_slow") or 1)
            if rp.get("truncate", True):  # gpt-oss's configs say false: the exact dimensions
                lo, hi = math.floor(lo), math.ceil(hi)
            lo, hi = max(lo, 0), min(hi, d - 1)
            if lo == hi:
                hi += 0.001
            ramp = np.clip((np.arange(d // 2, dtype=F) - lo) / (hi - lo), 0.0, 1.0)
            self.inv = self.base / s * ramp + self.base * (1.0 - ramp)
            self.scale = rp.get("attention_factor") or (0.1 * math.log(s) + 1.0 if s > 1 else 1.0)
        elif self.kind == "llama3":
            L = rp["original_max_position_embeddings"]
            lo_f, hi_f = rp.get("low_freq_factor", 1.0), rp.get("high_freq_factor", 4.0)
            wl = 2 * math.pi / self.base
            inv = np.where(wl > L / lo_f, self.base / s, self.base)
            mid = (wl >= L / hi_f) & (wl <= L / lo_f)
            t = (L / wl - lo_f) / (hi_f - lo_f)
            self.inv = np.where(mid, (1 - t) * self.base / s + t * self.base, inv)
        elif self.kind == "longrope":
            self.L = cfg.get("original_max_position_embeddings") or \
                rp.get("original_max_position_embeddings") or self.max_pos
            s = self.max_pos / self.L if self.L != self.max_pos else s
            self.short = self.base / np.asarray(rp["short_factor"], dtype=F)
            self.long = self.base / np.asarray(rp["long_factor"], dtype=F)
            self.scale = rp.get("attention_factor") or (
                math.sqrt(1 + math.log(s) / math.log(self.L)) if s > 1 else 1.0)
        elif self.kind == "dynamic":
            self.s = s
        if self.kind in ("default", "dynamic"):
            self.inv = self.base

    def freqs(self, p):
        n = p + 1
        if self.kind == "longrope":
            return self.long if n > self.L else self.short
        if self.kind == "dynamic" and n > self.max_pos:
            d = self.dim
            b = self.theta * (self.s * n / self.max_pos - (self.s - 1)) ** (d / (d - 2))
            return 1.0 / b ** (np.arange(0, d, 2, dtype=F) / d)
        return self.inv

    def apply(self, x, pos, style="rotate_half"):
        """x: [T, heads, hd] -> rotated copy; pairs (i, i + d/2) or (2i, 2i + 1) of the first d."""
        d, half = self.dim, self.dim // 2
        out = np.array(x, dtype=F)
        for t, p in enumerate(pos):
            ang = p * self.freqs(int(p))
            c, sn = np.cos(ang) * self.scale, np.sin(ang) * self.scale
            if style == "rotate_half":
                a, b = x[t, :, :half], x[t, :, half:d]
                out[t, :, :half] = a * c - b * sn
                out[t, :, half:d] = a * sn + b * c
            else:
                a, b = x[t, :, 0:d:2], x[t, :, 1:d:2]
                out[t, :, 0:d:2] = a * c - b * sn
                out[t, :, 1:d:2] = a * sn + b * c
        return out


def _f(a):
    return np.asarray(a, dtype=F)


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

def moe(h, M):
    """Sparsely-gated mixture of experts (Shazeer et al. 2017; Mixtral, Qwen-MoE model cards):
    per token, softmax over the router's logits, the top k experts (ties to the lower index),
    their probabilities as weights (renormalized to sum 1 when M["norm"]), the weighted sum of
    those experts' SwiGLU MLPs; plus a shared expert scaled by sigmoid(its gate) when present."""
    out = np.zeros_like(h)
    probs = softmax(h @ M["router"].T)
    for t in range(h.shape[0]):
        order = sorted(range(probs.shape[1]), key=lambda e: (-probs[t, e], e))[:M["k"]]
        w = probs[t, order]
        if M["norm"]:
            w = w / w.sum()
        for e, we in zip(order, w):
            g, u, d = M["experts"][e]
            out[t] += we * ((silu(h[t] @ g.T) * (h[t] @ u.T)) @ d.T)
    if M.get("shared") is not None:
        g, u, d = M["shared"]
        s = (silu(h @ g.T) * (h @ u.T)) @ d.T
        if M.get("shared_gate") is not None:
            s = s / (1.0 + np.exp(-(h @ M["shared_gate"].T)))
        out = out + s
    return out


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


def _moe_of(cfg, arch, w, p, i):
    """Layer i's mixture of experts as moe() takes it, or None for a dense layer."""
    if arch == "mixtral":
        q = p + "block_sparse_moe."
        names = ("w1", "w3", "w2")
        E, norm = cfg["num_local_experts"], True
    elif arch == "olmoe":  # every layer; Mixtral's routing, norm_topk_prob false by default
        q = p + "mlp."
        names = ("gate_proj", "up_proj", "down_proj")
        E, norm = cfg["num_experts"], cfg.get("norm_topk_prob", False)
    elif arch in ("qwen2_moe", "qwen3_moe"):
        if i in cfg.get("mlp_only_layers", []) or (i + 1) % cfg.get("decoder_sparse_step", 1):
            return None
        q = p + "mlp."
        names = ("gate_proj", "up_proj", "down_proj")
        E, norm = cfg["num_experts"], cfg.get("norm_topk_prob", False)
    else:
        return None
    if q + "gate.weight" not in w:  # transformers v5 saves Mixtral's under mlp. too
        q = p + "mlp."
    if q + "experts.gate_up_proj" in w:
        # transformers v5: experts stacked, gate_up_proj [E, 2I, H] (gate rows first), down_proj
        # [E, H, I]
        gu, dn = _f(w[q + "experts.gate_up_proj"]), _f(w[q + "experts.down_proj"])
        I = gu.shape[1] // 2
        experts = [(gu[e, :I], gu[e, I:], dn[e]) for e in range(E)]
    else:
        experts = [tuple(_f(w[q + "experts.%d.%s.weight" % (e, n)]) for n in names)
                   for e in range(E)]
    M = {"router": _f(w[q + "gate.weight"]), "k": cfg["num_experts_per_tok"], "norm": norm,
         "experts": experts}
    if cfg.get("shared_expert_intermediate_size"):
        M["shared"] = tuple(_f(w[q + "shared_expert.%s.weight" % n]) for n in names)
        M["shared_gate"] = _f(w[q + "shared_expert_gate.weight"])
    return M


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
}


# ---------------------------------------------------------------- Qwen3-Next (Gated DeltaNet)

def gated_delta_recurrent(q, k, v, g, beta, state=None):
    """The gated delta rule (Yang, Kautz and Hatamizadeh, "Gated Delta Networks", 2024), token
    by token, per head: S_t = e^{g_t} S_{t-1} + k_t d_t^T with d_t = beta_t (v_t - (e^{g_t}
    S_{t-1})^T k_t), o_t = S_t^T q_t. q, k: [T, H, dk]; v: [T, H, dv]; g, beta: [T, H]; state
    [H, dk, dv] (zeros if None). -> (o [T, H, dv], the final state)."""
    T, H, dk = k.shape
    S = np.zeros((H, dk, v.shape[-1]), dtype=F) if state is None else np.array(state, dtype=F)
    out = np.empty((T, H, v.shape[-1]), dtype=F)
    for t in range(T):
        S = S * np.exp(g[t])[:, None, None]
        mem = np.einsum("hkv,hk->hv", S, k[t])
        d = (v[t] - mem) * beta[t][:, None]
        S = S + np.einsum("hk,hv->hkv", k[t], d)
        out[t] = np.einsum("hkv,hk->hv", S, q[t])
    return out, S


def gated_delta_chunked(q, k, v, g, beta, chunk, state=None):
    """The same rule a chunk of C tokens at a time, as the paper's chunkwise form: with
    G_t = sum_{j<=t} g_j within the chunk and S0 the state before it, the chunk's corrections
    d = T (beta v - beta e^G (k S0)) where T = (I + A)^-1, A[t, j] = beta_t e^{G_t - G_j} k_t.k_j
    (j < t); outputs (e^G q) S0 + (q k^T * e^{G_t - G_j}, j <= t) d; the state after it
    e^{G_C} S0 + (e^{G_C - G} k)^T d."""
    T, H, dk = k.shape
    dv = v.shape[-1]
    S = np.zeros((H, dk, dv), dtype=F) if state is None else np.array(state, dtype=F)
    out = np.empty((T, H, dv), dtype=F)
    for c0 in range(0, T, chunk):
        c1 = min(T, c0 + chunk)
        n = c1 - c0
        for h in range(H):
            G = np.cumsum(g[c0:c1, h])
            Q, K, V, B = q[c0:c1, h], k[c0:c1, h], v[c0:c1, h], beta[c0:c1, h]
            decay = np.exp(G[:, None] - G[None, :])
            A = np.tril(B[:, None] * decay * (K @ K.T), -1)
            rhs = B[:, None] * V - (B * np.exp(G))[:, None] * (K @ S[h])
            d = np.linalg.solve(np.eye(n) + A, rhs)
            out[c0:c1, h] = (np.exp(G)[:, None] * Q) @ S[h] + (np.tril(decay) * (Q @ K.T)) @ d
            S[h] = np.exp(G[-1]) * S[h] + (np.exp(G[-1] - G)[:, None] * K).T @ d
    return out, S


def _rms1p(x, w, eps):
    """RMSNorm with zero-centered weights applied as (1 + w) (Gemma's; Qwen3-Next's norms)."""
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * (1.0 + w)


class Qwen3Next:
    """Qwen3-Next (Qwen team 2025, model card; transformers' configuration fields): a hybrid of
    Gated DeltaNet layers (linear attention with a recurrent state) and gated full-attention
    layers, layer_types saying which, each followed by Qwen2-MoE's mixture (softmax router,
    top-k, the sigmoid-gated shared expert); every RMSNorm of the decoder zero-centered (1 + w).

    Gated DeltaNet, per token: in_proj_qkvz gives per key head g [q_g; k_g; v_g; z_g] (v and z of
    the g-th group of value heads), in_proj_ba [b_g; a_g]; a causal depthwise convolution of
    linear_conv_kernel_dim taps and SiLU over the channels [q; k; v]; beta = sigmoid(b),
    g = -exp(A_log) softplus(a + dt_bias); q and k L2-normalized, repeated to the value heads,
    q over sqrt(dk); the gated delta rule; each value head's output RMS-normalized (times
    weight, not 1 + w) and gated by silu(z); out_proj.
    Gated attention: q_proj gives per head [q_h; gate_h]; q, k normalized per head; RoPE on the
    first partial_rotary_factor of each head (halves); output * sigmoid(gate) before o_proj."""

    def __init__(self, cfg, w):
        self.cfg = cfg
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.H, self.KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = cfg.get("head_dim") or cfg["hidden_size"] // self.H
        self.nk, self.nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
        self.dk, self.dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
        self.kernel = cfg.get("linear_conv_kernel_dim", 4)
        n = cfg["num_hidden_layers"]
        every = cfg.get("full_attention_interval", 4)
        self.types = cfg.get("layer_types") or [
            "full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
        self.rope = Rope(cfg, self.hd)
        self.embed = _f(w["model.embed_tokens.weight"])
        self.vocab_size = self.embed.shape[0]
        self.norm = _f(w["model.norm.weight"])
        self.head = _f(w["lm_head.weight"]) if "lm_head.weight" in w else self.embed
        self.layers = []
        for i in range(n):
            p = "model.layers.%d." % i
            L = {k[len(p):]: _f(v) for k, v in w.items() if k.startswith(p) and ".experts." not in k}
            L["moe"] = _moe_of(cfg, "qwen2_moe", w, p, i)
            if L["moe"] is None:
                L["mlp"] = tuple(_f(w[p + "mlp.%s.weight" % n]) for n in
                                 ("gate_proj", "up_proj", "down_proj"))
            self.layers.append(L)

    def deltanet(self, h, L, chunk=None):
        T = h.shape[0]
        nk, nv, dk, dv = self.nk, self.nv, self.dk, self.dv
        r = nv // nk
        qkvz = (h @ L["linear_attn.in_proj_qkvz.weight"].T).reshape(T, nk, 2 * dk + 2 * r * dv)
        ba = (h @ L["linear_attn.in_proj_ba.weight"].T).reshape(T, nk, 2 * r)
        q, k = qkvz[..., :dk], qkvz[..., dk:2 * dk]
        v = qkvz[..., 2 * dk:2 * dk + r * dv].reshape(T, nv * dv)
        z = qkvz[..., 2 * dk + r * dv:].reshape(T, nv, dv)
        b, a = ba[..., :r].reshape(T, nv), ba[..., r:].reshape(T, nv)
        x = np.concatenate([q.reshape(T, nk * dk), k.reshape(T, nk * dk), v], axis=1)
        wc = L["linear_attn.conv1d.weight"].reshape(x.shape[1], self.kernel)
        xp = np.concatenate([np.zeros((self.kernel - 1, x.shape[1]), dtype=F), x])
        conv = sum(xp[j:j + T] * wc[:, j] for j in range(self.kernel))
        x = silu(conv)
        q = x[:, :nk * dk].reshape(T, nk, dk)
        k = x[:, nk * dk:2 * nk * dk].reshape(T, nk, dk)
        v = x[:, 2 * nk * dk:].reshape(T, nv, dv)
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) / math.sqrt(dk)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
        q, k = np.repeat(q, r, axis=1), np.repeat(k, r, axis=1)
        beta = 1.0 / (1.0 + np.exp(-b))
        g = -np.exp(L["linear_attn.A_log"]) * np.logaddexp(0.0, a + L["linear_attn.dt_bias"])
        o, _ = (gated_delta_recurrent(q, k, v, g, beta) if chunk is None
                else gated_delta_chunked(q, k, v, g, beta, chunk))
        o = rms_norm(o, L["linear_attn.norm.weight"], self.eps) * silu(z)
        return o.reshape(T, nv * dv) @ L["linear_attn.out_proj.weight"].T

    def attention(self, h, L):
        T = h.shape[0]
        qg = (h @ L["self_attn.q_proj.weight"].T).reshape(T, self.H, 2 * self.hd)
        q, gate = qg[..., :self.hd], qg[..., self.hd:].reshape(T, -1)
        k = (h @ L["self_attn.k_proj.weight"].T).reshape(T, self.KV, self.hd)
        v = (h @ L["self_attn.v_proj.weight"].T).reshape(T, self.KV, self.hd)
        q = _rms1p(q, L["self_attn.q_norm.weight"], self.eps)
        k = _rms1p(k, L["self_attn.k_norm.weight"], self.eps)
        pos = np.arange(T)
        a = causal_attention(self.rope.apply(q, pos), self.rope.apply(k, pos), v)
        return (a / (1.0 + np.exp(-gate))) @ L["self_attn.o_proj.weight"].T

    def logits(self, ids, chunk=None):
        x = self.embed[np.asarray(ids, dtype=np.int64)]
        for L, kind in zip(self.layers, self.types):
            h = _rms1p(x, L["input_layernorm.weight"], self.eps)
            x = x + (self.deltanet(h, L, chunk) if kind == "linear_attention"
                     else self.attention(h, L))
            h = _rms1p(x, L["post_attention_layernorm.weight"], self.eps)
            if L["moe"] is not None:
                x = x + moe(h, L["moe"])
            else:
                g, u, d = L["mlp"]
                x = x + (silu(h @ g.T) * (h @ u.T)) @ d.T
        return _rms1p(x, self.norm, self.eps) @ self.head.T


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


class Mamba:
    """Mamba (Gu and Dao 2023, Algorithm 2, "selective SSM"), as transformers' MambaMixer
    computes it: per layer x += out_proj(SSM(conv(x_in)) * silu(z)) over RMSNorm(x), with
    (x_in, z) = in_proj(.), a causal depthwise convolution of conv_kernel taps and SiLU, then
    (dt, B, C) = x_proj(.), dt = softplus(dt_proj(dt)), and for each token
    h = exp(dt * A) * h + dt * B * x, y = C . h + D * x, with A = -exp(A_log). The whole
    sequence at once, in float64, no state carried between calls."""

    def __init__(self, cfg, w):
        self.cfg = cfg
        self.vocab_size = cfg["vocab_size"]
        self.eps = cfg.get("layer_norm_epsilon", 1e-5)
        d = cfg["hidden_size"]
        rank = cfg.get("time_step_rank", "auto")
        self.rank = -(-d // 16) if rank == "auto" else rank
        self.n = cfg.get("state_size", 16)
        self.w = {k: v.astype(F) for k, v in w.items()}
        self.emb = self.w["backbone.embeddings.weight"]
        self.head = self.w.get("lm_head.weight", self.emb)

    def logits(self, ids):
        w, n, r = self.w, self.n, self.rank
        x = self.emb[np.asarray(ids)]
        T = len(ids)
        for i in range(self.cfg["num_hidden_layers"]):
            p = "backbone.layers.%d.mixer." % i
            h = rms_norm(x, w["backbone.layers.%d.norm.weight" % i], self.eps)
            xz = h @ w[p + "in_proj.weight"].T
            if p + "in_proj.bias" in w:
                xz = xz + w[p + "in_proj.bias"]
            inner = xz.shape[1] // 2
            xs, z = xz[:, :inner], xz[:, inner:]
            cw = w[p + "conv1d.weight"][:, 0, :]  # [inner, k]
            k = cw.shape[1]
            padded = np.vstack([np.zeros((k - 1, inner)), xs])
            conv = np.stack([(padded[t:t + k] * cw.T).sum(axis=0) for t in range(T)])
            if p + "conv1d.bias" in w:
                conv = conv + w[p + "conv1d.bias"]
            u = silu(conv)
            dbl = u @ w[p + "x_proj.weight"].T
            dt_lin = dbl[:, :r] @ w[p + "dt_proj.weight"].T + w[p + "dt_proj.bias"]
            dt = np.where(dt_lin > 20, dt_lin, np.log1p(np.exp(np.minimum(dt_lin, 20))))
            B, C = dbl[:, r:r + n], dbl[:, r + n:]
            A = -np.exp(w[p + "A_log"])  # [inner, n]
            state = np.zeros((inner, n))
            y = np.zeros((T, inner))
            for t in range(T):
                state = np.exp(dt[t][:, None] * A) * state + (dt[t] * u[t])[:, None] * B[t][None]
                y[t] = state @ C[t] + w[p + "D"] * u[t]
            y = y * silu(z)
            out = y @ w[p + "out_proj.weight"].T
            if p + "out_proj.bias" in w:
                out = out + w[p + "out_proj.bias"]
            x = x + out
        return rms_norm(x, w["backbone.norm_f.weight"], self.eps) @ self.head.T


def t5_position_bucket(relative, bidirectional, num_buckets, max_distance):
    """T5's bucket of a key at `relative` = key - query (Raffel et al. 2020, section 2.1: exact
    buckets for small distances, logarithmic ones up to max_distance, then one), with the
    logarithmic part in float32 and truncated, as transformers computes it."""
    bucket = 0
    n = num_buckets
    if bidirectional:
        n //= 2
        if relative > 0:
            bucket += n
        relative = abs(relative)
    else:
        relative = -min(relative, 0)
    max_exact = n // 2
    if relative < max_exact:
        return bucket + relative
    f32 = np.float32
    scaled = (np.log(f32(relative) / f32(max_exact)) / f32(math.log(max_distance / max_exact))
              * f32(n - max_exact))
    return bucket + min(max_exact + int(scaled), n - 1)


class T5:
    """T5 (Raffel et al. 2020) as transformers' T5ForConditionalGeneration computes it, in
    float64: RMS norms (no mean, no bias), unscaled dot-product attention plus a per-head bias
    over relative-position buckets (the first block's, for every block of its stack;
    bidirectional in the encoder, causal in the decoder), cross-attention without a bias, ReLU or
    gated-GELU MLPs in residual blocks, the decoder's output scaled by d_model^-0.5 when the
    embeddings are tied. logits(encoder_ids, decoder_ids) -> [len(decoder_ids), vocab]."""

    def __init__(self, cfg, w):
        self.cfg = cfg
        self.vocab_size = cfg["vocab_size"]
        self.w = {k: v.astype(F) for k, v in w.items()}
        self.H, self.dk = cfg["num_heads"], cfg["d_kv"]
        self.eps = cfg.get("layer_norm_epsilon", 1e-6)
        self.gated = cfg.get("feed_forward_proj", "relu").startswith("gated")
        self.tied = cfg.get("tie_word_embeddings", True)
        self.start = cfg.get("decoder_start_token_id", 0)

    def _bias(self, stack, nq, nk, bidirectional, q0=0):
        table = self.w["%s.block.0.layer.0.SelfAttention.relative_attention_bias.weight" % stack]
        b = np.zeros((self.H, nq, nk))
        for i in range(nq):
            for j in range(nk):
                b[:, i, j] = table[t5_position_bucket(
                    j - (q0 + i), bidirectional, self.cfg["relative_attention_num_buckets"],
                    self.cfg["relative_attention_max_distance"])]
        return b

    def _attention(self, p, xq, xkv, bias, causal):
        w, H, dk = self.w, self.H, self.dk
        q = (xq @ w[p + "q.weight"].T).reshape(len(xq), H, dk).transpose(1, 0, 2)
        k = (xkv @ w[p + "k.weight"].T).reshape(len(xkv), H, dk).transpose(1, 0, 2)
        v = (xkv @ w[p + "v.weight"].T).reshape(len(xkv), H, dk).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1)
        if bias is not None:
            s = s + bias
        if causal:
            s = s + np.triu(np.full((len(xq), len(xkv)), -np.inf), 1)
        out = softmax(s) @ v  # [H, q, dk]
        return out.transpose(1, 0, 2).reshape(len(xq), H * dk) @ w[p + "o.weight"].T

    def _mlp(self, p, x):
        w = self.w
        if self.gated:
            h = gelu_tanh(x @ w[p + "DenseReluDense.wi_0.weight"].T) * \
                (x @ w[p + "DenseReluDense.wi_1.weight"].T)
        else:
            h = np.maximum(x @ w[p + "DenseReluDense.wi.weight"].T, 0.0)
        return h @ w[p + "DenseReluDense.wo.weight"].T

    def encode(self, ids):
        w, eps = self.w, self.eps
        x = w["shared.weight"][np.asarray(ids)]
        bias = self._bias("encoder", len(ids), len(ids), True)
        for i in range(self.cfg["num_layers"]):
            p = "encoder.block.%d.layer." % i
            h = rms_norm(x, w[p + "0.layer_norm.weight"], eps)
            x = x + self._attention(p + "0.SelfAttention.", h, h, bias, False)
            x = x + self._mlp(p + "1.", rms_norm(x, w[p + "1.layer_norm.weight"], eps))
        return rms_norm(x, w["encoder.final_layer_norm.weight"], eps)

    def logits(self, encoder_ids, decoder_ids):
        w, eps = self.w, self.eps
        enc = self.encode(encoder_ids)
        x = w["shared.weight"][np.asarray(decoder_ids)]
        bias = self._bias("decoder", len(decoder_ids), len(decoder_ids), False)
        for i in range(self.cfg.get("num_decoder_layers", self.cfg["num_layers"])):
            p = "decoder.block.%d.layer." % i
            h = rms_norm(x, w[p + "0.layer_norm.weight"], eps)
            x = x + self._attention(p + "0.SelfAttention.", h, h, bias, True)
            h = rms_norm(x, w[p + "1.layer_norm.weight"], eps)
            x = x + self._attention(p + "1.EncDecAttention.", h, enc, None, False)
            x = x + self._mlp(p + "2.", rms_norm(x, w[p + "2.layer_norm.weight"], eps))
        x = rms_norm(x, w["decoder.final_layer_norm.weight"], eps)
        if self.tied:
            return (x * self.cfg["d_model"] ** -0.5) @ w["shared.weight"].T
        return x @ w["lm_head.weight"].T

    def greedy(self, encoder_ids, n):
        """n tokens by argmax (lowest id on ties) from the decoder's start token, with their
        log-probabilities."""
        dec = [self.start]
        out, lps = [], []
        for _ in range(n):
            last = self.logits(encoder_ids, dec)[-1]
            t = int(np.argmax(last))
            lp = last - last.max()
            lp = lp - np.log(np.exp(lp).sum())
            out.append(t)
            lps.append(float(lp[t]))
            dec.append(t)
        return out, lps


def gelu_erf(x):
    from math import erf
    return (0.5 * x * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))).astype(np.float32)


class Bert:
    """BERT / RoBERTa / XLM-R encoders from the papers (Devlin et al. 2019; Liu et al. 2019;
    Conneau et al. 2020) and transformers' BertModel/RobertaModel: word + absolute position +
    token type embeddings, LayerNorm; per layer self-attention over every token (softmax of
    q.k / sqrt(d_head)), output dense, residual, LayerNorm, an erf-GELU MLP, residual, LayerNorm.
    RoBERTa's positions start at pad_token_id + 1. The ForSequenceClassification heads: BERT's
    pooler (tanh(dense(h[0]))) then a linear layer; RoBERTa's dense, tanh, out_proj on h[0]."""

    def __init__(self, cfg, w):
        self.cfg, self.roberta = cfg, cfg["model_type"] in ("roberta", "xlm-roberta")
        self.cls = cfg["architectures"][0].endswith("SequenceClassification")
        self.P = ("roberta." if self.roberta else "bert.") if self.cls else ""
        self.w = {k: _f(v) for k, v in w.items()}

    def hidden(self, ids, types=None):
        cfg, w, P = self.cfg, self.w, self.P
        d, H, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
        dh = d // H
        n = len(ids)
        types = np.zeros(n, dtype=np.int64) if types is None else np.asarray(types)
        off = cfg["pad_token_id"] + 1 if self.roberta else 0
        x = (w[P + "embeddings.word_embeddings.weight"][ids]
             + w[P + "embeddings.position_embeddings.weight"][off + np.arange(n)]
             + w[P + "embeddings.token_type_embeddings.weight"][types])
        x = layer_norm(x, w[P + "embeddings.LayerNorm.weight"], w[P + "embeddings.LayerNorm.bias"], eps)
        for i in range(cfg["num_hidden_layers"]):
            p = P + "encoder.layer.%d." % i
            lin = lambda a, name: a @ w[p + name + ".weight"].T + w[p + name + ".bias"]
            q = lin(x, "attention.self.query").reshape(n, H, dh).transpose(1, 0, 2)
            k = lin(x, "attention.self.key").reshape(n, H, dh).transpose(1, 0, 2)
            v = lin(x, "attention.self.value").reshape(n, H, dh).transpose(1, 0, 2)
            a = softmax(q @ k.transpose(0, 2, 1) / np.sqrt(dh)) @ v
            a = a.transpose(1, 0, 2).reshape(n, d)
            x = layer_norm(x + lin(a, "attention.output.dense"),
                           w[p + "attention.output.LayerNorm.weight"],
                           w[p + "attention.output.LayerNorm.bias"], eps)
            h = gelu_erf(lin(x, "intermediate.dense"))
            x = layer_norm(x + lin(h, "output.dense"), w[p + "output.LayerNorm.weight"],
                           w[p + "output.LayerNorm.bias"], eps)
        return x

    def scores(self, ids, types=None):
        w, h0 = self.w, self.hidden(ids, types)[0]
        if self.roberta:
            z = np.tanh(h0 @ w["classifier.dense.weight"].T + w["classifier.dense.bias"])
            return z @ w["classifier.out_proj.weight"].T + w["classifier.out_proj.bias"]
        z = np.tanh(h0 @ w[self.P + "pooler.dense.weight"].T + w[self.P + "pooler.dense.bias"])
        return z @ w["classifier.weight"].T + w["classifier.bias"]


class NomicBert:
    """NomicBERT (Nussbaum et al. 2024, "Nomic Embed"; nomic-ai's NomicBertModel): BERT's post-LN
    block with rotary positions instead of a learned table (rotate-half pairs over the first
    rotary_emb_fraction of each head, base rotary_emb_base; with rotary_scaling_factor f the base
    grows as base * (f n / max_trained - (f - 1)) ^ (r / (r - 2)) for an input of n tokens past
    max_trained_positions), a fused Wqkv, a SwiGLU MLP fc2(fc11(x) * silu(fc12(x))), no biases
    where the config turns them off. Embeddings: word + token type, then emb_ln."""

    def __init__(self, cfg, w):
        self.cfg = cfg
        self.P = "bert." if "bert.emb_ln.weight" in w else ""
        self.w = {k: _f(v) for k, v in w.items()}

    def hidden(self, ids, types=None):
        cfg, w, P = self.cfg, self.w, self.P
        d, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
        dh = d // H
        rot = int(round(cfg["rotary_emb_fraction"] * dh))
        n = len(ids)
        types = np.zeros(n, dtype=np.int64) if types is None else np.asarray(types)
        base = float(cfg["rotary_emb_base"])
        f = cfg.get("rotary_scaling_factor")
        if f and n > cfg["max_trained_positions"]:
            base *= (f * n / cfg["max_trained_positions"] - (f - 1)) ** (rot / (rot - 2))
        x = w[P + "embeddings.word_embeddings.weight"][ids] + \
            w[P + "embeddings.token_type_embeddings.weight"][types]
        x = layer_norm(x, w[P + "emb_ln.weight"], w[P + "emb_ln.bias"], eps)
        pos = np.arange(n)

        def lin(a, name):
            y = a @ w[name + ".weight"].T
            return y + w[name + ".bias"] if name + ".bias" in w else y

        def rotate(t):  # [n, H, dh]
            return np.concatenate([rope_rotate_half(t[..., :rot], pos, base), t[..., rot:]], -1)

        for i in range(cfg["n_layer"]):
            p = P + "encoder.layers.%d." % i
            qkv = lin(x, p + "attn.Wqkv").reshape(n, 3, H, dh)
            q, k, v = rotate(qkv[:, 0]), rotate(qkv[:, 1]), qkv[:, 2]
            q, k, v = (t.transpose(1, 0, 2) for t in (q, k, v))
            a = (softmax(q @ k.transpose(0, 2, 1) / np.sqrt(dh)) @ v).transpose(1, 0, 2).reshape(n, d)
            x = layer_norm(x + lin(a, p + "attn.out_proj"), w[p + "norm1.weight"],
                           w[p + "norm1.bias"], eps)
            h = lin(x, p + "mlp.fc11") * silu(lin(x, p + "mlp.fc12"))
            x = layer_norm(x + lin(h, p + "mlp.fc2"), w[p + "norm2.weight"], w[p + "norm2.bias"], eps)
        return x


class JinaBert:
    """JinaBERT v2 (Günther et al. 2023, "Jina Embeddings 2"): BERT's post-LN block without a
    position table; each head adds the symmetric ALiBi bias -m_h |i - j| to its scaled scores
    (Press et al. 2022's slopes m_h: 2^(-8 (h + 1) / n) for n a power of two, else those of the
    power of two below n followed by every other slope of twice that); the MLP is GEGLU,
    wo(gelu(x W_gate) * (x W_up)) with W_gate the first half of gated_layers, then its own
    LayerNorm over the residual sum."""

    def __init__(self, cfg, w):
        self.cfg = cfg
        self.P = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""
        self.w = {k: _f(v) for k, v in w.items()}

    @staticmethod
    def slopes(n):
        def pow2(m):
            return [2.0 ** (-8.0 * (h + 1) / m) for h in range(m)]
        below = 2 ** int(math.floor(math.log2(n)))
        return (pow2(below) + pow2(2 * below)[0::2])[:n]

    def hidden(self, ids, types=None):
        cfg, w, P = self.cfg, self.w, self.P
        d, H, eps, ff = (cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"],
                         cfg["intermediate_size"])
        dh = d // H
        n = len(ids)
        types = np.zeros(n, dtype=np.int64) if types is None else np.asarray(types)
        x = w[P + "embeddings.word_embeddings.weight"][ids] + \
            w[P + "embeddings.token_type_embeddings.weight"][types]
        x = layer_norm(x, w[P + "embeddings.LayerNorm.weight"], w[P + "embeddings.LayerNorm.bias"], eps)
        dist = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
        alibi = -np.array(self.slopes(H))[:, None, None] * dist[None]  # [H, n, n]
        for i in range(cfg["num_hidden_layers"]):
            p = P + "encoder.layer.%d." % i
            lin = lambda a, name: a @ w[p + name + ".weight"].T + w[p + name + ".bias"]
            q = lin(x, "attention.self.query").reshape(n, H, dh).transpose(1, 0, 2)
            k = lin(x, "attention.self.key").reshape(n, H, dh).transpose(1, 0, 2)
            v = lin(x, "attention.self.value").reshape(n, H, dh).transpose(1, 0, 2)
            a = softmax(q @ k.transpose(0, 2, 1) / np.sqrt(dh) + alibi) @ v
            x = layer_norm(x + lin(a.transpose(1, 0, 2).reshape(n, d), "attention.output.dense"),
                           w[p + "attention.output.LayerNorm.weight"],
                           w[p + "attention.output.LayerNorm.bias"], eps)
            g = x @ w[p + "mlp.gated_layers.weight"].T
            h = gelu_erf(g[:, :ff]) * g[:, ff:]
            x = layer_norm(x + lin(h, "mlp.wo"), w[p + "mlp.layernorm.weight"],
                           w[p + "mlp.layernorm.bias"], eps)
        return x


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
