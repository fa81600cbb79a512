"""Write small random-weight Hugging Face model directories.

    write_checkpoint(out_dir, kind, dtype="F32", sharded=False, seed=0,
                     legacy_gpt2_names=False) -> out_dir

kinds: gpt2, llama_gqa, llama_tied, qwen2, mistral (see KINDS).

    convert_llama2c(bin_path, out_dir, dtype="F32") -> out_dir
writes a llama2.c .bin (e.g. stories260K) as a HF LlamaForCausalLM directory.

Each directory gets a config.json as transformers writes it and either
model.safetensors or model-0000i-of-0000N.safetensors +
model.safetensors.index.json. Weights come from a seeded numpy RNG and are
scaled so the logits are O(1) and attention is far from uniform.

Command line:
    python3 make_checkpoints.py OUT_DIR KIND [--dtype F32|F16|BF16] [--sharded]
        [--seed N] [--legacy-gpt2-names]
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

TORCH_DTYPE = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
TRANSFORMERS_VERSION = "4.46.3"
N_SHARDS = 3

# ---------------------------------------------------------------- configs


def _gpt2_config(dtype):
    return {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": 999,
        "embd_pdrop": 0.1,
        "eos_token_id": 999,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_ctx": 128,
        "n_embd": 72,
        "n_head": 6,
        "n_inner": None,
        "n_layer": 3,
        "n_positions": 128,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.1,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "summary_activation": None,
        "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "torch_dtype": TORCH_DTYPE[dtype],
        "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True,
        "vocab_size": 1000,
    }


def _llama_config(dtype, n_kv, tie, theta, head_dim=None):
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": 72,
        "initializer_range": 0.02,
        "intermediate_size": 100,
        "max_position_embeddings": 128,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": 6,
        "num_hidden_layers": 3,
        "num_key_value_heads": n_kv,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": float(theta),
        "tie_word_embeddings": tie,
        "torch_dtype": TORCH_DTYPE[dtype],
        "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True,
        "vocab_size": 1000,
    }
    if head_dim is not None:  # newer transformers write head_dim explicitly
        cfg["head_dim"] = head_dim
    return dict(sorted(cfg.items()))


def _mistral_config(dtype):
    return {
        "architectures": ["MistralForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": 72,
        "initializer_range": 0.02,
        "intermediate_size": 100,
        "max_position_embeddings": 128,
        "model_type": "mistral",
        "num_attention_heads": 6,
        "num_hidden_layers": 3,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": TORCH_DTYPE[dtype],
        "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True,
        "vocab_size": 1000,
    }


def _qwen2_config(dtype):
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 998,
        "eos_token_id": 999,
        "hidden_act": "silu",
        "hidden_size": 72,
        "initializer_range": 0.02,
        "intermediate_size": 100,
        "max_position_embeddings": 128,
        "max_window_layers": 3,
        "model_type": "qwen2",
        "num_attention_heads": 6,
        "num_hidden_layers": 3,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": TORCH_DTYPE[dtype],
        "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 1000,
    }


def _scaled(base, **over):
    cfg = dict(base)
    cfg.update(over)
    return dict(sorted(cfg.items()))


def _qwen3_config(dtype):
    # transformers v5's form: rope_theta inside rope_parameters (YaRN), per-head q/k norms.
    cfg = dict(_llama_config(dtype, n_kv=2, tie=False, theta=10000.0, head_dim=16))
    del cfg["rope_theta"], cfg["rope_scaling"]
    cfg.update({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                    "original_max_position_embeddings": 32},
                "use_sliding_window": False, "sliding_window": None})
    return dict(sorted(cfg.items()))


def _gemma_config(dtype, version):
    # Small, every feature binding: 4 layers (local and global), a window of 4 (shorter than
    # the prompts), query_pre_attn_scalar unlike head_dim, soft-caps the scores reach.
    cfg = {
        "architectures": ["Gemma%sForCausalLM" % ("" if version == 1 else version)],
        "model_type": {1: "gemma", 2: "gemma2", 3: "gemma3_text"}[version],
        "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 2,
        "eos_token_id": 1, "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 96,
        "max_position_embeddings": 128, "num_attention_heads": 4, "num_hidden_layers": 4,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
        "tie_word_embeddings": True, "torch_dtype": TORCH_DTYPE[dtype],
        "transformers_version": TRANSFORMERS_VERSION, "use_cache": True, "vocab_size": 1000,
    }
    if version >= 2:
        cfg.update({"query_pre_attn_scalar": 24, "sliding_window": 4})
    if version == 2:
        cfg.update({"attn_logit_softcapping": 3.0, "final_logit_softcapping": 2.0})
    if version == 3:
        cfg.update({"sliding_window_pattern": 2, "rope_theta": 1000000.0,
                    "rope_local_base_freq": 10000.0,
                    "rope_scaling": {"rope_type": "linear", "factor": 2.0},
                    "attn_logit_softcapping": None, "final_logit_softcapping": None})
    return dict(sorted(cfg.items()))


def _mamba_config(dtype):
    # transformers' MambaConfig at a small size: every feature binding (a time-step rank below
    # the width, a convolution of 4 taps, biases on the convolution only, tied embeddings).
    return dict(sorted({
        "architectures": ["MambaForCausalLM"], "model_type": "mamba",
        "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0, "conv_kernel": 4,
        "expand": 4, "hidden_act": "silu", "hidden_size": 48, "initializer_range": 0.1,
        "intermediate_size": 192, "layer_norm_epsilon": 1e-05, "num_hidden_layers": 3,
        "residual_in_fp32": True, "rescale_prenorm_residual": False, "state_size": 16,
        "tie_word_embeddings": True, "time_step_floor": 0.0001, "time_step_init_scheme": "random",
        "time_step_max": 0.1, "time_step_min": 0.001, "time_step_rank": "auto",
        "time_step_scale": 1.0, "torch_dtype": TORCH_DTYPE[dtype],
        "transformers_version": TRANSFORMERS_VERSION, "use_bias": False, "use_cache": True,
        "use_conv_bias": True, "use_mambapy": False, "vocab_size": 1000,
    }.items()))


def _t5_config(dtype, v11):
    # transformers' T5Config, small: 2 encoder and 3 decoder blocks (num_decoder_layers apart
    # from num_layers), 4 heads of d_kv 12 (inner 48 != d_model 40), 8 buckets over a distance of
    # 20 (prompts longer than both); v1.0: ReLU, tied embeddings (the decoder's output scaled by
    # d_model^-0.5); v1.1: gated GELU, an LM head of its own.
    return dict(sorted({
        "architectures": ["T5ForConditionalGeneration"], "model_type": "t5",
        "d_model": 40, "d_kv": 12, "d_ff": 56, "num_layers": 2, "num_decoder_layers": 3,
        "num_heads": 4, "relative_attention_num_buckets": 8,
        "relative_attention_max_distance": 20, "dropout_rate": 0.1,
        "layer_norm_epsilon": 1e-06, "initializer_factor": 1.0,
        "feed_forward_proj": "gated-gelu" if v11 else "relu", "is_encoder_decoder": True,
        "tie_word_embeddings": not v11, "decoder_start_token_id": 0, "pad_token_id": 0,
        "eos_token_id": 1, "n_positions": 512, "vocab_size": 1000, "use_cache": True,
        "torch_dtype": TORCH_DTYPE[dtype], "transformers_version": TRANSFORMERS_VERSION,
    }.items()))


def _bert_config(dtype, kind):
    # transformers' BertConfig / XLMRobertaConfig, small: 3 layers, 4 heads of 12, an MLP of 80,
    # 2 token types (BERT) or 1 (XLM-R, positions counted from pad_token_id + 1 = 2); "_cls":
    # a ForSequenceClassification head over 3 labels.
    roberta = kind.startswith("xlmr")
    arch = ("XLMRobertaFor" if roberta else "BertFor") + "SequenceClassification" \
        if kind.endswith("_cls") else ("XLMRobertaModel" if roberta else "BertModel")
    cfg = {
        "architectures": [arch], "model_type": "xlm-roberta" if roberta else "bert",
        "vocab_size": 300, "hidden_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,
        "intermediate_size": 80, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 66 if roberta else 64,
        "type_vocab_size": 1 if roberta else 2, "initializer_range": 0.02,
        "layer_norm_eps": 1e-05 if roberta else 1e-12, "pad_token_id": 1 if roberta else 0,
        "position_embedding_type": "absolute", "use_cache": True,
        "torch_dtype": TORCH_DTYPE[dtype], "transformers_version": TRANSFORMERS_VERSION,
    }
    if roberta:
        cfg.update({"bos_token_id": 0, "eos_token_id": 2})
    if kind.endswith("_cls"):
        cfg["id2label"] = {"0": "negative", "1": "neutral", "2": "positive"}
        cfg["label2id"] = {"negative": 0, "neutral": 1, "positive": 2}
    return dict(sorted(cfg.items()))


def _nomic_config(dtype):
    # nomic-ai's NomicBertConfig as nomic-embed-text-v1.5 ships it, small: 3 layers, 4 heads of
    # 12, a SwiGLU MLP of 64, rotary positions (base 1000, every dimension), no biases, 64
    # positions of which 32 were "trained" (rotary_scaling_factor null here; a test sets it).
    return dict(sorted({
        "architectures": ["NomicBertModel"], "model_type": "nomic_bert",
        "auto_map": {"AutoConfig": "nomic-ai/nomic-bert-2048--configuration_hf_nomic_bert.NomicBertConfig",
                     "AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel"},
        "vocab_size": 300, "n_embd": 48, "n_layer": 3, "n_head": 4, "n_inner": 64,
        "n_positions": 64, "max_trained_positions": 32, "type_vocab_size": 2,
        "layer_norm_epsilon": 1e-12, "activation_function": "swiglu", "prenorm": False,
        "causal": False, "qkv_proj_bias": False, "mlp_fc1_bias": False, "mlp_fc2_bias": False,
        "rotary_emb_fraction": 1.0, "rotary_emb_base": 1000, "rotary_emb_interleaved": False,
        "rotary_emb_scale_base": None, "rotary_scaling_factor": None, "pad_token_id": 0,
        "torch_dtype": TORCH_DTYPE[dtype], "transformers_version": TRANSFORMERS_VERSION,
    }.items()))


def _jina_config(dtype):
    # jina-embeddings-v2's JinaBertConfig, small: 3 layers, 6 heads of 8 (not a power of two:
    # ALiBi's interleaved slopes), a GEGLU MLP of 64, 128 positions (no table: ALiBi).
    cfg = _bert_config(dtype, "bert")
    cfg.update({"architectures": ["JinaBertForMaskedLM"], "num_attention_heads": 6,
                "intermediate_size": 64, "max_position_embeddings": 128,
                "position_embedding_type": "alibi", "feed_forward_type": "geglu",
                "emb_pooler": "mean"})
    return dict(sorted(cfg.items()))



def _gptj_config(dtype, codegen):
    """GPT-J's config.json fields (CodeGen's are the same with its own names)."""
    cfg = {
        "activation_function": "gelu_new",
        "architectures": ["CodeGenForCausalLM" if codegen else "GPTJForCausalLM"],
        "attn_pdrop": 0.0,
        "bos_token_id": 1,
        "embd_pdrop": 0.0,
        "eos_token_id": 2,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "codegen" if codegen else "gptj",
        "n_embd": 96 if codegen else 64,
        "n_head": 8 if codegen else 4,
        "n_inner": 112,
        "n_layer": 3,
        "n_positions": 128,
        "resid_pdrop": 0.0,
        "rotary_dim": 8,
        "tie_word_embeddings": False,
        "torch_dtype": TORCH_DTYPE[dtype],
        "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True,
        "vocab_size": 1000,
    }
    if codegen:
        cfg["n_ctx"] = 128
    return cfg


def _gpt_neox_config(dtype, parallel=True, rotary_pct=0.25):
    return {
        "architectures": ["GPTNeoXForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "hidden_act": "gelu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 128,
        "layer_norm_eps": 1e-05,
        "max_position_embeddings": 128,
        "model_type": "gpt_neox",
        "num_attention_heads": 4,
        "num_hidden_layers": 3,
        "rope_scaling": None,
        "rotary_emb_base": 10000,
        "rotary_pct": rotary_pct,
        "tie_word_embeddings": False,
        "torch_dtype": TORCH_DTYPE[dtype],
        "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True,
        "use_parallel_residual": parallel,
        "vocab_size": 1000,
    }


def _gpt_oss_config(dtype, mxfp4=True):
    """gpt-oss's config.json fields (the release's, scaled down): sliding layers of 4 tokens
    from the first, YaRN (not truncated) over an original context of 32, experts of 64."""
    cfg = {
        "architectures": ["GptOssForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "eos_token_id": 2,
        "experts_per_token": 2,
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 64,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "max_position_embeddings": 128,
        "model_type": "gpt_oss",
        "num_attention_heads": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 3,
        "num_key_value_heads": 2,
        "num_local_experts": 4,
        "pad_token_id": 0,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 4.0,
                         "original_max_position_embeddings": 32, "rope_type": "yarn",
                         "truncate": False},
        "rope_theta": 150000,
        "router_aux_loss_coef": 0.9,
        "sliding_window": 4,
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
        "torch_dtype": TORCH_DTYPE[dtype],
        "transformers_version": "4.55.0",
        "use_cache": True,
        "vocab_size": 1000,
    }
    if mxfp4:
        cfg["quantization_config"] = {"modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
            "lm_head"], "quant_method": "mxfp4"}
    return cfg



def _qwen3_next_config(dtype):
    """Qwen3-Next's config.json fields (Qwen3-Next-80B-A3B's form, scaled down): three Gated
    DeltaNet layers then a gated full-attention one, two key heads each shared by two value
    heads, experts with a gated shared expert in all but layer 2."""
    return {
        "architectures": ["Qwen3NextForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "decoder_sparse_step": 1,
        "eos_token_id": 2,
        "full_attention_interval": 4,
        "head_dim": 32,
        "hidden_act": "silu",
        "hidden_size": 64,
        "intermediate_size": 96,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention",
                        "full_attention"],
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 16,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_value_head_dim": 16,
        "max_position_embeddings": 128,
        "mlp_only_layers": [2],
        "model_type": "qwen3_next",
        "moe_intermediate_size": 32,
        "norm_topk_prob": True,
        "num_attention_heads": 4,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 4,
        "num_key_value_heads": 2,
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "shared_expert_intermediate_size": 48,
        "tie_word_embeddings": False,
        "torch_dtype": TORCH_DTYPE[dtype],
        "transformers_version": "4.57.0",
        "use_cache": True,
        "vocab_size": 1000,
    }


def _qwen3_5_config(dtype):
    """A Qwen3.5 text model's config.json (modular_qwen3_5.py's Qwen3_5TextConfig, scaled down):
    Qwen3-Next's layers with the DeltaNet's projections apart, dense MLPs, RoPE parameters in
    rope_parameters with the multimodal sections (plain RoPE for text)."""
    cfg = _qwen3_next_config(dtype)
    for k in ("decoder_sparse_step", "mlp_only_layers", "moe_intermediate_size", "norm_topk_prob",
              "num_experts", "num_experts_per_tok", "shared_expert_intermediate_size",
              "partial_rotary_factor", "rope_theta", "rope_scaling"):
        del cfg[k]
    cfg.update(architectures=["Qwen3_5ForCausalLM"], model_type="qwen3_5_text",
               layer_types=["linear_attention", "full_attention", "linear_attention",
                            "full_attention"],
               rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                "partial_rotary_factor": 0.25, "mrope_section": [2, 1, 1],
                                "mrope_interleaved": True})
    return cfg


KINDS = {
    "gpt2": lambda dt: _gpt2_config(dt),
    "t5": lambda dt: _t5_config(dt, False),
    "t5_v1_1": lambda dt: _t5_config(dt, True),
    "mamba": lambda dt: _mamba_config(dt),
    "bert": lambda dt: _bert_config(dt, "bert"),
    "bert_cls": lambda dt: _bert_config(dt, "bert_cls"),
    "xlmr": lambda dt: _bert_config(dt, "xlmr"),
    "xlmr_cls": lambda dt: _bert_config(dt, "xlmr_cls"),
    "nomic": lambda dt: _nomic_config(dt),
    # The parallel-residual family (issue 53): GPT-J, CodeGen (4-shard fused qkv), GPT-NeoX in
    # parallel (Pythia) and sequential form with half its head rotated.
    "gptj": lambda dt: _gptj_config(dt, False),
    "codegen": lambda dt: _gptj_config(dt, True),
    "gpt_neox": lambda dt: _gpt_neox_config(dt),
    "gpt_neox_seq": lambda dt: _gpt_neox_config(dt, parallel=False, rotary_pct=0.5),
    # gpt-oss (issue 53): experts in OpenAI's MXFP4 blocks as released, or dequantized.
    "gpt_oss": lambda dt: _gpt_oss_config(dt),
    "gpt_oss_float": lambda dt: _gpt_oss_config(dt, mxfp4=False),
    # Qwen3-Next (issue 53): Gated DeltaNet layers beside gated attention.
    "qwen3_next": lambda dt: _qwen3_next_config(dt),
    "qwen3_5": lambda dt: _qwen3_5_config(dt),
    "jina": lambda dt: _jina_config(dt),
    "llama_gqa": lambda dt: _llama_config(dt, n_kv=2, tie=False, theta=10000.0),
    "llama_tied": lambda dt: _llama_config(dt, n_kv=6, tie=True, theta=500000.0, head_dim=12),
    "qwen2": lambda dt: _qwen2_config(dt),
    "mistral": lambda dt: _mistral_config(dt),
    # RoPE scalings (issue 21), contexts short enough that the test prompts cross them.
    "llama31": lambda dt: _scaled(
        _llama_config(dt, n_kv=2, tie=False, theta=10000.0),
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
    "llama_linear": lambda dt: _scaled(_llama_config(dt, n_kv=2, tie=False, theta=10000.0),
                                       rope_scaling={"type": "linear", "factor": 2.5}),
    "llama_dynamic": lambda dt: _scaled(_llama_config(dt, n_kv=2, tie=False, theta=10000.0),
                                        max_position_embeddings=8,
                                        rope_scaling={"type": "dynamic", "factor": 4.0}),
    # Phi-3's form, on Llama: the pretrained context at the top, partial rotary (6 of 12).
    "llama_longrope": lambda dt: _scaled(
        _llama_config(dt, n_kv=2, tie=False, theta=10000.0),
        original_max_position_embeddings=8, partial_rotary_factor=0.5,
        rope_scaling={"type": "longrope", "short_factor": [1.0, 1.5, 3.0],
                      "long_factor": [1.2, 4.0, 16.0]}),
    "qwen3": lambda dt: _qwen3_config(dt),
    # Phi-4-mini's form: fused projections, LongRoPE past an original context of 8, partial
    # rotary (12 of 16 dimensions), tied.
    "phi3": lambda dt: _scaled(
        _llama_config(dt, n_kv=2, tie=True, theta=10000.0, head_dim=16),
        architectures=["Phi3ForCausalLM"], model_type="phi3", hidden_size=64,
        num_attention_heads=4, original_max_position_embeddings=8, partial_rotary_factor=0.75,
        rope_scaling={"type": "longrope", "short_factor": [1.0, 1.1, 1.3, 2.0, 3.0, 5.0],
                      "long_factor": [1.0, 1.5, 2.5, 6.0, 12.0, 30.0]}),
    # Mixtures of experts, small: uneven routing from random routers.
    "mixtral": lambda dt: _scaled(_llama_config(dt, n_kv=2, tie=False, theta=10000.0),
                                  architectures=["MixtralForCausalLM"], model_type="mixtral",
                                  num_local_experts=4, num_experts_per_tok=2,
                                  intermediate_size=48, sliding_window=None),
    "qwen2moe": lambda dt: _scaled(
        _qwen2_config(dt), architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe",
        num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=40, norm_topk_prob=False, decoder_sparse_step=1,
        mlp_only_layers=[1]),
    "qwen3moe": lambda dt: _scaled(
        _qwen3_config(dt), architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
        num_experts=8, num_experts_per_tok=3, moe_intermediate_size=24, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[]),
    # transformers v5's saved form: the experts of each layer stacked (gate_up_proj, down_proj).
    "qwen3moe_v5": lambda dt: _scaled(KINDS["qwen3moe"](dt), transformers_version="5.0.0"),
    "mixtral_v5": lambda dt: _scaled(KINDS["mixtral"](dt), transformers_version="5.0.0"),
    # OLMoE: q/k RMSNorm over the whole projections, experts in every layer, no renormalizing.
    "olmoe": lambda dt: _scaled(
        _llama_config(dt, n_kv=2, tie=False, theta=10000.0), architectures=["OlmoeForCausalLM"],
        model_type="olmoe", num_experts=6, num_experts_per_tok=2, intermediate_size=32,
        norm_topk_prob=False, clip_qkv=None),
    "gemma": lambda dt: _gemma_config(dt, 1),
    "gemma2": lambda dt: _gemma_config(dt, 2),
    "gemma3": lambda dt: _gemma_config(dt, 3),
    # As llama.cpp's GGUF can hold them: the score scale from head_dim, Gemma 3's six-layer
    # pattern (five local, one global).
    "gemma2_gguf": lambda dt: _scaled(_gemma_config(dt, 2), query_pre_attn_scalar=16),
    "gemma3_gguf": lambda dt: _scaled(_gemma_config(dt, 3), query_pre_attn_scalar=16,
                                      sliding_window_pattern=6, num_hidden_layers=6),
    # Mistral with a real sliding window shorter than the prompts.
    "mistral_window": lambda dt: _scaled(_mistral_config(dt), sliding_window=4),
    # Rows of multiples of 64: the int8/q4 dot-product kernels take every matrix.
    "llama_wide": lambda dt: dict(_llama_config(dt, n_kv=2, tie=False, theta=10000.0),
                                  hidden_size=128, intermediate_size=256, num_attention_heads=4),
}

# ---------------------------------------------------------------- weights


def _normal(rng, shape, std):
    return (rng.standard_normal(shape) * std).astype(np.float32)


def _norm_weight(rng, n):
    return (1.0 + rng.standard_normal(n) * 0.1).astype(np.float32)


def _gpt2_weights(cfg, rng, legacy):
    d, L, V, P = cfg["n_embd"], cfg["n_layer"], cfg["vocab_size"], cfg["n_positions"]
    inner = cfg["n_inner"] or 4 * d
    pre = "" if legacy else "transformer."
    w = {
        pre + "wte.weight": _normal(rng, (V, d), 0.2),
        pre + "wpe.weight": _normal(rng, (P, d), 0.2),
    }
    for i in range(L):
        p = "%sh.%d." % (pre, i)
        w[p + "ln_1.weight"] = _norm_weight(rng, d)
        w[p + "ln_1.bias"] = _normal(rng, d, 0.05)
        if legacy:
            # Old GPT-2 files (e.g. the original "gpt2" checkpoint) also store
            # the causal-mask buffer; loaders must ignore it.
            w[p + "attn.bias"] = np.tril(np.ones((P, P), np.float32)).reshape(1, 1, P, P)
        w[p + "attn.c_attn.weight"] = _normal(rng, (d, 3 * d), 0.2)    # Conv1D [in, out]
        w[p + "attn.c_attn.bias"] = _normal(rng, 3 * d, 0.05)
        w[p + "attn.c_proj.weight"] = _normal(rng, (d, d), 0.3)
        w[p + "attn.c_proj.bias"] = _normal(rng, d, 0.05)
        w[p + "ln_2.weight"] = _norm_weight(rng, d)
        w[p + "ln_2.bias"] = _normal(rng, d, 0.05)
        w[p + "mlp.c_fc.weight"] = _normal(rng, (d, inner), 0.3)
        w[p + "mlp.c_fc.bias"] = _normal(rng, inner, 0.05)
        w[p + "mlp.c_proj.weight"] = _normal(rng, (inner, d), 0.3)
        w[p + "mlp.c_proj.bias"] = _normal(rng, d, 0.05)
    w[pre + "ln_f.weight"] = _norm_weight(rng, d)
    w[pre + "ln_f.bias"] = _normal(rng, d, 0.05)
    return w


def _t5_weights(cfg, rng):
    d, V, H, dk, ff = (cfg["d_model"], cfg["vocab_size"], cfg["num_heads"], cfg["d_kv"],
                       cfg["d_ff"])
    inner = H * dk
    gated = cfg["feed_forward_proj"].startswith("gated")
    w = {"shared.weight": _normal(rng, (V, d), 1.0)}

    def attention(p):
        for m in "qkv":
            w[p + m + ".weight"] = _normal(rng, (inner, d), 0.25)
        w[p + "o.weight"] = _normal(rng, (d, inner), 0.2)

    def mlp(p):
        if gated:
            w[p + "DenseReluDense.wi_0.weight"] = _normal(rng, (ff, d), 0.3)
            w[p + "DenseReluDense.wi_1.weight"] = _normal(rng, (ff, d), 0.3)
        else:
            w[p + "DenseReluDense.wi.weight"] = _normal(rng, (ff, d), 0.3)
        w[p + "DenseReluDense.wo.weight"] = _normal(rng, (d, ff), 0.2)

    for stack, n in (("encoder", cfg["num_layers"]), ("decoder", cfg["num_decoder_layers"])):
        for i in range(n):
            p = "%s.block.%d.layer." % (stack, i)
            w[p + "0.layer_norm.weight"] = _norm_weight(rng, d)
            attention(p + "0.SelfAttention.")
            if i == 0:  # the position bias: the first block's, shared by the stack
                w[p + "0.SelfAttention.relative_attention_bias.weight"] = _normal(
                    rng, (cfg["relative_attention_num_buckets"], H), 1.0)
            if stack == "decoder":
                w[p + "1.layer_norm.weight"] = _norm_weight(rng, d)
                attention(p + "1.EncDecAttention.")
            last = "2." if stack == "decoder" else "1."
            w[p + last + "layer_norm.weight"] = _norm_weight(rng, d)
            mlp(p + last)
        w[stack + ".final_layer_norm.weight"] = _norm_weight(rng, d)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = _normal(rng, (V, d), 0.3)
    return w


def _bert_weights(cfg, rng):
    d, V, L, ff = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"], \
        cfg["intermediate_size"]
    roberta = cfg["model_type"] == "xlm-roberta"
    cls = cfg["architectures"][0].endswith("SequenceClassification")
    P = ("roberta." if roberta else "bert.") if cls else ""
    w = {P + "embeddings.word_embeddings.weight": _normal(rng, (V, d), 1.0),
         P + "embeddings.position_embeddings.weight":
             _normal(rng, (cfg["max_position_embeddings"], d), 0.5),
         P + "embeddings.token_type_embeddings.weight": _normal(rng, (cfg["type_vocab_size"], d), 0.5),
         P + "embeddings.LayerNorm.weight": _norm_weight(rng, d),
         P + "embeddings.LayerNorm.bias": _normal(rng, d, 0.1)}
    for i in range(L):
        p = P + "encoder.layer.%d." % i
        for m in ("query", "key", "value"):
            w[p + "attention.self.%s.weight" % m] = _normal(rng, (d, d), 0.25)
            w[p + "attention.self.%s.bias" % m] = _normal(rng, d, 0.1)
        w[p + "attention.output.dense.weight"] = _normal(rng, (d, d), 0.2)
        w[p + "attention.output.dense.bias"] = _normal(rng, d, 0.1)
        w[p + "attention.output.LayerNorm.weight"] = _norm_weight(rng, d)
        w[p + "attention.output.LayerNorm.bias"] = _normal(rng, d, 0.1)
        w[p + "intermediate.dense.weight"] = _normal(rng, (ff, d), 0.3)
        w[p + "intermediate.dense.bias"] = _normal(rng, ff, 0.1)
        w[p + "output.dense.weight"] = _normal(rng, (d, ff), 0.2)
        w[p + "output.dense.bias"] = _normal(rng, d, 0.1)
        w[p + "output.LayerNorm.weight"] = _norm_weight(rng, d)
        w[p + "output.LayerNorm.bias"] = _normal(rng, d, 0.1)
    n = len(cfg.get("id2label", {}))
    if cls and roberta:
        w["classifier.dense.weight"] = _normal(rng, (d, d), 0.2)
        w["classifier.dense.bias"] = _normal(rng, d, 0.1)
        w["classifier.out_proj.weight"] = _normal(rng, (n, d), 0.3)
        w["classifier.out_proj.bias"] = _normal(rng, n, 0.1)
    elif cls:
        w[P + "pooler.dense.weight"] = _normal(rng, (d, d), 0.2)
        w[P + "pooler.dense.bias"] = _normal(rng, d, 0.1)
        w["classifier.weight"] = _normal(rng, (n, d), 0.3)
        w["classifier.bias"] = _normal(rng, n, 0.1)
    else:  # BertModel keeps its (unused) pooler
        w["pooler.dense.weight"] = _normal(rng, (d, d), 0.2)
        w["pooler.dense.bias"] = _normal(rng, d, 0.1)
    return w


def _mamba_weights(cfg, rng):
    d, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    inner, n, k = cfg["intermediate_size"], cfg["state_size"], cfg["conv_kernel"]
    r = -(-d // 16) if cfg["time_step_rank"] == "auto" else cfg["time_step_rank"]
    w = {"backbone.embeddings.weight": _normal(rng, (V, d), 0.3)}
    for i in range(L):
        p = "backbone.layers.%d." % i
        w[p + "norm.weight"] = _norm_weight(rng, d)
        w[p + "mixer.in_proj.weight"] = _normal(rng, (2 * inner, d), 0.2)
        w[p + "mixer.conv1d.weight"] = _normal(rng, (inner, 1, k), 0.4)
        w[p + "mixer.conv1d.bias"] = _normal(rng, inner, 0.1)
        w[p + "mixer.x_proj.weight"] = _normal(rng, (r + 2 * n, inner), 0.2)
        w[p + "mixer.dt_proj.weight"] = _normal(rng, (inner, r), 0.3)
        # Step sizes around softplus(-2)..softplus(0.5): states decay over a few tokens.
        w[p + "mixer.dt_proj.bias"] = rng.uniform(-2.0, 0.5, inner).astype(np.float32)
        # S4D-real's A = -(1..n), as transformers initializes it, jittered.
        a = np.tile(np.arange(1, n + 1, dtype=np.float64), (inner, 1))
        w[p + "mixer.A_log"] = np.log(a * (1.0 + 0.1 * rng.random((inner, n)))).astype(np.float32)
        w[p + "mixer.D"] = (1.0 + 0.2 * rng.standard_normal(inner)).astype(np.float32)
        w[p + "mixer.out_proj.weight"] = _normal(rng, (d, inner), 0.2)
    w["backbone.norm_f.weight"] = _norm_weight(rng, d)
    return w


def _gemma_weights(cfg, rng):
    d, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    H, KV, hd, ff = (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
                     cfg["intermediate_size"])
    v = {"gemma": 1, "gemma2": 2, "gemma3_text": 3}[cfg["model_type"]]
    w = {"model.embed_tokens.weight": _normal(rng, (V, d), 0.05)}
    for i in range(L):
        p = "model.layers.%d." % i
        # Gemma's norms scale by (1 + w): weights near 0.
        norms = ["input_layernorm", "post_attention_layernorm"]
        if v >= 2:
            norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
        for n in norms:
            w[p + n + ".weight"] = _normal(rng, d, 0.1)
        w[p + "self_attn.q_proj.weight"] = _normal(rng, (H * hd, d), 0.15)
        w[p + "self_attn.k_proj.weight"] = _normal(rng, (KV * hd, d), 0.15)
        w[p + "self_attn.v_proj.weight"] = _normal(rng, (KV * hd, d), 0.12)
        if v == 3:
            w[p + "self_attn.q_norm.weight"] = _normal(rng, hd, 0.1)
            w[p + "self_attn.k_norm.weight"] = _normal(rng, hd, 0.1)
        w[p + "self_attn.o_proj.weight"] = _normal(rng, (d, H * hd), 0.06)
        w[p + "mlp.gate_proj.weight"] = _normal(rng, (ff, d), 0.12)
        w[p + "mlp.up_proj.weight"] = _normal(rng, (ff, d), 0.12)
        w[p + "mlp.down_proj.weight"] = _normal(rng, (d, ff), 0.08)
    w["model.norm.weight"] = _normal(rng, d, 0.1)
    return w


def _moe_layer(cfg, i):
    mt = cfg["model_type"]
    if mt in ("mixtral", "olmoe"):
        return True
    if mt in ("qwen2_moe", "qwen3_moe", "qwen3_next"):
        return i not in cfg.get("mlp_only_layers", []) and (i + 1) % cfg.get(
            "decoder_sparse_step", 1) == 0
    return False


def _expert_weights(cfg, rng, w, p, d):
    mixtral = cfg["model_type"] == "mixtral"
    q = p + ("block_sparse_moe." if mixtral else "mlp.")
    E = cfg["num_local_experts"] if mixtral else cfg["num_experts"]
    I = cfg["moe_intermediate_size"] if "moe_intermediate_size" in cfg else cfg["intermediate_size"]
    names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
    w[q + "gate.weight"] = _normal(rng, (E, d), 0.3)  # a router that routes unevenly
    for e in range(E):
        x = q + "experts.%d." % e
        w[x + names[0] + ".weight"] = _normal(rng, (I, d), 0.12)
        w[x + names[1] + ".weight"] = _normal(rng, (I, d), 0.12)
        w[x + names[2] + ".weight"] = _normal(rng, (d, I), 0.1)
    S = cfg.get("shared_expert_intermediate_size")
    if S:
        w[q + "shared_expert.gate_proj.weight"] = _normal(rng, (S, d), 0.12)
        w[q + "shared_expert.up_proj.weight"] = _normal(rng, (S, d), 0.12)
        w[q + "shared_expert.down_proj.weight"] = _normal(rng, (d, S), 0.08)
        w[q + "shared_expert_gate.weight"] = _normal(rng, (1, d), 0.3)


def _llama_weights(cfg, rng):
    d, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    hd = cfg.get("head_dim") or d // H
    ff = cfg["intermediate_size"]
    qkv_bias = cfg["model_type"] in ("qwen2", "qwen2_moe") or cfg.get("attention_bias", False)
    qk_norm = cfg["model_type"] in ("qwen3", "qwen3_moe")
    full_qk_norm = cfg["model_type"] == "olmoe"
    w = {"model.embed_tokens.weight": _normal(rng, (V, d), 0.2)}
    for i in range(L):
        p = "model.layers.%d." % i
        w[p + "input_layernorm.weight"] = _norm_weight(rng, d)
        # PyTorch Linear [out, in]
        w[p + "self_attn.q_proj.weight"] = _normal(rng, (H * hd, d), 0.12)
        w[p + "self_attn.k_proj.weight"] = _normal(rng, (KV * hd, d), 0.12)
        w[p + "self_attn.v_proj.weight"] = _normal(rng, (KV * hd, d), 0.12)
        if qkv_bias:
            w[p + "self_attn.q_proj.bias"] = _normal(rng, H * hd, 0.1)
            w[p + "self_attn.k_proj.bias"] = _normal(rng, KV * hd, 0.1)
            w[p + "self_attn.v_proj.bias"] = _normal(rng, KV * hd, 0.1)
        if qk_norm:
            w[p + "self_attn.q_norm.weight"] = _norm_weight(rng, hd)
            w[p + "self_attn.k_norm.weight"] = _norm_weight(rng, hd)
        if full_qk_norm:
            w[p + "self_attn.q_norm.weight"] = _norm_weight(rng, H * hd)
            w[p + "self_attn.k_norm.weight"] = _norm_weight(rng, KV * hd)
        w[p + "self_attn.o_proj.weight"] = _normal(rng, (d, H * hd), 0.06)
        w[p + "post_attention_layernorm.weight"] = _norm_weight(rng, d)
        if _moe_layer(cfg, i):
            _expert_weights(cfg, rng, w, p, d)
            continue
        w[p + "mlp.gate_proj.weight"] = _normal(rng, (ff, d), 0.12)
        w[p + "mlp.up_proj.weight"] = _normal(rng, (ff, d), 0.12)
        w[p + "mlp.down_proj.weight"] = _normal(rng, (d, ff), 0.08)
    w["model.norm.weight"] = _norm_weight(rng, d)
    if not cfg.get("tie_word_embeddings", False):
        w["lm_head.weight"] = _normal(rng, (V, d), 0.2)
    if cfg["model_type"] == "phi3":  # stored fused, as Phi-3 checkpoints are
        for i in range(L):
            p = "model.layers.%d." % i
            w[p + "self_attn.qkv_proj.weight"] = np.concatenate(
                [w.pop(p + "self_attn.%s_proj.weight" % n) for n in "qkv"])
            w[p + "mlp.gate_up_proj.weight"] = np.concatenate(
                [w.pop(p + "mlp.gate_proj.weight"), w.pop(p + "mlp.up_proj.weight")])
    if cfg.get("transformers_version", "").startswith("5") and "num_experts_per_tok" in cfg:
        _stack_experts(cfg, w)
    return w


def _stack_experts(cfg, w):
    """transformers v5's layout: under mlp. for every family, each layer's experts as
    experts.gate_up_proj [E, 2I, H] (each expert's gate rows, then its up rows) and
    experts.down_proj [E, H, I]."""
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        for old in ("block_sparse_moe.", "mlp."):
            if p + old + "gate.weight" in w:
                break
        else:
            continue
        names = ("w1", "w3", "w2") if old == "block_sparse_moe." else (
            "gate_proj", "up_proj", "down_proj")
        E = w[p + old + "gate.weight"].shape[0]
        x = p + old + "experts.%d.%s.weight"
        gu = [np.concatenate([w.pop(x % (e, names[0])), w.pop(x % (e, names[1]))]) for e in range(E)]
        dn = [w.pop(x % (e, names[2])) for e in range(E)]
        w[p + "mlp.gate.weight"] = w.pop(p + old + "gate.weight")
        w[p + "mlp.experts.gate_up_proj"] = np.stack(gu)
        w[p + "mlp.experts.down_proj"] = np.stack(dn)


# ---------------------------------------------------------------- writer



def _gptj_weights(cfg, rng):
    """GPT-J / CodeGen / GPT-NeoX tensors under transformers' names, with the buffers older
    checkpoints carry (causal masks, masked_bias), which a loader must skip."""
    neox = cfg["model_type"] == "gpt_neox"
    d = cfg["hidden_size"] if neox else cfg["n_embd"]
    ffn = cfg["intermediate_size"] if neox else cfg["n_inner"]
    n_layers = cfg["num_hidden_layers"] if neox else cfg["n_layer"]
    V = cfg["vocab_size"]
    s = 1.0 / np.sqrt(d)
    w = {}
    pre = "gpt_neox." if neox else "transformer."
    w[pre + ("embed_in.weight" if neox else "wte.weight")] = _normal(rng, (V, d), 1.0)
    for i in range(n_layers):
        p = pre + ("layers.%d." % i if neox else "h.%d." % i)
        ln1 = "input_layernorm." if neox else "ln_1."
        w[p + ln1 + "weight"] = _norm_weight(rng, d)
        w[p + ln1 + "bias"] = _normal(rng, d, 0.1)
        if neox:
            w[p + "post_attention_layernorm.weight"] = _norm_weight(rng, d)
            w[p + "post_attention_layernorm.bias"] = _normal(rng, d, 0.1)
            w[p + "attention.query_key_value.weight"] = _normal(rng, (3 * d, d), 2 * s)
            w[p + "attention.query_key_value.bias"] = _normal(rng, 3 * d, 0.1)
            w[p + "attention.dense.weight"] = _normal(rng, (d, d), s)
            w[p + "attention.dense.bias"] = _normal(rng, d, 0.1)
            w[p + "mlp.dense_h_to_4h.weight"] = _normal(rng, (ffn, d), s)
            w[p + "mlp.dense_h_to_4h.bias"] = _normal(rng, ffn, 0.1)
            w[p + "mlp.dense_4h_to_h.weight"] = _normal(rng, (d, ffn), 1.0 / np.sqrt(ffn))
            w[p + "mlp.dense_4h_to_h.bias"] = _normal(rng, d, 0.1)
            w[p + "attention.rotary_emb.inv_freq"] = np.zeros(4, np.float32)
        else:
            if cfg["model_type"] == "codegen":
                w[p + "attn.qkv_proj.weight"] = _normal(rng, (3 * d, d), 2 * s)
            else:
                for n in ("q", "k", "v"):
                    w[p + "attn.%s_proj.weight" % n] = _normal(rng, (d, d), 2 * s)
            w[p + "attn.out_proj.weight"] = _normal(rng, (d, d), s)
            w[p + "mlp.fc_in.weight"] = _normal(rng, (ffn, d), s)
            w[p + "mlp.fc_in.bias"] = _normal(rng, ffn, 0.1)
            w[p + "mlp.fc_out.weight"] = _normal(rng, (d, ffn), 1.0 / np.sqrt(ffn))
            w[p + "mlp.fc_out.bias"] = _normal(rng, d, 0.1)
            w[p + "attn.masked_bias"] = np.array(-1e9, np.float32)
    lnf = "final_layer_norm." if neox else "ln_f."
    w[pre + lnf + "weight"] = _norm_weight(rng, d)
    w[pre + lnf + "bias"] = _normal(rng, d, 0.1)
    if neox:
        w["embed_out.weight"] = _normal(rng, (V, d), s)
    else:
        w["lm_head.weight"] = _normal(rng, (V, d), s)
        w["lm_head.bias"] = _normal(rng, V, 0.5)
    return w


def _gpt_oss_weights(cfg, rng):
    """gpt-oss tensors under transformers' names; the experts' gate_up_proj interleaves gate and
    up outputs. MXFP4 (quantization_config): *_blocks [E, out, in / 32, 16] and *_scales
    [E, out, in / 32] (E8M0 bytes near 2^-5, random nibbles); else [E, in, out] floats."""
    d, I, E = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_local_experts"]
    H, KV, hd, V = (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
                    cfg["vocab_size"])
    s = 1.0 / np.sqrt(d)
    w = {"model.embed_tokens.weight": _normal(rng, (V, d), 1.0),
         "model.norm.weight": _norm_weight(rng, d), "lm_head.weight": _normal(rng, (V, d), s)}
    mx = "quantization_config" in cfg
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        w[p + "input_layernorm.weight"] = _norm_weight(rng, d)
        w[p + "post_attention_layernorm.weight"] = _norm_weight(rng, d)
        for n, rows in (("q", H * hd), ("k", KV * hd), ("v", KV * hd)):
            w[p + "self_attn.%s_proj.weight" % n] = _normal(rng, (rows, d), 2 * s)
            w[p + "self_attn.%s_proj.bias" % n] = _normal(rng, rows, 0.1)
        w[p + "self_attn.o_proj.weight"] = _normal(rng, (d, H * hd), s)
        w[p + "self_attn.o_proj.bias"] = _normal(rng, d, 0.1)
        w[p + "self_attn.sinks"] = _normal(rng, H, 1.0)
        w[p + "mlp.router.weight"] = _normal(rng, (E, d), 2 * s)
        w[p + "mlp.router.bias"] = _normal(rng, E, 0.5)
        x = p + "mlp.experts."
        w[x + "gate_up_proj_bias"] = _normal(rng, (E, 2 * I), 0.5)
        w[x + "down_proj_bias"] = _normal(rng, (E, d), 0.1)
        if mx:
            for n, rows, k in (("gate_up_proj", 2 * I, d), ("down_proj", d, I)):
                w[x + n + "_blocks"] = rng.integers(0, 256, (E, rows, k // 32, 16), dtype=np.uint8)
                w[x + n + "_scales"] = rng.integers(121, 125, (E, rows, k // 32), dtype=np.uint8)
        else:
            w[x + "gate_up_proj"] = _normal(rng, (E, d, 2 * I), 2 * s)
            w[x + "down_proj"] = _normal(rng, (E, I, d), 1.0 / np.sqrt(I))
    return w



def _qwen3_next_weights(cfg, rng):
    d, V = cfg["hidden_size"], cfg["vocab_size"]
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv, K = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], cfg["linear_conv_kernel_dim"]
    s = 1.0 / np.sqrt(d)
    zc = lambda n: _normal(rng, n, 0.1)  # noqa: E731  zero-centered norms, applied as 1 + w
    w = {"model.embed_tokens.weight": _normal(rng, (V, d), 1.0), "model.norm.weight": zc(d),
         "lm_head.weight": _normal(rng, (V, d), s)}
    for i, kind in enumerate(cfg["layer_types"]):
        p = "model.layers.%d." % i
        w[p + "input_layernorm.weight"] = zc(d)
        w[p + "post_attention_layernorm.weight"] = zc(d)
        if kind == "linear_attention":
            a = p + "linear_attn."
            if cfg["model_type"] == "qwen3_5_text":
                w[a + "in_proj_qkv.weight"] = _normal(rng, (2 * nk * dk + nv * dv, d), 2 * s)
                w[a + "in_proj_z.weight"] = _normal(rng, (nv * dv, d), 2 * s)
                w[a + "in_proj_b.weight"] = _normal(rng, (nv, d), 2 * s)
                w[a + "in_proj_a.weight"] = _normal(rng, (nv, d), 2 * s)
            else:
                w[a + "in_proj_qkvz.weight"] = _normal(rng, (2 * nk * dk + 2 * nv * dv, d), 2 * s)
                w[a + "in_proj_ba.weight"] = _normal(rng, (2 * nv, d), 2 * s)
            w[a + "conv1d.weight"] = _normal(rng, (2 * nk * dk + nv * dv, 1, K), 0.5)
            w[a + "dt_bias"] = (1.0 + _normal(rng, nv, 0.3)).astype(np.float32)
            w[a + "A_log"] = np.log(rng.uniform(1.0, 8.0, nv)).astype(np.float32)
            w[a + "norm.weight"] = _norm_weight(rng, dv)
            w[a + "out_proj.weight"] = _normal(rng, (d, nv * dv), 1.0 / np.sqrt(nv * dv))
        else:
            a = p + "self_attn."
            w[a + "q_proj.weight"] = _normal(rng, (2 * H * hd, d), 2 * s)
            w[a + "k_proj.weight"] = _normal(rng, (KV * hd, d), 2 * s)
            w[a + "v_proj.weight"] = _normal(rng, (KV * hd, d), s)
            w[a + "o_proj.weight"] = _normal(rng, (d, H * hd), 1.0 / np.sqrt(H * hd))
            w[a + "q_norm.weight"] = zc(hd)
            w[a + "k_norm.weight"] = zc(hd)
        if _moe_layer(cfg, i):
            _expert_weights(cfg, rng, w, p, d)
        else:
            I = cfg["intermediate_size"]
            w[p + "mlp.gate_proj.weight"] = _normal(rng, (I, d), s)
            w[p + "mlp.up_proj.weight"] = _normal(rng, (I, d), s)
            w[p + "mlp.down_proj.weight"] = _normal(rng, (d, I), 1.0 / np.sqrt(I))
    return w


def write_llama2c_vocab(path, pieces):
    """A llama2.c tokenizer.bin of the given pieces (bytes), scores 0: a tokenizer the tests put
    beside random checkpoints so that their outputs decode."""
    with open(path, "wb") as f:
        f.write(struct.pack("<i", max(len(p) for p in pieces)))
        for p in pieces:
            f.write(struct.pack("<fi", 0.0, len(p)))
            f.write(p)


def _nomic_weights(cfg, rng):
    d, V, L, ff = cfg["n_embd"], cfg["vocab_size"], cfg["n_layer"], cfg["n_inner"]
    w = {"embeddings.word_embeddings.weight": _normal(rng, (V, d), 1.0),
         "embeddings.token_type_embeddings.weight": _normal(rng, (cfg["type_vocab_size"], d), 0.5),
         "emb_ln.weight": _norm_weight(rng, d), "emb_ln.bias": _normal(rng, d, 0.1)}
    for i in range(L):
        p = "encoder.layers.%d." % i
        w[p + "attn.Wqkv.weight"] = _normal(rng, (3 * d, d), 0.25)
        w[p + "attn.out_proj.weight"] = _normal(rng, (d, d), 0.2)
        w[p + "norm1.weight"] = _norm_weight(rng, d)
        w[p + "norm1.bias"] = _normal(rng, d, 0.1)
        w[p + "mlp.fc11.weight"] = _normal(rng, (ff, d), 0.3)
        w[p + "mlp.fc12.weight"] = _normal(rng, (ff, d), 0.3)
        w[p + "mlp.fc2.weight"] = _normal(rng, (d, ff), 0.2)
        w[p + "norm2.weight"] = _norm_weight(rng, d)
        w[p + "norm2.bias"] = _normal(rng, d, 0.1)
    return w


def _jina_weights(cfg, rng):
    d, V, L, ff = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"], \
        cfg["intermediate_size"]
    w = {"embeddings.word_embeddings.weight": _normal(rng, (V, d), 1.0),
         "embeddings.token_type_embeddings.weight": _normal(rng, (cfg["type_vocab_size"], d), 0.5),
         "embeddings.LayerNorm.weight": _norm_weight(rng, d),
         "embeddings.LayerNorm.bias": _normal(rng, d, 0.1)}
    for i in range(L):
        p = "encoder.layer.%d." % i
        for m in ("query", "key", "value"):
            w[p + "attention.self.%s.weight" % m] = _normal(rng, (d, d), 0.25)
            w[p + "attention.self.%s.bias" % m] = _normal(rng, d, 0.1)
        w[p + "attention.output.dense.weight"] = _normal(rng, (d, d), 0.2)
        w[p + "attention.output.dense.bias"] = _normal(rng, d, 0.1)
        w[p + "attention.output.LayerNorm.weight"] = _norm_weight(rng, d)
        w[p + "attention.output.LayerNorm.bias"] = _normal(rng, d, 0.1)
        w[p + "mlp.gated_layers.weight"] = _normal(rng, (2 * ff, d), 0.3)
        w[p + "mlp.wo.weight"] = _normal(rng, (d, ff), 0.2)
        w[p + "mlp.wo.bias"] = _normal(rng, d, 0.1)
        w[p + "mlp.layernorm.weight"] = _norm_weight(rng, d)
        w[p + "mlp.layernorm.bias"] = _normal(rng, d, 0.1)
    return w


def write_checkpoint(out_dir, kind, dtype="F32", sharded=False, seed=0, legacy_gpt2_names=False):
    if kind not in KINDS:
        raise ValueError("unknown kind %r (one of %s)" % (kind, ", ".join(KINDS)))
    if dtype not in TORCH_DTYPE:
        raise ValueError("dtype must be one of %s" % ", ".join(TORCH_DTYPE))
    if legacy_gpt2_names and kind != "gpt2":
        raise ValueError("legacy_gpt2_names only applies to gpt2")
    os.makedirs(out_dir, exist_ok=True)
    cfg = KINDS[kind](dtype)
    rng = np.random.default_rng(seed)
    if kind == "gpt2":
        w = _gpt2_weights(cfg, rng, legacy_gpt2_names)
    elif cfg["model_type"].startswith("gemma"):
        w = _gemma_weights(cfg, rng)
    elif cfg["model_type"] == "mamba":
        w = _mamba_weights(cfg, rng)
    elif cfg["model_type"] == "t5":
        w = _t5_weights(cfg, rng)
    elif cfg["model_type"] in ("gptj", "codegen", "gpt_neox"):
        w = _gptj_weights(cfg, rng)
    elif cfg["model_type"] == "gpt_oss":
        w = _gpt_oss_weights(cfg, rng)
    elif cfg["model_type"] in ("qwen3_next", "qwen3_5_text"):
        w = _qwen3_next_weights(cfg, rng)
    elif cfg.get("position_embedding_type") == "alibi":
        w = _jina_weights(cfg, rng)
    elif cfg["model_type"] in ("bert", "xlm-roberta"):
        w = _bert_weights(cfg, rng)
    elif cfg["model_type"] == "nomic_bert":
        w = _nomic_weights(cfg, rng)
    else:
        w = _llama_weights(cfg, rng)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    if any(np.asarray(a).dtype == np.uint8 for a in w.values()):  # packed blocks stay bytes
        dtype = {n: "U8" if np.asarray(a).dtype == np.uint8 else dtype for n, a in w.items()}
    if sharded:
        safetensors_io.save_sharded(out_dir, w, N_SHARDS, dtype)
    else:
        safetensors_io.save(os.path.join(out_dir, "model.safetensors"), w, dtype)
    return out_dir


def write_qwen3_5_wrapper(text_dir, out_dir, rng_seed=3):
    """A Qwen3.5 text checkpoint (kind qwen3_5, F32) rewritten as the multimodal release
    (Qwen3_5ForConditionalGeneration, as transformers' modeling_qwen3_5.py lays it out): the text
    model's settings in text_config (tie_word_embeddings kept at the top), its tensors under
    model.language_model., a vision tower (model.visual.*) and an MTP head (mtp.*) beside it."""
    with open(os.path.join(text_dir, "config.json")) as f:
        text = json.load(f)
    tie = text.pop("tie_word_embeddings", False)
    cfg = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
           "text_config": text, "tie_word_embeddings": tie,
           "vision_config": {"depth": 1, "hidden_size": 8, "model_type": "qwen3_5"},
           "image_token_id": 5, "video_token_id": 6}
    w = {}
    for name, a in safetensors_io.load_dir(text_dir).items():
        w["model.language_model." + name[6:] if name.startswith("model.") else name] = a
    rng = np.random.default_rng(rng_seed)
    w["model.visual.patch_embed.proj.weight"] = rng.standard_normal((8, 12)).astype(np.float32)
    w["mtp.fc.weight"] = rng.standard_normal((4, 8)).astype(np.float32)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    safetensors_io.save(os.path.join(out_dir, "model.safetensors"), w, "F32")
    return out_dir


def convert_llama2c(bin_path, out_dir, dtype="F32"):
    """Write a llama2.c .bin checkpoint as a Hugging Face LlamaForCausalLM
    directory. llama2.c rotates adjacent pairs (2j, 2j+1) of each head; HF
    rotates (j, j + head_dim/2). Reordering the rows of wq and wk within each
    head (even rows first, then odd rows) maps one onto the other, so the
    two models compute the same logits."""
    import np_model  # here only: the converter reuses the .bin reader
    hdr, w = np_model.read_llama2c(bin_path)
    dim, n_heads, n_kv = hdr["dim"], hdr["n_heads"], hdr["n_kv_heads"]
    hd = dim // n_heads

    def permute(m, heads):
        order = np.concatenate([h * hd + np.r_[0:hd:2, 1:hd:2] for h in range(heads)])
        return m[order]

    t = {"model.embed_tokens.weight": w["token_embedding_table"]}
    for i in range(hdr["n_layers"]):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = w["rms_att_weight"][i]
        t[p + "self_attn.q_proj.weight"] = permute(w["wq"][i], n_heads)
        t[p + "self_attn.k_proj.weight"] = permute(w["wk"][i], n_kv)
        t[p + "self_attn.v_proj.weight"] = w["wv"][i]
        t[p + "self_attn.o_proj.weight"] = w["wo"][i]
        t[p + "post_attention_layernorm.weight"] = w["rms_ffn_weight"][i]
        t[p + "mlp.gate_proj.weight"] = w["w1"][i]
        t[p + "mlp.down_proj.weight"] = w["w2"][i]
        t[p + "mlp.up_proj.weight"] = w["w3"][i]
    t["model.norm.weight"] = w["rms_final_weight"]
    if not hdr["shared_classifier"]:
        t["lm_head.weight"] = w["wcls"]
    cfg = _llama_config(dtype, n_kv=n_kv, tie=hdr["shared_classifier"], theta=10000.0)
    cfg.update(hidden_size=dim, intermediate_size=hdr["hidden_dim"],
               num_hidden_layers=hdr["n_layers"], num_attention_heads=n_heads,
               max_position_embeddings=hdr["seq_len"], vocab_size=hdr["vocab_size"])
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    safetensors_io.save(os.path.join(out_dir, "model.safetensors"), t, dtype)
    return out_dir


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("kind", choices=sorted(KINDS))
    ap.add_argument("--dtype", default="F32", choices=sorted(TORCH_DTYPE))
    ap.add_argument("--sharded", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--legacy-gpt2-names", action="store_true")
    a = ap.parse_args(argv)
    write_checkpoint(a.out_dir, a.kind, a.dtype, a.sharded, a.seed, a.legacy_gpt2_names)
    print(a.out_dir)


if __name__ == "__main__":
    main()
