"""The numpy reference's models with a recurrent state (float64, whole sequences): Mamba's
selective scan and Qwen3-Next's Gated DeltaNet beside gated attention. np_model.load_hf builds
them."""

import math

import numpy as np

from np_blocks import F, Rope, _f, _moe_of, causal_attention, moe, rms_norm, silu


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
            L["moe"] = _moe_of(cfg, "qwen2_moe", w, p, i) if cfg.get("num_experts") else None
            if L["moe"] is None:
                L["mlp"] = tuple(_f(w[p + "mlp.%s.weight" % n]) for n in
                                 ("gate_proj", "up_proj", "down_proj"))
            self.layers.append(L)

    def deltanet(self, h, L, chunk=None):
        T = h.shape[0]
        nk, nv, dk, dv = self.nk, self.nv, self.dk, self.dv
        r = nv // nk
        if "linear_attn.in_proj_qkv.weight" in L:
            # Qwen3.5 (modular_qwen3_5.py): [q; k; v] whole, z, b and a from projections of
            # their own.
            x = h @ L["linear_attn.in_proj_qkv.weight"].T
            z = (h @ L["linear_attn.in_proj_z.weight"].T).reshape(T, nv, dv)
            b = h @ L["linear_attn.in_proj_b.weight"].T
            a = h @ L["linear_attn.in_proj_a.weight"].T
        else:
            qkvz = (h @ L["linear_attn.in_proj_qkvz.weight"].T).reshape(
                T, nk, 2 * dk + 2 * r * dv)
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
