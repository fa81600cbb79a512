#include "model/model_config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"

namespace tf {

const char* arch_name(Arch arch) {
  return arch == Arch::kGpt2 ? "gpt2" : "llama";
}

void ModelConfig::validate(const std::string& source) const {
  auto positive = [&](int64_t v, const char* name, int64_t max) {
    if (v <= 0 || v > max) fail("{}: {} = {} is out of range (1..{})", source, name, v, max);
  };
  positive(vocab_size, "vocab_size", 1 << 24);
  positive(dim, "hidden size", 1 << 20);
  positive(n_layers, "number of layers", 4096);
  positive(n_heads, "number of attention heads", 4096);
  positive(n_kv_heads, "number of key/value heads", 4096);
  positive(head_dim, "head_dim", 4096);
  positive(ffn_dim, "intermediate size", 1 << 22);
  positive(max_seq_len, "context length", 1 << 24);
  if (n_heads % n_kv_heads != 0) {
    fail("{}: number of attention heads ({}) is not a multiple of key/value heads ({})", source,
         n_heads, n_kv_heads);
  }
  if (head_dim % 2 != 0 && arch == Arch::kLlama) {
    fail("{}: head_dim {} must be even for rotary embeddings", source, head_dim);
  }
  if (arch == Arch::kGpt2 && n_heads * head_dim != dim) {
    fail("{}: n_embd {} is not divisible by n_head {}", source, dim, n_heads);
  }
  if (!(norm_eps > 0.0f && norm_eps < 1.0f))
    fail("{}: norm epsilon {} is out of range", source, norm_eps);
  if (arch == Arch::kLlama && !(rope_theta > 1.0 && rope_theta < 1e12)) {
    fail("{}: rope_theta {} is out of range", source, rope_theta);
  }
  if (bos_id >= vocab_size)
    fail("{}: bos_token_id {} >= vocab_size {}", source, bos_id, vocab_size);
  if (eos_id >= vocab_size)
    fail("{}: eos_token_id {} >= vocab_size {}", source, eos_id, vocab_size);
}

namespace {

using nlohmann::json;

int64_t get_int(const json& j, const char* key, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end()) fail("{}: missing required field '{}'", source, key);
  if (!it->is_number_integer()) fail("{}: field '{}' must be an integer", source, key);
  return it->get<int64_t>();
}

int64_t get_int_or(const json& j, const char* key, int64_t fallback, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) fail("{}: field '{}' must be an integer", source, key);
  return it->get<int64_t>();
}

double get_num_or(const json& j, const char* key, double fallback, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) fail("{}: field '{}' must be a number", source, key);
  return it->get<double>();
}

bool get_bool_or(const json& j, const char* key, bool fallback, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail("{}: field '{}' must be true or false", source, key);
  return it->get<bool>();
}

// bos/eos ids may be an int or a list of ints (Llama 3 lists several EOS ids); we keep the first.
int32_t get_token_id(const json& j, const char* key, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return -1;
  const json& v = it->is_array() && !it->empty() ? (*it)[0] : *it;
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
    fail("{}: field '{}' must be a non-negative token id", source, key);
  }
  return static_cast<int32_t>(v.get<int64_t>());
}

std::string get_string_or(const json& j, const char* key, const std::string& fallback,
                          const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) fail("{}: field '{}' must be a string", source, key);
  return it->get<std::string>();
}

ModelConfig parse_gpt2(const json& j, const std::string& source) {
  ModelConfig c;
  c.arch = Arch::kGpt2;
  c.vocab_size = get_int(j, "vocab_size", source);
  c.dim = get_int(j, "n_embd", source);
  c.n_layers = get_int(j, "n_layer", source);
  c.n_heads = get_int(j, "n_head", source);
  c.n_kv_heads = c.n_heads;
  c.head_dim = c.n_heads > 0 ? c.dim / c.n_heads : 0;
  c.ffn_dim = get_int_or(j, "n_inner", 4 * c.dim, source);
  c.max_seq_len = get_int_or(j, "n_positions", get_int_or(j, "n_ctx", 1024, source), source);
  c.norm_eps = static_cast<float>(get_num_or(j, "layer_norm_epsilon", 1e-5, source));
  c.tied_embeddings = true;
  c.qkv_bias = true;
  const std::string act = get_string_or(j, "activation_function", "gelu_new", source);
  if (act != "gelu_new" && act != "gelu_pytorch_tanh") {
    fail(ErrorKind::kUnsupported, "{}: activation_function '{}' is not supported (gelu_new is)",
         source, act);
  }
  return c;
}

ModelConfig parse_llama(const json& j, const std::string& source, bool qwen2) {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.vocab_size = get_int(j, "vocab_size", source);
  c.dim = get_int(j, "hidden_size", source);
  c.n_layers = get_int(j, "num_hidden_layers", source);
  c.n_heads = get_int(j, "num_attention_heads", source);
  c.n_kv_heads = get_int_or(j, "num_key_value_heads", c.n_heads, source);
  c.head_dim = get_int_or(j, "head_dim", c.n_heads > 0 ? c.dim / c.n_heads : 0, source);
  c.ffn_dim = get_int(j, "intermediate_size", source);
  c.max_seq_len = get_int_or(j, "max_position_embeddings", 2048, source);
  c.norm_eps = static_cast<float>(get_num_or(j, "rms_norm_eps", 1e-6, source));
  c.rope_theta = get_num_or(j, "rope_theta", 10000.0, source);
  c.rope_style = kernels::RopeStyle::kHalf;
  c.tied_embeddings = get_bool_or(j, "tie_word_embeddings", false, source);
  c.qkv_bias = qwen2 || get_bool_or(j, "attention_bias", false, source);
  const std::string act = get_string_or(j, "hidden_act", "silu", source);
  if (act != "silu") {
    fail(ErrorKind::kUnsupported, "{}: hidden_act '{}' is not supported (silu is)", source, act);
  }
  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) {
    fail(ErrorKind::kUnsupported, "{}: rope_scaling is not supported yet", source);
  }
  return c;
}

}  // namespace

ModelConfig parse_hf_config(const std::string& json_text, const std::string& source) {
  json j = parse_json(json_text, source);
  if (j.is_discarded()) fail("{}: not valid JSON", source);
  if (!j.is_object()) fail("{}: expected a JSON object", source);

  std::string architecture;
  if (auto it = j.find("architectures");
      it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    architecture = (*it)[0].get<std::string>();
  }
  const std::string model_type = get_string_or(j, "model_type", "", source);

  ModelConfig c;
  if (architecture == "GPT2LMHeadModel" || (architecture.empty() && model_type == "gpt2")) {
    c = parse_gpt2(j, source);
    if (architecture.empty()) architecture = "GPT2LMHeadModel";
  } else if (architecture == "LlamaForCausalLM" || architecture == "MistralForCausalLM" ||
             (architecture.empty() && (model_type == "llama" || model_type == "mistral"))) {
    c = parse_llama(j, source, false);
    if (architecture.empty()) architecture = "LlamaForCausalLM";
  } else if (architecture == "Qwen2ForCausalLM" ||
             (architecture.empty() && model_type == "qwen2")) {
    c = parse_llama(j, source, true);
    if (architecture.empty()) architecture = "Qwen2ForCausalLM";
  } else {
    fail(ErrorKind::kUnsupported,
         "{}: unknown architecture '{}' (model_type '{}'); supported: GPT2LMHeadModel, "
         "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM",
         source, architecture, model_type);
  }
  c.architecture = architecture;
  c.format = "safetensors";
  c.bos_id = get_token_id(j, "bos_token_id", source);
  c.eos_id = get_token_id(j, "eos_token_id", source);
  if (auto it = j.find("sliding_window"); it != j.end() && it->is_number_integer() &&
                                          get_bool_or(j, "use_sliding_window", true, source) &&
                                          it->get<int64_t>() < c.max_seq_len) {
    // Mistral v0.1 attends within a window; limiting the context keeps our full attention exact.
    c.max_seq_len = it->get<int64_t>();
  }
  c.validate(source);
  return c;
}

}  // namespace tf
