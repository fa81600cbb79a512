#pragma once
// The hyperparameters of a loaded model, in one shape for every architecture and format.

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/rope.h"

namespace tf {

enum class Arch { kGpt2, kLlama, kMamba, kT5, kBert, kGptJ };

const char* arch_name(Arch arch);

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string architecture;  // as the source names it: "LlamaForCausalLM", "GPT2LMHeadModel", ...
  // A multimodal wrapper's text model (Qwen3_5ForConditionalGeneration): its tensors' prefix
  // ("model.language_model."), read as "model."; the wrapper's other parts (the vision tower)
  // are not loaded. Empty: the names are the text model's.
  std::string text_model_prefix;
  std::string format;  // "safetensors" or "llama2c"

  int64_t vocab_size = 0;
  int64_t dim = 0;  // hidden size
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn_dim = 0;      // intermediate size
  int64_t max_seq_len = 0;  // context length

  float norm_eps = 1e-5f;
  RopeParams rope;  // theta, scaling, partial rotary
  kernels::RopeStyle rope_style = kernels::RopeStyle::kHalf;
  bool tied_embeddings = false;
  bool qkv_bias = false;
  bool o_bias = false;        // attention output bias (Llama-style attention_bias: true)
  bool fused_qkv = false;     // one qkv_proj [q; k; v] and one gate_up_proj [gate; up] (Phi-3)
  bool qk_norm = false;       // RMSNorm over each head of q and k before RoPE (Qwen3, Gemma 3)
  bool qk_norm_full = false;  // with qk_norm: over the whole q and k projections (OLMoE)

  // Gemma's variations on the Llama block.
  enum class Act { kSilu, kGeluTanh, kGeluErf } act = Act::kSilu;  // of the (gated) MLP
  bool norm_plus_one = false;  // RMSNorm weights stored as w, applied as (1 + w)
  bool post_norms = false;     // norms after attention and MLP too (Gemma 2/3)
  float embed_scale = 0.0f;    // > 0: embeddings multiplied by it (sqrt(hidden))
  float attn_scale = 0.0f;     // > 0: instead of 1/sqrt(head_dim) (query_pre_attn_scalar^-0.5)
  float attn_softcap = 0.0f;   // > 0: attention scores soft-capped (Gemma 2)
  float final_softcap = 0.0f;  // > 0: logits soft-capped (Gemma 2)
  // Sliding-window attention: the window and which layers use it (empty: none or all, as
  // sliding_window says); sliding layers may have their own RoPE (Gemma 3's local base).
  int64_t sliding_window = 0;
  std::vector<uint8_t> layer_sliding;
  bool has_local_rope = false;
  RopeParams local_rope;
  // Mixture of experts: n_experts MLPs of expert_ffn_dim, n_experts_used per token chosen by a
  // router (softmax, top-k, renormalized when norm_topk_prob); a shared expert of
  // shared_ffn_dim beside them (Qwen2-MoE: scaled by sigmoid of its own gate). Layers with
  // layer_moe[l] == 0 are dense (ffn_dim).
  enum class MoeNames { kQwen, kMixtral, kGptOss } moe_names = MoeNames::kQwen;
  int64_t n_experts = 0, n_experts_used = 0, expert_ffn_dim = 0, shared_ffn_dim = 0;
  bool norm_topk_prob = false;
  bool shared_expert_gate = false;
  std::vector<uint8_t> layer_moe;
  // gpt-oss: the router and every expert's projections have biases, and the experts' activation
  // is a clamped SwiGLU: gate clamped above at swiglu_limit, up to [-limit, limit], out =
  // (up + 1) * gate * sigmoid(swiglu_alpha * gate). Its routing (softmax over the top-k logits)
  // is norm_topk_prob's.
  bool moe_bias = false;
  bool clamped_swiglu = false;
  float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;
  // gpt-oss's attention sinks: a learned logit per head that each query's softmax also
  // normalizes over (its weight goes to no value).
  bool attn_sinks = false;
  bool is_moe(int64_t layer) const {
    return n_experts > 0 && (layer_moe.empty() || layer_moe[static_cast<size_t>(layer)] != 0);
  }
  bool is_sliding(int64_t layer) const {
    if (sliding_window <= 0) return false;
    return layer_sliding.empty() || layer_sliding[static_cast<size_t>(layer)] != 0;
  }
  // The sliding window when every layer has it (keys before it are never read again, so their
  // KV blocks can go), else 0.
  int64_t window_of_every_layer() const {
    for (int64_t l = 0; l < n_layers; ++l)
      if (!is_sliding(l)) return 0;
    return sliding_window;
  }

  // GPT-J, CodeGen and GPT-NeoX / Pythia (arch kGptJ): LayerNorm blocks with biases whose
  // attention and MLP both read the block's input (parallel_residual: x + attn(ln1 x) +
  // mlp(ln2 x), ln2 = ln1 when !two_norms as in GPT-J and CodeGen) or follow each other (GPT-NeoX
  // with use_parallel_residual false); rotary positions on the first rope.rot_dim dimensions of
  // each head, in pairs (2i, 2i+1) (GPT-J, CodeGen: rope_style kInterleaved) or (i, i + rot/2)
  // (NeoX: kHalf); a plain MLP (act: GELU tanh or exact); an untied LM head, with a bias in GPT-J
  // and CodeGen. qkv_layout says how the attention's projections are stored.
  enum class QkvLayout {
    kSeparate,  // q_proj, k_proj, v_proj (GPT-J)
    kStacked,   // one [q; k; v] matrix (llama.cpp's gptneox attn_qkv)
    kPerHead,   // one matrix, each head's [q_h; k_h; v_h] in turn (GPT-NeoX's query_key_value)
    kCodeGen,   // one matrix in qkv_shards shards of [q_s; v_s; k_s] (CodeGen's qkv_proj, mp_num)
  } qkv_layout = QkvLayout::kSeparate;
  int64_t qkv_shards = 1;
  bool parallel_residual = true;
  bool two_norms = false;
  bool lm_head_bias = false;
  enum class GptJNames { kGptJ, kNeoX } gptj_names = GptJNames::kGptJ;

  // Mamba (selective state spaces, arch kMamba): per layer a mixer of ssm_inner channels
  // (expand x hidden) with a causal depthwise convolution of ssm_conv_kernel taps and a state of
  // ssm_state per channel, its step size from a rank-ssm_dt_rank projection. No attention: a
  // sequence's context is its recurrent state (CacheKind::kRecurrent), whatever its length.
  int64_t ssm_inner = 0, ssm_state = 0, ssm_conv_kernel = 0, ssm_dt_rank = 0;
  bool ssm_conv_bias = true;   // use_conv_bias
  bool ssm_proj_bias = false;  // use_bias: in_proj and out_proj biases
  // Floats of one layer's recurrent state: the convolution's last ssm_conv_kernel - 1 inputs and
  // the SSM state, per channel.
  // Qwen3-Next's and Qwen3.5's Gated DeltaNet layers (with kLlama): the convolution's last inputs
  // over its channels and each value head's [lin_k_dim, lin_v_dim] state.
  int64_t ssm_state_floats() const {
    if (lin_v_heads > 0)
      return (ssm_conv_kernel - 1) * lin_conv_channels() + lin_v_heads * lin_k_dim * lin_v_dim;
    return (ssm_conv_kernel - 1) * ssm_inner + ssm_inner * ssm_state;
  }

  // Hybrid linear attention (Qwen3-Next, Qwen3.5; arch kLlama): layers with layer_linear[l] are
  // Gated DeltaNet layers (Yang et al. 2024): lin_k_heads key heads of lin_k_dim, each shared by
  // lin_v_heads / lin_k_heads value heads of lin_v_dim, a causal depthwise convolution of
  // ssm_conv_kernel taps over [q; k; v], the gated delta rule over a state per value head. Their
  // context is that state (CacheKind::kRecurrent groups beside the attention layers' paged ones).
  // split_linear_proj: Qwen3.5's in_proj_qkv / in_proj_z / in_proj_b / in_proj_a instead of
  // Qwen3-Next's in_proj_qkvz / in_proj_ba grouped per key head. gated_attention: the attention
  // layers' q_proj writes [q_h; gate_h] per head, the output times sigmoid(gate) before o_proj.
  std::vector<uint8_t> layer_linear;
  int64_t lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0;
  bool split_linear_proj = false;
  bool gated_attention = false;
  bool is_linear(int64_t layer) const {
    return !layer_linear.empty() && layer_linear[static_cast<size_t>(layer)] != 0;
  }
  bool hybrid() const {
    for (uint8_t v : layer_linear)
      if (v != 0) return true;
    return false;
  }
  int64_t lin_conv_channels() const {
    return 2 * lin_k_heads * lin_k_dim + lin_v_heads * lin_v_dim;
  }

  // T5 (arch kT5, an encoder-decoder): n_layers decoder blocks (self-attention, cross-attention
  // over the encoder's output, MLP) and n_encoder_layers encoder blocks; attention without
  // score scaling and with a learned bias per head over relative-position buckets (bidirectional
  // in the encoder, causal in the decoder), from each stack's first block; a gated-GELU MLP
  // (v1.1, flan-t5, mT5) or ReLU (v1.0). The decoder starts from decoder_start_id.
  int64_t n_encoder_layers = 0;
  int64_t rel_buckets = 32, rel_max_distance = 128;
  bool gated_ffn = false;
  int32_t decoder_start_id = 0;
  bool encoder_decoder() const { return arch == Arch::kT5; }
  // The caches the layout assigns (CacheLayout): one per decoder layer, and a cross-attention
  // one per decoder layer of an encoder-decoder (numbered n_layers + l).
  int64_t cache_layers() const { return encoder_decoder() ? 2 * n_layers : n_layers; }

  // BERT-family encoders (arch kBert: BERT, RoBERTa, XLM-RoBERTa): post-LN blocks with biases,
  // bidirectional attention, learned absolute positions (RoBERTa's counted from
  // position_offset = pad_token_id + 1), token type embeddings (type_vocab_size; RoBERTa's one),
  // exact (erf) GELU. No LM head: the output is the hidden states, pooled, or a sequence
  // classifier's scores over num_labels (labels: id2label, in order).
  int64_t type_vocab_size = 0;
  int64_t position_offset = 0;
  enum class Classifier { kNone, kBertPooler, kRobertaHead } classifier = Classifier::kNone;
  int64_t num_labels = 0;
  std::vector<std::string> labels;
  bool encoder_only() const { return arch == Arch::kBert; }
  // NomicBERT (encoder_kind kNomic: nomic-embed-text, nomic-bert-2048; Nussbaum et al. 2024):
  // the post-LN BERT block with rotary positions (rope, rope_style; no learned position table),
  // one fused Wqkv, a SwiGLU MLP (fc11 the value, fc12 the gate) or an erf-GELU one, biases
  // where the files have them. rope.kind kDynamic: NTK-aware scaling of the base by the input's
  // own length beyond rope.original_max_pos (max_trained_positions), as nomic's model does.
  // JinaBERT v2 (encoder_kind kJina: jina-embeddings-v2; Günther et al. 2023): BERT's block
  // without a position table, symmetric ALiBi instead (each head's scores less slope_h |i - j|,
  // the ALiBi paper's slopes), and a GEGLU MLP (gelu(gate) * up, gate the first half of
  // gated_layers) with its own LayerNorm after the residual.
  enum class EncoderKind { kBert, kNomic, kJina } encoder_kind = EncoderKind::kBert;
  // How the model's files say its embeddings are pooled ("cls", "mean", "max", "last": from
  // sentence-transformers' config or GGUF's pooling_type, read at load; empty: not said) and
  // whether they are normalized.
  std::string embedding_pooling;
  bool embedding_normalize = false;
  // Matryoshka embeddings (config.json's matryoshka_dimensions, or is_matryoshka): a prefix of
  // the embedding is an embedding too; the listed sizes (empty with matryoshka: any).
  std::vector<int64_t> matryoshka_dims;
  bool matryoshka = false;

  int32_t bos_id = -1;  // -1: none
  int32_t eos_id = -1;

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }

  // Throws an Error naming `source` and the field when a value is out of range.
  void validate(const std::string& source) const;
};

// Parses a Hugging Face config.json text. `source` names the file in errors.
ModelConfig parse_hf_config(const std::string& json_text, const std::string& source);

}  // namespace tf
