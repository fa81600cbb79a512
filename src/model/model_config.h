#pragma once
// The hyperparameters of a loaded model, in one shape for every architecture and format.

#include <cstdint>
#include <string>

#include "kernels/ops.h"
#include "model/rope.h"

namespace tf {

enum class Arch { kGpt2, kLlama };

const char* arch_name(Arch arch);

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string architecture;  // as the source names it: "LlamaForCausalLM", "GPT2LMHeadModel", ...
  std::string format;        // "safetensors" or "llama2c"

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
  bool o_bias = false;   // attention output bias (Llama-style attention_bias: true)
  bool qk_norm = false;  // RMSNorm over each head of q and k before RoPE (Qwen3)

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
