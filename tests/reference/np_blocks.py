"""The numpy reference's building blocks (float64): norms, activations, attention, rotary
embeddings with every scaling (Rope), the mixture of experts and how checkpoints store it.
Shared by np_model (the decoders), np_encoders and np_recurrent."""

import math

import numpy as np

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
