#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"

namespace tf {

const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::kGpt2:
      return "gpt2";
    case Arch::kLlama:
      return "llama";
    case Arch::kMamba:
      return "mamba";
    case Arch::kT5:
      return "t5";
    case Arch::kBert:
      return "bert";
    case Arch::kGptJ:
      return "gptj";
  }
  return "unknown";
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
  if (arch == Arch::kMamba) {
    positive(ssm_inner, "intermediate size", 1 << 22);
    positive(ssm_state, "state_size", 1024);
    positive(ssm_conv_kernel, "conv_kernel", 64);
    positive(ssm_dt_rank, "time_step_rank", 1 << 16);
  }
  if (!layer_linear.empty()) {
    if (static_cast<int64_t>(layer_linear.size()) != n_layers)
      fail("{}: {} layer types for {} layers", source, layer_linear.size(), n_layers);
    positive(lin_k_heads, "linear_num_key_heads", 4096);
    positive(lin_v_heads, "linear_num_value_heads", 4096);
    positive(lin_k_dim, "linear_key_head_dim", 4096);
    positive(lin_v_dim, "linear_value_head_dim", 4096);
    positive(ssm_conv_kernel, "linear_conv_kernel_dim", 64);
    if (lin_v_heads % lin_k_heads != 0)
      fail("{}: linear_num_value_heads ({}) is not a multiple of linear_num_key_heads ({})", source,
           lin_v_heads, lin_k_heads);
    if (ssm_state_floats() > (int64_t{1} << 28))
      fail("{}: a Gated DeltaNet state of {} floats per layer is out of range", source,
           ssm_state_floats());
  }
  if (arch == Arch::kT5) {
    positive(n_encoder_layers, "num_layers (encoder)", 4096);
    positive(rel_buckets, "relative_attention_num_buckets", 4096);
    positive(rel_max_distance, "relative_attention_max_distance", 1 << 20);
    if (rel_buckets < 4)
      fail("{}: relative_attention_num_buckets {} is below 4", source, rel_buckets);
    if (decoder_start_id < 0 || decoder_start_id >= vocab_size)
      fail("{}: decoder_start_token_id {} is outside the vocabulary", source, decoder_start_id);
  }
  if (head_dim % 2 != 0 && arch == Arch::kLlama) {
    fail("{}: head_dim {} must be even for rotary embeddings", source, head_dim);
  }
  if (arch == Arch::kGpt2 && n_heads * head_dim != dim) {
    fail("{}: n_embd {} is not divisible by n_head {}", source, dim, n_heads);
  }
  if (!(norm_eps > 0.0f && norm_eps < 1.0f))
    fail("{}: norm epsilon {} is out of range", source, norm_eps);
  if (arch == Arch::kLlama || arch == Arch::kGptJ ||
      (arch == Arch::kBert && encoder_kind == EncoderKind::kNomic))
    validate_rope(rope, head_dim, source);
  if (arch == Arch::kGptJ) {
    if (n_heads * head_dim != dim)
      fail("{}: hidden size {} is not divisible by the {} attention heads", source, dim, n_heads);
    if (qkv_layout == QkvLayout::kCodeGen && (qkv_shards <= 0 || n_heads % qkv_shards != 0))
      fail("{}: CodeGen's {} attention heads do not split into {} qkv shards", source, n_heads,
           qkv_shards);
  }
  if (has_local_rope) validate_rope(local_rope, head_dim, source);
  if (sliding_window < 0 || sliding_window > (int64_t{1} << 24))
    fail("{}: sliding_window {} is out of range", source, sliding_window);
  if (!layer_sliding.empty() && static_cast<int64_t>(layer_sliding.size()) != n_layers)
    fail("{}: {} layer types for {} layers", source, layer_sliding.size(), n_layers);
  if (n_experts != 0) {
    positive(n_experts, "number of experts", 1 << 16);
    positive(n_experts_used, "experts per token", n_experts);
    positive(expert_ffn_dim, "expert intermediate size", 1 << 22);
    if (shared_ffn_dim < 0 || shared_ffn_dim > (1 << 22))
      fail("{}: shared expert intermediate size {} is out of range", source, shared_ffn_dim);
    if (!layer_moe.empty() && static_cast<int64_t>(layer_moe.size()) != n_layers)
      fail("{}: {} MoE layer flags for {} layers", source, layer_moe.size(), n_layers);
  }
  if (!(attn_softcap >= 0.0f && attn_softcap < 1e6f) ||
      !(final_softcap >= 0.0f && final_softcap < 1e6f) ||
      !(attn_scale >= 0.0f && attn_scale < 1e3f))
    fail("{}: attention scale or soft-capping out of range", source);
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

// The sizes under GPT-2's field names (GPT-2, GPT-J, CodeGen): n_embd, n_layer, n_head (no
// grouped KV heads), n_inner (4 n_embd when null), n_positions or n_ctx, layer_norm_epsilon.
ModelConfig gpt2_sizes(const json& j, const std::string& source, Arch arch, int64_t context) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = get_int(j, "vocab_size", source);
  c.dim = get_int(j, "n_embd", source);
  c.n_layers = get_int(j, "n_layer", source);
  c.n_heads = get_int(j, "n_head", source);
  c.n_kv_heads = c.n_heads;
  c.head_dim = c.n_heads > 0 ? c.dim / c.n_heads : 0;
  c.ffn_dim = get_int_or(j, "n_inner", 4 * c.dim, source);
  c.max_seq_len = get_int_or(j, "n_positions", get_int_or(j, "n_ctx", context, source), source);
  c.norm_eps = static_cast<float>(get_num_or(j, "layer_norm_epsilon", 1e-5, source));
  return c;
}

ModelConfig parse_gpt2(const json& j, const std::string& source) {
  ModelConfig c = gpt2_sizes(j, source, Arch::kGpt2, 1024);
  c.tied_embeddings = true;
  c.qkv_bias = true;
  const std::string act = get_string_or(j, "activation_function", "gelu_new", source);
  if (act != "gelu_new" && act != "gelu_pytorch_tanh") {
    fail(ErrorKind::kUnsupported, "{}: activation_function '{}' is not supported (gelu_new is)",
         source, act);
  }
  return c;
}

// Hugging Face's MambaConfig: no attention; the mixer's sizes, and a context limited by nothing
// but the position type (a recurrent state does not grow).
ModelConfig parse_mamba(const json& j, const std::string& source) {
  ModelConfig c;
  c.arch = Arch::kMamba;
  c.vocab_size = get_int(j, "vocab_size", source);
  c.dim = get_int(j, "hidden_size", source);
  c.n_layers = get_int(j, "num_hidden_layers", source);
  c.n_heads = c.n_kv_heads = c.head_dim = 1;  // no attention
  c.ssm_state = get_int_or(j, "state_size", 16, source);
  c.ssm_conv_kernel = get_int_or(j, "conv_kernel", 4, source);
  const double expand = get_num_or(j, "expand", 2.0, source);
  if (!(expand > 0 && expand <= 64)) fail("{}: expand {} is out of range", source, expand);
  c.ssm_inner = get_int_or(j, "intermediate_size",
                           static_cast<int64_t>(expand * static_cast<double>(c.dim)), source);
  c.ffn_dim = c.ssm_inner;
  if (auto it = j.find("time_step_rank"); it != j.end() && it->is_string()) {
    if (it->get<std::string>() != "auto")
      fail("{}: time_step_rank must be a number or \"auto\"", source);
    c.ssm_dt_rank = (c.dim + 15) / 16;
  } else {
    c.ssm_dt_rank = get_int_or(j, "time_step_rank", (c.dim + 15) / 16, source);
  }
  c.ssm_conv_bias = get_bool_or(j, "use_conv_bias", true, source);
  c.ssm_proj_bias = get_bool_or(j, "use_bias", false, source);
  c.norm_eps = static_cast<float>(get_num_or(j, "layer_norm_epsilon", 1e-5, source));
  c.tied_embeddings = get_bool_or(j, "tie_word_embeddings", true, source);
  c.max_seq_len = int64_t{1} << 20;
  const std::string act = get_string_or(j, "hidden_act", "silu", source);
  if (act != "silu")
    fail(ErrorKind::kUnsupported, "{}: hidden_act '{}' is not supported (silu is)", source, act);
  return c;
}

// Hugging Face's BertConfig / RobertaConfig / XLMRobertaConfig: hidden_size, num_hidden_layers,
// num_attention_heads, intermediate_size, max_position_embeddings, type_vocab_size,
// layer_norm_eps, hidden_act gelu; a ForSequenceClassification head's labels from id2label.
ModelConfig parse_bert(const json& j, const std::string& source, bool roberta,
                       const std::string& architecture) {
  ModelConfig c;
  c.arch = Arch::kBert;
  c.vocab_size = get_int(j, "vocab_size", source);
  c.dim = get_int(j, "hidden_size", source);
  c.n_layers = get_int(j, "num_hidden_layers", source);
  c.n_heads = c.n_kv_heads = get_int(j, "num_attention_heads", source);
  if (c.n_heads <= 0 || c.dim % c.n_heads != 0)
    fail("{}: hidden_size {} is not a multiple of num_attention_heads {}", source, c.dim,
         c.n_heads);
  c.head_dim = c.dim / c.n_heads;
  c.ffn_dim = get_int(j, "intermediate_size", source);
  c.type_vocab_size = get_int_or(j, "type_vocab_size", 2, source);
  if (c.type_vocab_size < 0 || c.type_vocab_size > 1024)
    fail("{}: type_vocab_size {} is out of range (0..1024)", source, c.type_vocab_size);
  c.norm_eps = static_cast<float>(get_num_or(j, "layer_norm_eps", 1e-12, source));
  const int64_t positions = get_int_or(j, "max_position_embeddings", 512, source);
  if (roberta) {
    // RoBERTa counts positions from pad_token_id + 1 (create_position_ids_from_input_ids).
    const int64_t pad = get_int_or(j, "pad_token_id", 1, source);
    if (pad < 0 || pad + 1 >= positions)
      fail("{}: pad_token_id {} leaves no positions of {}", source, pad, positions);
    c.position_offset = pad + 1;
  }
  c.max_seq_len = positions - c.position_offset;
  const std::string act = get_string_or(j, "hidden_act", "gelu", source);
  if (act != "gelu")
    fail(ErrorKind::kUnsupported, "{}: hidden_act '{}' is not supported (gelu is)", source, act);
  const std::string pos_type = get_string_or(j, "position_embedding_type", "absolute", source);
  if (pos_type == "alibi" && !roberta) {
    // JinaBERT v2: ALiBi, no position table, a GEGLU MLP.
    c.encoder_kind = ModelConfig::EncoderKind::kJina;
    c.max_seq_len = positions;
    const std::string ff = get_string_or(j, "feed_forward_type", "original", source);
    if (ff != "geglu")
      fail(ErrorKind::kUnsupported,
           "{}: feed_forward_type '{}' is not supported with ALiBi (geglu, JinaBERT v2's, is)",
           source, ff);
    c.gated_ffn = true;
  } else if (pos_type != "absolute") {
    fail(ErrorKind::kUnsupported,
         "{}: position_embedding_type '{}' is not supported (absolute, and alibi for JinaBERT v2, "
         "are)",
         source, pos_type);
  }
  if (architecture.find("ForSequenceClassification") != std::string::npos) {
    c.classifier =
        roberta ? ModelConfig::Classifier::kRobertaHead : ModelConfig::Classifier::kBertPooler;
    std::vector<std::pair<int64_t, std::string>> labels;
    if (auto it = j.find("id2label"); it != j.end() && it->is_object()) {
      for (const auto& [k, v] : it->items()) {
        char* end = nullptr;
        const long id = std::strtol(k.c_str(), &end, 10);
        if (k.empty() || *end != '\0' || id < 0 || id >= 65536 || !v.is_string())
          fail("{}: id2label must map label ids to names", source);
        labels.emplace_back(id, v.get<std::string>());
      }
    }
    std::sort(labels.begin(), labels.end());
    c.num_labels = get_int_or(j, "num_labels", static_cast<int64_t>(labels.size()), source);
    if (labels.empty() && c.num_labels == 0) c.num_labels = 2;  // transformers' default
    if (c.num_labels <= 0 || c.num_labels > 65536)
      fail("{}: num_labels {} is out of range", source, c.num_labels);
    for (int64_t i = 0; i < c.num_labels; ++i) {
      const bool listed = i < static_cast<int64_t>(labels.size()) && labels[i].first == i;
      c.labels.push_back(listed ? labels[i].second : "LABEL_" + std::to_string(i));
    }
    if (static_cast<int64_t>(labels.size()) > c.num_labels)
      fail("{}: id2label has {} labels for num_labels {}", source, labels.size(), c.num_labels);
  }
  return c;
}

// NomicBERT's config (nomic-ai's NomicBertConfig, a GPT2Config): n_embd, n_layer, n_head,
// n_inner, n_positions, type_vocab_size, layer_norm_epsilon; rotary_emb_fraction / _base /
// _interleaved and rotary_scaling_factor (dynamic NTK past max_trained_positions);
// activation_function swiglu or gelu; prenorm false (the post-LN block).
ModelConfig parse_nomic_bert(const json& j, const std::string& source) {
  ModelConfig c;
  c.arch = Arch::kBert;
  c.encoder_kind = ModelConfig::EncoderKind::kNomic;
  c.vocab_size = get_int(j, "vocab_size", source);
  c.dim = get_int(j, "n_embd", source);
  c.n_layers = get_int(j, "n_layer", source);
  c.n_heads = c.n_kv_heads = get_int(j, "n_head", source);
  if (c.n_heads <= 0 || c.dim % c.n_heads != 0)
    fail("{}: n_embd {} is not a multiple of n_head {}", source, c.dim, c.n_heads);
  c.head_dim = c.dim / c.n_heads;
  c.ffn_dim = get_int_or(j, "n_inner", 4 * c.dim, source);
  c.type_vocab_size = get_int_or(j, "type_vocab_size", 2, source);
  if (c.type_vocab_size < 0 || c.type_vocab_size > 1024)
    fail("{}: type_vocab_size {} is out of range (0..1024)", source, c.type_vocab_size);
  c.norm_eps = static_cast<float>(get_num_or(j, "layer_norm_epsilon", 1e-12, source));
  c.max_seq_len = get_int_or(j, "n_positions", 2048, source);
  if (get_bool_or(j, "prenorm", false, source))
    fail(ErrorKind::kUnsupported, "{}: prenorm NomicBERT is not supported (the post-LN one is)",
         source);
  if (get_bool_or(j, "causal", false, source))
    fail(ErrorKind::kUnsupported, "{}: a causal NomicBERT is not supported", source);
  const std::string act = get_string_or(j, "activation_function", "swiglu", source);
  if (act == "swiglu") {
    c.gated_ffn = true;
  } else if (act != "gelu") {
    fail(ErrorKind::kUnsupported,
         "{}: activation_function '{}' is not supported (swiglu and gelu are)", source, act);
  }
  const double fraction = get_num_or(j, "rotary_emb_fraction", 0.0, source);
  if (!(fraction > 0.0 && fraction <= 1.0))
    fail(ErrorKind::kUnsupported,
         "{}: rotary_emb_fraction {} is not supported (NomicBERT with rotary positions, in "
         "(0, 1], is)",
         source, fraction);
  if (get_num_or(j, "rotary_emb_scale_base", 0.0, source) != 0.0)
    fail(ErrorKind::kUnsupported, "{}: rotary_emb_scale_base (xPos) is not supported", source);
  c.rope.theta = get_num_or(j, "rotary_emb_base", 10000.0, source);
  c.rope.rot_dim = static_cast<int64_t>(std::llround(fraction * static_cast<double>(c.head_dim)));
  c.rope_style = get_bool_or(j, "rotary_emb_interleaved", false, source)
                     ? kernels::RopeStyle::kInterleaved
                     : kernels::RopeStyle::kHalf;
  const double scaling = get_num_or(j, "rotary_scaling_factor", 0.0, source);
  if (scaling != 0.0) {
    c.rope.kind = RopeParams::Kind::kDynamic;
    c.rope.factor = scaling;
    c.rope.original_max_pos = get_int_or(j, "max_trained_positions", 2048, source);
  }
  return c;
}

// Hugging Face's T5Config (t5-small/base/large, t5-v1_1, flan-t5, mT5): d_model, d_kv per
// head, d_ff, num_layers (encoder) and num_decoder_layers, relative-position buckets;
// feed_forward_proj "relu" (v1.0) or "gated-gelu" (v1.1: GELU, tanh form, times a linear gate).
ModelConfig parse_t5(const json& j, const std::string& source) {
  ModelConfig c;
  c.arch = Arch::kT5;
  c.vocab_size = get_int(j, "vocab_size", source);
  c.dim = get_int(j, "d_model", source);
  c.head_dim = get_int(j, "d_kv", source);
  c.ffn_dim = get_int(j, "d_ff", source);
  c.n_heads = c.n_kv_heads = get_int(j, "num_heads", source);
  c.n_encoder_layers = get_int(j, "num_layers", source);
  c.n_layers = get_int_or(j, "num_decoder_layers", c.n_encoder_layers, source);
  c.rel_buckets = get_int_or(j, "relative_attention_num_buckets", 32, source);
  c.rel_max_distance = get_int_or(j, "relative_attention_max_distance", 128, source);
  c.norm_eps = static_cast<float>(get_num_or(j, "layer_norm_epsilon", 1e-6, source));
  c.tied_embeddings = get_bool_or(j, "tie_word_embeddings", true, source);
  // Relative positions have no limit of their own; n_positions (512) is what T5 was trained on,
  // and what its configs carry: the longest encoder input and decoder output.
  c.max_seq_len = get_int_or(j, "n_positions", 512, source);
  std::string proj = get_string_or(j, "feed_forward_proj", "relu", source);
  if (proj == "gated-gelu" || proj == "gated-gelu_new") {
    c.gated_ffn = true;
  } else if (proj != "relu") {
    fail(ErrorKind::kUnsupported,
         "{}: feed_forward_proj '{}' is not supported (relu and gated-gelu are)", source, proj);
  }
  c.decoder_start_id = static_cast<int32_t>(get_int_or(j, "decoder_start_token_id", 0, source));
  return c;
}

std::vector<double> get_num_list(const json& j, const char* key, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array())
    fail("{}: rope field '{}' must be a list of numbers", source, key);
  std::vector<double> v;
  for (const auto& e : *it) {
    if (!e.is_number()) fail("{}: rope field '{}' must be a list of numbers", source, key);
    v.push_back(e.get<double>());
  }
  return v;
}

// RoPE from transformers' config forms: v4 (`rope_theta`, `partial_rotary_factor` and
// `rope_scaling` at the top) and v5 (`rope_parameters` holding all of them). An unknown kind is
// an error, never a default.
RopeParams parse_rope(const json& j, int64_t head_dim, int64_t max_pos, const std::string& source) {
  using K = RopeParams::Kind;
  RopeParams r;
  const json* scaling = nullptr;
  if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) fail("{}: rope_parameters must be an object", source);
    scaling = &*it;
  } else if (auto it2 = j.find("rope_scaling"); it2 != j.end() && !it2->is_null()) {
    if (!it2->is_object()) fail("{}: rope_scaling must be an object", source);
    scaling = &*it2;
  }
  // v5 keeps rope_theta and partial_rotary_factor inside rope_parameters; a checkpoint saved that
  // way must not fall back to the default base.
  r.theta = get_num_or(j, "rope_theta", 10000.0, source);
  double partial = get_num_or(j, "partial_rotary_factor", 1.0, source);
  if (scaling != nullptr) {
    r.theta = get_num_or(*scaling, "rope_theta", r.theta, source);
    partial = get_num_or(*scaling, "partial_rotary_factor", partial, source);
  }
  if (!(partial > 0.0 && partial <= 1.0))
    fail("{}: partial_rotary_factor {} is out of range (0, 1]", source, partial);
  r.rot_dim = static_cast<int64_t>(static_cast<double>(head_dim) * partial);
  if (scaling == nullptr) return r;
  const json& s = *scaling;
  std::string kind =
      get_string_or(s, "rope_type", get_string_or(s, "type", "default", source), source);
  if (kind == "default") return r;
  if (kind == "linear") {
    r.kind = K::kLinear;
  } else if (kind == "dynamic") {
    r.kind = K::kDynamic;
  } else if (kind == "yarn") {
    r.kind = K::kYarn;
  } else if (kind == "llama3") {
    r.kind = K::kLlama3;
  } else if (kind == "longrope" || kind == "su") {
    r.kind = K::kLongRope;
  } else {
    fail(ErrorKind::kUnsupported,
         "{}: rope scaling type '{}' is not supported (default, linear, dynamic, yarn, llama3, "
         "longrope are)",
         source, kind);
  }
  r.factor = get_num_or(s, "factor", r.kind == K::kLongRope ? 1.0 : -1.0, source);
  if (r.factor <= 0.0) fail("{}: rope scaling '{}' needs a positive factor", source, kind);
  r.attention_factor = get_num_or(s, "attention_factor", 0.0, source);
  switch (r.kind) {
    case K::kDynamic:
      r.original_max_pos = max_pos;
      break;
    case K::kYarn:
      r.original_max_pos = get_int_or(s, "original_max_position_embeddings", max_pos, source);
      r.beta_fast = get_num_or(s, "beta_fast", 32.0, source);
      r.beta_slow = get_num_or(s, "beta_slow", 1.0, source);
      r.mscale = get_num_or(s, "mscale", 0.0, source);
      r.mscale_all_dim = get_num_or(s, "mscale_all_dim", 0.0, source);
      r.truncate = get_bool_or(s, "truncate", true, source);
      break;
    case K::kLlama3:
      r.original_max_pos = get_int(s, "original_max_position_embeddings", source);
      r.low_freq_factor = get_num_or(s, "low_freq_factor", 1.0, source);
      r.high_freq_factor = get_num_or(s, "high_freq_factor", 4.0, source);
      break;
    case K::kLongRope: {
      r.short_factor = get_num_list(s, "short_factor", source);
      r.long_factor = get_num_list(s, "long_factor", source);
      // Phi-3 keeps the pretrained context at the top and the scale as the ratio of the two.
      const int64_t top = get_int_or(j, "original_max_position_embeddings", 0, source);
      const int64_t inner = get_int_or(s, "original_max_position_embeddings", 0, source);
      r.original_max_pos = top > 0 ? top : inner > 0 ? inner : max_pos;
      if (top > 0 || inner > 0)
        r.factor = static_cast<double>(max_pos) / static_cast<double>(r.original_max_pos);
      break;
    }
    default:
      break;
  }
  return r;
}

// The MLP activation of GPT-J, CodeGen and GPT-NeoX configs (`activation_function` /
// `hidden_act`): the tanh GELU under its names, or the exact one.
ModelConfig::Act parse_gelu(const std::string& act, const std::string& source) {
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
    return ModelConfig::Act::kGeluTanh;
  if (act == "gelu") return ModelConfig::Act::kGeluErf;
  fail(ErrorKind::kUnsupported,
       "{}: activation '{}' is not supported (gelu, gelu_new, gelu_fast, gelu_pytorch_tanh are)",
       source, act);
}

// GPT-J (GPTJForCausalLM) and CodeGen (CodeGenForCausalLM): GPT-2's field names, one LayerNorm
// feeding attention and MLP in parallel, rotary_dim dimensions of each head rotated in adjacent
// pairs (null: all), no attention biases, an LM head with a bias. CodeGen fuses q, k, v into
// qkv_proj in the 4 shards of the TPU layout it was trained on (transformers' mp_num).
ModelConfig parse_gptj(const json& j, const std::string& source, bool codegen) {
  ModelConfig c = gpt2_sizes(j, source, Arch::kGptJ, 2048);
  c.act = parse_gelu(get_string_or(j, "activation_function", "gelu_new", source), source);
  c.tied_embeddings = get_bool_or(j, "tie_word_embeddings", false, source);
  c.rope.theta = 10000.0;
  c.rope.rot_dim = get_int_or(j, "rotary_dim", 0, source);
  if (c.rope.rot_dim < 0) fail("{}: rotary_dim must be positive", source);
  c.rope_style = kernels::RopeStyle::kInterleaved;
  c.parallel_residual = true;
  c.lm_head_bias = !c.tied_embeddings;
  if (codegen) {
    c.qkv_layout = ModelConfig::QkvLayout::kCodeGen;
    c.qkv_shards = 4;
  }
  return c;
}

// GPT-NeoX (GPTNeoXForCausalLM: Pythia, GPT-NeoX-20B, RedPajama-INCITE, StableLM-alpha):
// Llama's field names, attention and MLP with their own LayerNorms, in parallel unless
// use_parallel_residual is false; rotary_pct of each head rotated in halves with base
// rotary_emb_base (or transformers v5's partial_rotary_factor / rope_theta, and rope scaling);
// query_key_value fused head by head; attention biases unless attention_bias is false.
ModelConfig parse_gpt_neox(const json& j, const std::string& source) {
  ModelConfig c;
  c.arch = Arch::kGptJ;
  c.gptj_names = ModelConfig::GptJNames::kNeoX;
  c.vocab_size = get_int(j, "vocab_size", source);
  c.dim = get_int(j, "hidden_size", source);
  c.n_layers = get_int(j, "num_hidden_layers", source);
  c.n_heads = get_int(j, "num_attention_heads", source);
  c.n_kv_heads = c.n_heads;
  c.head_dim = c.n_heads > 0 ? c.dim / c.n_heads : 0;
  c.ffn_dim = get_int_or(j, "intermediate_size", 4 * c.dim, source);
  c.max_seq_len = get_int_or(j, "max_position_embeddings", 2048, source);
  c.norm_eps = static_cast<float>(get_num_or(j, "layer_norm_eps", 1e-5, source));
  c.act = parse_gelu(get_string_or(j, "hidden_act", "gelu", source), source);
  c.tied_embeddings = get_bool_or(j, "tie_word_embeddings", false, source);
  json r = j;  // NeoX's own names for the rotary fields, as parse_rope reads them
  if (!r.contains("rope_theta") && r.contains("rotary_emb_base"))
    r["rope_theta"] = r["rotary_emb_base"];
  if (!r.contains("partial_rotary_factor"))
    r["partial_rotary_factor"] = get_num_or(j, "rotary_pct", 0.25, source);
  c.rope = parse_rope(r, c.head_dim, c.max_seq_len, source);
  c.rope_style = kernels::RopeStyle::kHalf;
  c.qkv_layout = ModelConfig::QkvLayout::kPerHead;
  c.parallel_residual = get_bool_or(j, "use_parallel_residual", true, source);
  c.two_norms = true;
  c.qkv_bias = c.o_bias = get_bool_or(j, "attention_bias", true, source);
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
  c.rope_style = kernels::RopeStyle::kHalf;
  c.tied_embeddings = get_bool_or(j, "tie_word_embeddings", false, source);
  // attention_bias puts biases on q, k, v and o (Llama, Qwen3); Qwen2 has q, k, v biases only.
  const bool attention_bias = get_bool_or(j, "attention_bias", false, source);
  c.qkv_bias = qwen2 || attention_bias;
  c.o_bias = !qwen2 && attention_bias;
  if (get_bool_or(j, "mlp_bias", false, source))
    fail(ErrorKind::kUnsupported, "{}: mlp_bias is not supported", source);
  const std::string act = get_string_or(j, "hidden_act", "silu", source);
  if (act != "silu") {
    fail(ErrorKind::kUnsupported, "{}: hidden_act '{}' is not supported (silu is)", source, act);
  }
  c.rope = parse_rope(j, c.head_dim, c.max_seq_len, source);
  // The context a scaling extends to (as vLLM derives it): linear and dynamic stretch
  // max_position_embeddings by the factor, yarn the original context; llama3 and longrope
  // configs already name the extended one.
  using K = RopeParams::Kind;
  if (c.rope.kind == K::kLinear || c.rope.kind == K::kDynamic)
    c.max_seq_len = static_cast<int64_t>(static_cast<double>(c.max_seq_len) * c.rope.factor);
  else if (c.rope.kind == K::kYarn)
    c.max_seq_len = std::max(
        c.max_seq_len,
        static_cast<int64_t>(static_cast<double>(c.rope.original_max_pos) * c.rope.factor));
  return c;
}

// Which layers slide: config's layer_types when written (transformers >= 4.53), else
// sliding(i) (the architecture's default pattern).
void set_sliding_layers(ModelConfig& c, const json& j, const std::string& source,
                        const std::function<bool(int64_t)>& sliding) {
  c.layer_sliding.assign(static_cast<size_t>(c.n_layers), 0);
  if (auto it = j.find("layer_types"); it != j.end() && it->is_array()) {
    if (static_cast<int64_t>(it->size()) != c.n_layers)
      fail("{}: layer_types has {} entries for {} layers", source, it->size(), c.n_layers);
    for (size_t i = 0; i < it->size(); ++i) {
      const json& t = (*it)[i];
      if (!t.is_string() ||
          (t.get<std::string>() != "sliding_attention" && t.get<std::string>() != "full_attention"))
        fail(ErrorKind::kUnsupported,
             "{}: layer_types[{}] must be \"sliding_attention\" or \"full_attention\"", source, i);
      c.layer_sliding[i] = t.get<std::string>() == "sliding_attention";
    }
    return;
  }
  for (int64_t i = 0; i < c.n_layers; ++i) c.layer_sliding[i] = sliding(i);
}

// Gemma 1/2/3 (text): the Llama block with GeGLU, (1 + w) RMSNorm, embeddings times
// sqrt(hidden), and for 2/3 norms after attention and MLP, local sliding-window layers among
// global ones, query_pre_attn_scalar; Gemma 2 soft-caps attention scores and logits; Gemma 3
// normalizes q and k per head and gives local layers their own RoPE base.
ModelConfig parse_gemma(const json& j, const std::string& source, int version) {
  json k = j;
  const std::string act = get_string_or(
      j, "hidden_activation", get_string_or(j, "hidden_act", "gelu_pytorch_tanh", source), source);
  if (act != "gelu_pytorch_tanh" && act != "gelu")
    fail(ErrorKind::kUnsupported,
         "{}: hidden_activation '{}' is not supported (gelu_pytorch_tanh "
         "is)",
         source, act);
  k["hidden_act"] = "silu";  // parse_llama's check; the activation is set below
  // Gemma 3 in transformers v5: one rope_parameters per layer type.
  const json* per_type = nullptr;
  if (auto it = j.find("rope_parameters");
      it != j.end() && it->is_object() && it->contains("full_attention"))
    per_type = &*it;
  if (per_type != nullptr) k["rope_parameters"] = (*per_type)["full_attention"];
  ModelConfig c = parse_llama(k, source, false);
  c.act = ModelConfig::Act::kGeluTanh;
  c.norm_plus_one = true;
  c.tied_embeddings = get_bool_or(j, "tie_word_embeddings", true, source);
  c.embed_scale = std::sqrt(static_cast<float>(c.dim));
  if (version == 1) return c;
  c.post_norms = true;
  c.attn_scale =
      static_cast<float>(1.0 / std::sqrt(get_num_or(j, "query_pre_attn_scalar",
                                                    static_cast<double>(c.head_dim), source)));
  c.attn_softcap = static_cast<float>(get_num_or(j, "attn_logit_softcapping", 0.0, source));
  c.final_softcap = static_cast<float>(get_num_or(j, "final_logit_softcapping", 0.0, source));
  if (c.attn_softcap < 0.0f || c.final_softcap < 0.0f)
    fail("{}: soft-capping values must be positive", source);
  c.sliding_window = get_int_or(j, "sliding_window", 0, source);
  if (c.sliding_window < 0) fail("{}: sliding_window must be positive", source);
  if (version == 2) {
    set_sliding_layers(c, j, source, [](int64_t i) { return (i + 1) % 2 != 0; });
    return c;
  }
  c.qk_norm = true;
  const int64_t pattern = get_int_or(j, "sliding_window_pattern", 6, source);
  if (pattern <= 0) fail("{}: sliding_window_pattern must be positive", source);
  set_sliding_layers(c, j, source, [pattern](int64_t i) { return (i + 1) % pattern != 0; });
  c.has_local_rope = true;
  if (per_type != nullptr) {
    json local = j;
    local["rope_parameters"] = (*per_type).value("sliding_attention", json::object());
    c.local_rope = parse_rope(local, c.head_dim, c.max_seq_len, source);
  } else {
    c.local_rope.theta = get_num_or(j, "rope_local_base_freq", 10000.0, source);
    c.local_rope.rot_dim = c.rope.rot_dim;
  }
  return c;
}

// gpt-oss (GptOssForCausalLM; OpenAI 2025, its model card): the Llama block with biases on q, k,
// v and o, attention sinks, sliding-window layers (128 tokens) alternating with full ones from
// the first, YaRN (factor 32 over 4,096 positions, not truncated, by default), and a mixture of
// num_local_experts experts of intermediate_size, top num_experts_per_tok by the router's logits
// (with a bias) weighted by the softmax over the chosen, each a clamped SwiGLU with biases.
ModelConfig parse_gpt_oss(const json& j, const std::string& source) {
  json k = j;
  if (!k.contains("rope_parameters") && !k.contains("rope_scaling")) {
    k["rope_parameters"] = {{"rope_type", "yarn"},
                            {"factor", 32.0},
                            {"beta_fast", 32.0},
                            {"beta_slow", 1.0},
                            {"truncate", false},
                            {"original_max_position_embeddings", 4096},
                            {"rope_theta", get_num_or(j, "rope_theta", 150000.0, source)}};
  }
  if (!k.contains("rope_theta")) k["rope_theta"] = 150000.0;
  if (!k.contains("attention_bias")) k["attention_bias"] = true;
  ModelConfig c = parse_llama(k, source, false);
  c.moe_names = ModelConfig::MoeNames::kGptOss;
  c.n_experts = get_int(j, "num_local_experts", source);
  c.n_experts_used =
      get_int_or(j, "num_experts_per_tok", get_int_or(j, "experts_per_token", 4, source), source);
  c.expert_ffn_dim = c.ffn_dim;
  c.norm_topk_prob = true;  // softmax over the chosen logits: the same weights
  c.moe_bias = true;
  c.clamped_swiglu = true;
  c.swiglu_alpha = static_cast<float>(get_num_or(j, "swiglu_alpha", 1.702, source));
  c.swiglu_limit = static_cast<float>(get_num_or(j, "swiglu_limit", 7.0, source));
  if (!(c.swiglu_limit > 0.0f && c.swiglu_limit < 1e6f) ||
      !(c.swiglu_alpha > 0.0f && c.swiglu_alpha < 1e3f))
    fail("{}: swiglu_alpha / swiglu_limit out of range", source);
  c.attn_sinks = true;
  const int64_t w = get_int_or(j, "sliding_window", 128, source);
  if (w <= 0) fail("{}: sliding_window must be positive", source);
  c.sliding_window = w;
  set_sliding_layers(c, j, source, [](int64_t i) { return i % 2 == 0; });
  return c;
}

void parse_moe(ModelConfig& c, const json& j, const std::string& source, bool mixtral,
               bool olmoe = false);

// Qwen3-Next (Qwen3NextForCausalLM) and the Qwen3.5 text models (Qwen3_5ForCausalLM,
// Qwen3_5MoeForCausalLM; transformers' modeling_qwen3_next.py and modular_qwen3_5.py): Gated
// DeltaNet layers ("linear_attention" in layer_types, else every full_attention_interval-th layer
// is "full_attention") beside gated attention (q and its gate from q_proj, per-head q/k RMSNorm,
// partial rotary), every RMSNorm of the decoder zero-centered (1 + w), Qwen2-MoE's mixture with
// its gated shared expert where the config has experts (dense MLPs otherwise). Qwen3.5's
// multimodal RoPE (mrope_section) is plain RoPE for text, its three positions being the same.
ModelConfig parse_qwen3_next(const json& j, const std::string& source, bool qwen3_5) {
  ModelConfig c = parse_llama(j, source, false);
  c.qk_norm = true;
  c.norm_plus_one = true;
  c.gated_attention = true;
  c.split_linear_proj = qwen3_5;
  c.lin_k_heads = get_int(j, "linear_num_key_heads", source);
  c.lin_v_heads = get_int(j, "linear_num_value_heads", source);
  c.lin_k_dim = get_int(j, "linear_key_head_dim", source);
  c.lin_v_dim = get_int(j, "linear_value_head_dim", source);
  c.ssm_conv_kernel = get_int_or(j, "linear_conv_kernel_dim", 4, source);
  c.layer_linear.assign(static_cast<size_t>(std::max<int64_t>(c.n_layers, 0)), 0);
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || static_cast<int64_t>(it->size()) != c.n_layers)
      fail("{}: layer_types must list one type for each of the {} layers", source, c.n_layers);
    for (size_t i = 0; i < it->size(); ++i) {
      const json& t = (*it)[i];
      if (!t.is_string() ||
          (t.get<std::string>() != "linear_attention" && t.get<std::string>() != "full_attention"))
        fail(ErrorKind::kUnsupported,
             "{}: layer_types[{}] must be \"linear_attention\" or \"full_attention\"", source, i);
      c.layer_linear[i] = t.get<std::string>() == "linear_attention";
    }
  } else {
    const int64_t every = get_int_or(j, "full_attention_interval", 4, source);
    if (every <= 0) fail("{}: full_attention_interval must be positive", source);
    for (int64_t i = 0; i < c.n_layers; ++i) c.layer_linear[i] = (i + 1) % every != 0;
  }
  if (j.contains("num_experts") && !j["num_experts"].is_null() &&
      get_int(j, "num_experts", source) > 0)
    parse_moe(c, j, source, false);
  return c;
}

// Mixtral, Qwen2-MoE, Qwen3-MoE: the Llama / Qwen block with a mixture of experts for the MLP.
// OLMoE: Mixtral's routing (its norm_topk_prob, false in OLMoE's configs) under Qwen's names.
void parse_moe(ModelConfig& c, const json& j, const std::string& source, bool mixtral, bool olmoe) {
  c.moe_names = mixtral ? ModelConfig::MoeNames::kMixtral : ModelConfig::MoeNames::kQwen;
  c.n_experts = get_int(j, mixtral ? "num_local_experts" : "num_experts", source);
  c.n_experts_used = get_int(j, "num_experts_per_tok", source);
  if (olmoe) {  // every layer sparse, experts of intermediate_size, no shared expert
    c.expert_ffn_dim = c.ffn_dim;
    c.norm_topk_prob = get_bool_or(j, "norm_topk_prob", false, source);
    return;
  }
  if (mixtral) {
    c.expert_ffn_dim = c.ffn_dim;
    c.norm_topk_prob = true;  // Mixtral always renormalizes the chosen experts' weights
    return;
  }
  c.expert_ffn_dim = get_int(j, "moe_intermediate_size", source);
  c.shared_ffn_dim = get_int_or(j, "shared_expert_intermediate_size", 0, source);
  c.shared_expert_gate = c.shared_ffn_dim > 0;
  c.norm_topk_prob = get_bool_or(j, "norm_topk_prob", false, source);
  // Dense layers: those in mlp_only_layers, and all but every decoder_sparse_step-th.
  const int64_t step = get_int_or(j, "decoder_sparse_step", 1, source);
  if (step <= 0) fail("{}: decoder_sparse_step must be positive", source);
  c.layer_moe.assign(static_cast<size_t>(c.n_layers), 0);
  for (int64_t i = 0; i < c.n_layers; ++i) c.layer_moe[i] = (i + 1) % step == 0;
  if (auto it = j.find("mlp_only_layers"); it != j.end() && it->is_array()) {
    for (const auto& v : *it) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.n_layers)
        fail("{}: mlp_only_layers holds a layer out of range", source);
      c.layer_moe[v.get<size_t>()] = 0;
    }
  }
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
  std::string model_type = get_string_or(j, "model_type", "", source);
  // Qwen3.5's multimodal wrapper: the text model's settings in text_config (the wrapper's own
  // keys, tie_word_embeddings among them, where text_config lacks them), its tensors under
  // model.language_model.; the vision tower is not loaded.
  std::string text_model_prefix;
  if (architecture == "Qwen3_5ForConditionalGeneration" ||
      architecture == "Qwen3_5MoeForConditionalGeneration") {
    auto it = j.find("text_config");
    if (it == j.end() || !it->is_object())
      fail("{}: {} needs a 'text_config' object (the text model's settings)", source, architecture);
    json text = *it;
    for (auto k = j.begin(); k != j.end(); ++k)
      if (k.key() != "text_config" && k.key() != "vision_config" && !text.contains(k.key()))
        text[k.key()] = k.value();
    architecture = architecture == "Qwen3_5ForConditionalGeneration" ? "Qwen3_5ForCausalLM"
                                                                     : "Qwen3_5MoeForCausalLM";
    text["architectures"] = json::array({architecture});
    j = std::move(text);
    model_type = get_string_or(j, "model_type", "", source);
    text_model_prefix = "model.language_model.";
  }

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
  } else if (architecture == "Qwen3ForCausalLM" ||
             (architecture.empty() && model_type == "qwen3")) {
    // Qwen3: Qwen2 without the QKV biases (attention_bias, false by default) and with an RMSNorm
    // over each head of q and k.
    c = parse_llama(j, source, false);
    c.qk_norm = true;
    if (architecture.empty()) architecture = "Qwen3ForCausalLM";
  } else if (architecture == "MixtralForCausalLM" ||
             (architecture.empty() && model_type == "mixtral")) {
    c = parse_llama(j, source, false);
    parse_moe(c, j, source, true);
    if (architecture.empty()) architecture = "MixtralForCausalLM";
  } else if (architecture == "Qwen2MoeForCausalLM" ||
             (architecture.empty() && model_type == "qwen2_moe")) {
    c = parse_llama(j, source, true);
    parse_moe(c, j, source, false);
    if (architecture.empty()) architecture = "Qwen2MoeForCausalLM";
  } else if (architecture == "Qwen3MoeForCausalLM" ||
             (architecture.empty() && model_type == "qwen3_moe")) {
    c = parse_llama(j, source, false);
    c.qk_norm = true;
    parse_moe(c, j, source, false);
    if (architecture.empty()) architecture = "Qwen3MoeForCausalLM";
  } else if (architecture == "GptOssForCausalLM" ||
             (architecture.empty() && model_type == "gpt_oss")) {
    c = parse_gpt_oss(j, source);
    if (architecture.empty()) architecture = "GptOssForCausalLM";
  } else if (architecture == "Qwen3NextForCausalLM" ||
             (architecture.empty() && model_type == "qwen3_next")) {
    c = parse_qwen3_next(j, source, false);
    if (architecture.empty()) architecture = "Qwen3NextForCausalLM";
  } else if (architecture == "Qwen3_5ForCausalLM" || architecture == "Qwen3_5MoeForCausalLM" ||
             (architecture.empty() &&
              (model_type == "qwen3_5_text" || model_type == "qwen3_5_moe_text"))) {
    c = parse_qwen3_next(j, source, true);
    if (architecture.empty())
      architecture = c.n_experts > 0 ? "Qwen3_5MoeForCausalLM" : "Qwen3_5ForCausalLM";
  } else if (architecture == "OlmoeForCausalLM" ||
             (architecture.empty() && model_type == "olmoe")) {
    // OLMoE: Llama attention with one RMSNorm over the whole q and the whole k projection, a
    // mixture of experts in every layer.
    c = parse_llama(j, source, false);
    c.qk_norm = c.qk_norm_full = true;
    if (auto it = j.find("clip_qkv"); it != j.end() && !it->is_null())
      fail(ErrorKind::kUnsupported, "{}: clip_qkv is not supported (null in OLMoE's releases)",
           source);
    parse_moe(c, j, source, false, true);
    if (architecture.empty()) architecture = "OlmoeForCausalLM";
  } else if (architecture == "Phi3ForCausalLM" || (architecture.empty() && model_type == "phi3")) {
    // Phi-3/3.5/4 and Phi-4-mini: the Llama block with fused projections, LongRoPE, partial
    // rotary (Phi-4-mini).
    c = parse_llama(j, source, false);
    c.fused_qkv = true;
    if (architecture.empty()) architecture = "Phi3ForCausalLM";
  } else if (architecture == "GemmaForCausalLM" ||
             (architecture.empty() && model_type == "gemma")) {
    c = parse_gemma(j, source, 1);
    if (architecture.empty()) architecture = "GemmaForCausalLM";
  } else if (architecture == "Gemma2ForCausalLM" ||
             (architecture.empty() && model_type == "gemma2")) {
    c = parse_gemma(j, source, 2);
    if (architecture.empty()) architecture = "Gemma2ForCausalLM";
  } else if (architecture == "Gemma3ForCausalLM" ||
             (architecture.empty() && model_type == "gemma3_text")) {
    c = parse_gemma(j, source, 3);
    if (architecture.empty()) architecture = "Gemma3ForCausalLM";
  } else if (architecture == "T5ForConditionalGeneration" ||
             (architecture.empty() && model_type == "t5")) {
    c = parse_t5(j, source);
    if (architecture.empty()) architecture = "T5ForConditionalGeneration";
  } else if (architecture == "GPTJForCausalLM" || (architecture.empty() && model_type == "gptj")) {
    c = parse_gptj(j, source, false);
    if (architecture.empty()) architecture = "GPTJForCausalLM";
  } else if (architecture == "CodeGenForCausalLM" ||
             (architecture.empty() && model_type == "codegen")) {
    c = parse_gptj(j, source, true);
    if (architecture.empty()) architecture = "CodeGenForCausalLM";
  } else if (architecture == "GPTNeoXForCausalLM" ||
             (architecture.empty() && model_type == "gpt_neox")) {
    c = parse_gpt_neox(j, source);
    if (architecture.empty()) architecture = "GPTNeoXForCausalLM";
  } else if (architecture == "MambaForCausalLM" ||
             (architecture.empty() && model_type == "mamba")) {
    c = parse_mamba(j, source);
    if (architecture.empty()) architecture = "MambaForCausalLM";
  } else if (architecture == "BertModel" || architecture == "BertForSequenceClassification" ||
             architecture == "BertForMaskedLM" || architecture == "JinaBertModel" ||
             architecture == "JinaBertForMaskedLM" ||
             (architecture.empty() && model_type == "bert")) {
    if (architecture.empty()) architecture = "BertModel";
    c = parse_bert(j, source, false, architecture);
  } else if (architecture == "NomicBertModel" ||
             (architecture.empty() && model_type == "nomic_bert")) {
    architecture = "NomicBertModel";
    c = parse_nomic_bert(j, source);
  } else if (architecture == "RobertaModel" || architecture == "XLMRobertaModel" ||
             architecture == "RobertaForSequenceClassification" ||
             architecture == "XLMRobertaForSequenceClassification" ||
             (architecture.empty() && (model_type == "roberta" || model_type == "xlm-roberta"))) {
    if (architecture.empty())
      architecture = model_type == "roberta" ? "RobertaModel" : "XLMRobertaModel";
    c = parse_bert(j, source, true, architecture);
  } else {
    fail(ErrorKind::kUnsupported,
         "{}: unknown architecture '{}' (model_type '{}'); supported: GPT2LMHeadModel, "
         "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
         "Phi3ForCausalLM, GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, "
         "MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, OlmoeForCausalLM, "
         "GptOssForCausalLM, Qwen3NextForCausalLM, Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, "
         "GPTJForCausalLM, CodeGenForCausalLM, GPTNeoXForCausalLM, MambaForCausalLM, "
         "T5ForConditionalGeneration, BertModel, "
         "BertForSequenceClassification, RobertaModel, XLMRobertaModel, "
         "(XLM)RobertaForSequenceClassification, NomicBertModel, JinaBertModel",
         source, architecture, model_type);
  }
  c.architecture = architecture;
  c.text_model_prefix = text_model_prefix;
  c.format = "safetensors";
  c.matryoshka = get_bool_or(j, "is_matryoshka", false, source);
  if (auto it = j.find("matryoshka_dimensions"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) fail("{}: matryoshka_dimensions must be a list of sizes", source);
    for (const auto& v : *it) {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > c.dim)
        fail("{}: matryoshka_dimensions must hold sizes from 1 to hidden size {}", source, c.dim);
      c.matryoshka_dims.push_back(v.get<int64_t>());
    }
    c.matryoshka = true;
  }
  c.bos_id = get_token_id(j, "bos_token_id", source);
  c.eos_id = get_token_id(j, "eos_token_id", source);
  const bool qwen = architecture.rfind("Qwen", 0) == 0;
  if (c.sliding_window == 0 && c.arch == Arch::kLlama) {
    // Mistral (every layer) and Qwen2/3 with use_sliding_window (layers from max_window_layers).
    const int64_t w = get_int_or(j, "sliding_window", 0, source);
    if (w < 0) fail("{}: sliding_window must be positive", source);
    if (w > 0 && w < c.max_seq_len && get_bool_or(j, "use_sliding_window", !qwen, source)) {
      c.sliding_window = w;
      const int64_t from = qwen ? get_int_or(j, "max_window_layers", 0, source) : 0;
      set_sliding_layers(c, j, source, [from](int64_t i) { return i >= from; });
    }
  }
  c.validate(source);
  return c;
}

}  // namespace tf
