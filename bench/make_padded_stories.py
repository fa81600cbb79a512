"""Writes stories260K (a real, trained model) inside TinyLlama-1.1B's body: a Hugging Face
LlamaForCausalLM directory with TinyLlama's width, depth, heads and FFN (2048 hidden, 22 layers,
32 heads / 4 KV heads, FFN 5632) whose weights hold stories260K's and zeros elsewhere, so that it
computes stories260K's logits (up to rounding) at the cost of a 1.1B-shaped forward pass (the
vocabulary stays stories260K's 512 tokens). Speculative decoding needs a model whose outputs mean
something (random weights accept no proposals) and whose steps are bound by reading 2 GB of
weights (stories260K's are not): bench/spec_bench.sh measures on this.

How the embedding keeps the function: the hidden state lives in the first 64 of 2048 dims
(the others stay 0: their weights are 0); RMSNorm's mean over 2048 dims is 64/2048 of the mean over
64, so the norm weights are scaled by sqrt(64/2048) and eps by 64/2048. Each head's 8 dims go to
dims 8j and 32 + 8j of a 64-dim head (HF's rotate_half pairs j with j + 32; RoPE's frequency of
pair 8j at head size 64 is that of pair j at head size 8), and q is scaled by sqrt(64/8) so that
q.k / sqrt(64) is the old q.k / sqrt(8). Query head i of KV group g goes to query head 8g + i % 2
(TinyLlama groups 8 query heads per KV head, stories260K 2); the query heads left over have zero
weights and zero output projections. Layers 5..21 are all zeros: the residual passes through.

    python3 bench/make_padded_stories.py OUT_DIR [SHARED_DIR]
"""

import json
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import np_model  # noqa: E402
import safetensors_io  # noqa: E402

D, LAYERS, HEADS, KV, FFN, HD = 2048, 22, 32, 4, 5632, 64


def main():
    out = sys.argv[1]
    shared = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "..", "..", "shared")
    hdr, w = np_model.read_llama2c(os.path.join(shared, "models", "stories260K", "stories260K.bin"))
    d, h, kv, f, vocab = hdr["dim"], hdr["n_heads"], hdr["n_kv_heads"], hdr["hidden_dim"], hdr["vocab_size"]
    hd = d // h
    assert KV == kv and h % kv == 0 and HEADS % KV == 0 and HD % hd == 0
    step = HD // hd  # new head dims per old one
    norm = math.sqrt(d / D)

    def new_dim(r):  # an old (HF-ordered) head dim -> its place in a new head
        half = hd // 2
        return (r % half) * step + (HD // 2 if r >= half else 0)

    def hf_rows(m, heads):  # llama2.c's adjacent pairs -> HF's halves (make_checkpoints.py)
        order = np.concatenate([x * hd + np.r_[0:hd:2, 1:hd:2] for x in range(heads)])
        return m[order]

    def norm_w(x):
        v = np.zeros(D, np.float32)
        v[:d] = x * norm
        return v

    group_old, group_new = h // kv, HEADS // KV
    q_head = [(i // group_old) * group_new + i % group_old for i in range(h)]
    t = {}
    emb = np.zeros((vocab, D), np.float32)
    emb[:, :d] = w["token_embedding_table"]
    t["model.embed_tokens.weight"] = emb
    for layer in range(LAYERS):
        p = "model.layers.%d." % layer
        q = np.zeros((HEADS * HD, D), np.float32)
        k = np.zeros((KV * HD, D), np.float32)
        v = np.zeros((KV * HD, D), np.float32)
        o = np.zeros((D, HEADS * HD), np.float32)
        gate = np.zeros((FFN, D), np.float32)
        up = np.zeros((FFN, D), np.float32)
        down = np.zeros((D, FFN), np.float32)
        ln1 = np.zeros(D, np.float32)
        ln2 = np.zeros(D, np.float32)
        if layer < hdr["n_layers"]:
            wq, wk = hf_rows(w["wq"][layer], h), hf_rows(w["wk"][layer], kv)
            for i in range(h):
                for r in range(hd):
                    q[q_head[i] * HD + new_dim(r), :d] = wq[i * hd + r] * math.sqrt(HD / hd)
                    # The attention output of head i's value dim r (values keep their order).
                    o[:d, q_head[i] * HD + r] = w["wo"][layer][:, i * hd + r]
            for g in range(kv):
                for r in range(hd):
                    k[g * HD + new_dim(r), :d] = wk[g * hd + r]
                    v[g * HD + r, :d] = w["wv"][layer][g * hd + r]
            gate[:f, :d] = w["w1"][layer]
            up[:f, :d] = w["w3"][layer]
            down[:d, :f] = w["w2"][layer]
            ln1, ln2 = norm_w(w["rms_att_weight"][layer]), norm_w(w["rms_ffn_weight"][layer])
        t[p + "input_layernorm.weight"] = ln1
        t[p + "self_attn.q_proj.weight"] = q
        t[p + "self_attn.k_proj.weight"] = k
        t[p + "self_attn.v_proj.weight"] = v
        t[p + "self_attn.o_proj.weight"] = o
        t[p + "post_attention_layernorm.weight"] = ln2
        t[p + "mlp.gate_proj.weight"] = gate
        t[p + "mlp.up_proj.weight"] = up
        t[p + "mlp.down_proj.weight"] = down
    t["model.norm.weight"] = norm_w(w["rms_final_weight"])
    head = np.zeros((vocab, D), np.float32)
    head[:, :d] = w["token_embedding_table"] if hdr["shared_classifier"] else w["wcls"]
    t["lm_head.weight"] = head
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D,
           "intermediate_size": FFN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
           "num_key_value_heads": KV, "vocab_size": vocab,
           "max_position_embeddings": hdr["seq_len"], "rms_norm_eps": 1e-5 * d / D,
           "rope_theta": 10000.0, "tie_word_embeddings": False, "bos_token_id": 1,
           "eos_token_id": 2, "hidden_act": "silu"}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
    safetensors_io.save(os.path.join(out, "model.safetensors"), t, "F32")
    print(out)


if __name__ == "__main__":
    main()
