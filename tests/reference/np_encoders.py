"""The numpy reference's encoder models (float64, whole inputs): T5 (encoder-decoder) and the
BERT family (BERT, RoBERTa, XLM-R, NomicBERT, JinaBERT v2). np_model.load_hf builds them."""

import math

import numpy as np

from np_blocks import F, _f, gelu_tanh, layer_norm, rms_norm, rope_rotate_half, silu, softmax




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
