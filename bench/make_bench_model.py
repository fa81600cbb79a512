"""Writes a random-weight Hugging Face model directory of a real model's shape, for benchmarks
(the numbers in ../shared/reference/cpu-limits.md were measured on the same shapes).

    python3 bench/make_bench_model.py OUT_DIR SHAPE      SHAPE: llama110m | gpt2-124m | gpt2-tiny | tinyllama | tinyllama-32k | qwen05b
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import safetensors_io  # noqa: E402

SHAPES = {
    "llama110m": dict(arch="llama", hidden=768, layers=12, heads=12, kv=12, ffn=2048, vocab=32000, ctx=1024),
    "tinyllama": dict(arch="llama", hidden=2048, layers=22, heads=32, kv=4, ffn=5632, vocab=32000, ctx=2048),
    # The same shape with a 32k context (position embeddings are RoPE: only the config's limit
    # differs): long-context prefill and decode at depth (bench/long_context_bench.sh).
    "tinyllama-32k": dict(arch="llama", hidden=2048, layers=22, heads=32, kv=4, ffn=5632, vocab=32000,
                          ctx=32768),
    # Qwen2.5-0.5B's shape (a 151,936-token vocabulary) as a Llama: the step that structured
    # output's masks are measured against (bench/grammar_bench.cc).
    "qwen05b": dict(arch="llama", hidden=896, layers=24, heads=14, kv=2, ffn=4864, vocab=151936, ctx=1024),
    "gpt2-124m": dict(arch="gpt2", hidden=768, layers=12, heads=12, kv=12, ffn=3072, vocab=50257, ctx=1024),
    # GPT-2's vocabulary on a tiny body: constrained decoding over a real vocabulary at almost no
    # forward-pass cost (bench/attack_bench.py).
    "gpt2-tiny": dict(arch="gpt2", hidden=64, layers=2, heads=2, kv=2, ffn=256, vocab=50257, ctx=1024),
}


def main():
    out, shape = sys.argv[1], sys.argv[2]
    s = SHAPES[shape]
    rng = np.random.default_rng(0)
    os.makedirs(out, exist_ok=True)
    d, f, v = s["hidden"], s["ffn"], s["vocab"]
    hd = d // s["heads"]
    kvd = s["kv"] * hd

    def w(*dims, std=0.02):
        return (rng.standard_normal(dims, dtype=np.float32) * std).astype(np.float32)

    t = {}
    if s["arch"] == "llama":
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d,
               "intermediate_size": f, "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"],
               "num_key_value_heads": s["kv"], "vocab_size": v, "max_position_embeddings": s["ctx"],
               "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
               "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu"}
        t["model.embed_tokens.weight"] = w(v, d)
        for i in range(s["layers"]):
            p = f"model.layers.{i}."
            t[p + "input_layernorm.weight"] = np.ones(d, np.float32)
            t[p + "self_attn.q_proj.weight"] = w(d, d)
            t[p + "self_attn.k_proj.weight"] = w(kvd, d)
            t[p + "self_attn.v_proj.weight"] = w(kvd, d)
            t[p + "self_attn.o_proj.weight"] = w(d, d)
            t[p + "post_attention_layernorm.weight"] = np.ones(d, np.float32)
            t[p + "mlp.gate_proj.weight"] = w(f, d)
            t[p + "mlp.up_proj.weight"] = w(f, d)
            t[p + "mlp.down_proj.weight"] = w(d, f)
        t["model.norm.weight"] = np.ones(d, np.float32)
    else:
        cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": d, "n_layer": s["layers"],
               "n_head": s["heads"], "n_positions": s["ctx"], "vocab_size": v, "n_inner": None,
               "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
               "bos_token_id": 50256, "eos_token_id": 50256}
        t["transformer.wte.weight"] = w(v, d)
        t["transformer.wpe.weight"] = w(s["ctx"], d)
        for i in range(s["layers"]):
            p = f"transformer.h.{i}."
            t[p + "ln_1.weight"] = np.ones(d, np.float32)
            t[p + "ln_1.bias"] = np.zeros(d, np.float32)
            t[p + "attn.c_attn.weight"] = w(d, 3 * d)
            t[p + "attn.c_attn.bias"] = np.zeros(3 * d, np.float32)
            t[p + "attn.c_proj.weight"] = w(d, d)
            t[p + "attn.c_proj.bias"] = np.zeros(d, np.float32)
            t[p + "ln_2.weight"] = np.ones(d, np.float32)
            t[p + "ln_2.bias"] = np.zeros(d, np.float32)
            t[p + "mlp.c_fc.weight"] = w(d, f)
            t[p + "mlp.c_fc.bias"] = np.zeros(f, np.float32)
            t[p + "mlp.c_proj.weight"] = w(f, d)
            t[p + "mlp.c_proj.bias"] = np.zeros(d, np.float32)
        t["transformer.ln_f.weight"] = np.ones(d, np.float32)
        t["transformer.ln_f.bias"] = np.zeros(d, np.float32)
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
    safetensors_io.save(os.path.join(out, "model.safetensors"), t)


if __name__ == "__main__":
    main()
