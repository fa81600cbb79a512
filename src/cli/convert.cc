// `tokenflow convert IN OUT.gguf --dtype T`: a Hugging Face directory or a llama2.c checkpoint,
// with its tokenizer, written as GGUF the way llama.cpp's converter lays it out (its tensor names,
// Llama's Q/K rows permuted for adjacent-pair RoPE, GPT-2's Conv1D matrices as [out, in], the
// {arch}.* hyperparameters and tokenizer.ggml.* vocabulary), quantized in the same pass (what
// llama.cpp needs a Python converter and llama-quantize for). `tokenflow quantize IN.gguf
// OUT.gguf --dtype T` re-quantizes a GGUF, keeping its metadata.

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "kernels/ggml_quants.h"
#include "model/ggml_quants.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/model.h"
#include "tokenizer/llama2c_tokenizer.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf::cli {

namespace fs = std::filesystem;
using json = nlohmann::json;
using kernels::WeightType;

namespace {

// What --dtype asks for: one type for every matrix, or one of llama.cpp's mixes.
struct Plan {
  std::string name;
  GgmlType base = GgmlType::kF32;
  bool mix = false;        // *_k_m: Q6_K for the output and for attn_v / ffn_down of some layers
  uint32_t file_type = 0;  // llama.cpp's general.file_type (LLAMA_FTYPE_*)
};

Plan parse_plan(const std::string& s) {
  static const std::map<std::string, Plan> plans = {
      {"f32", {"f32", GgmlType::kF32, false, 0}},
      {"f16", {"f16", GgmlType::kF16, false, 1}},
      {"bf16", {"bf16", GgmlType::kBF16, false, 32}},
      {"q8_0", {"q8_0", GgmlType::kQ8_0, false, 7}},
      {"q4_0", {"q4_0", GgmlType::kQ4_0, false, 2}},
      {"q4_1", {"q4_1", GgmlType::kQ4_1, false, 3}},
      {"q5_0", {"q5_0", GgmlType::kQ5_0, false, 8}},
      {"q5_1", {"q5_1", GgmlType::kQ5_1, false, 9}},
      {"q6_k", {"q6_k", GgmlType::kQ6_K, false, 18}},
      {"q4_k_s", {"q4_k_s", GgmlType::kQ4_K, false, 14}},
      {"q4_k_m", {"q4_k_m", GgmlType::kQ4_K, true, 15}},
      {"q5_k_s", {"q5_k_s", GgmlType::kQ5_K, false, 16}},
      {"q5_k_m", {"q5_k_m", GgmlType::kQ5_K, true, 17}},
      {"iq4_nl", {"iq4_nl", GgmlType::kIQ4_NL, false, 25}},
  };
  auto it = plans.find(s);
  if (it == plans.end()) {
    std::string names;
    for (const auto& [k, v] : plans) names += (names.empty() ? "" : ", ") + k;
    fail("unknown --dtype '{}': use one of {}", s, names);
  }
  return it->second;
}

int64_t block_of(GgmlType t) {
  return ggml_type_info(static_cast<uint32_t>(t))->block_size;
}

// The type a tensor gets: 1-D tensors stay F32; a matrix whose rows are not whole blocks of the
// plan's type falls back as llama.cpp does (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0), then to F16.
GgmlType type_for(const Plan& plan, const std::string& name, int64_t rows, int64_t cols,
                  int64_t n_layers) {
  if (rows <= 1 || name == "position_embd.weight") return GgmlType::kF32;
  GgmlType t = plan.base;
  if (plan.mix) {
    int layer = -1;
    if (name.rfind("blk.", 0) == 0) layer = std::stoi(name.substr(4));
    const bool more_bits = layer >= 0 && (layer < n_layers / 8 || layer >= 7 * n_layers / 8 ||
                                          (layer - n_layers / 8) % 3 == 2);
    // ffn_down as llama.cpp matches it: the experts' and the shared expert's too.
    const bool v_or_down =
        name.find(".attn_v.") != std::string::npos || name.find(".ffn_down") != std::string::npos;
    if (name == "output.weight" || (v_or_down && more_bits)) t = GgmlType::kQ6_K;
  }
  if (cols % block_of(t) != 0) {
    if (t == GgmlType::kQ4_K) t = GgmlType::kQ5_0;
    if (t == GgmlType::kQ5_K) t = GgmlType::kQ5_1;
    if (t == GgmlType::kQ6_K) t = GgmlType::kQ8_0;
  }
  if (cols % block_of(t) != 0) t = GgmlType::kF16;
  return t;
}

// f32 values [rows, cols] as type t.
std::vector<uint8_t> encode(GgmlType t, const std::vector<float>& v) {
  std::vector<uint8_t> out;
  if (t == GgmlType::kF32) {
    out.resize(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
  } else if (t == GgmlType::kF16 || t == GgmlType::kBF16) {
    out.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = t == GgmlType::kF16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  } else {
    const WeightType w = *block_weight_type(t);
    out.resize(static_cast<size_t>(static_cast<int64_t>(v.size()) / kernels::block_size(w) *
                                   kernels::block_bytes(w)));
    kernels::quantize_blocks(w, v.data(), static_cast<int64_t>(v.size()), out.data());
  }
  return out;
}

std::string gguf_arch(const ModelConfig& c) {
  if (c.arch == Arch::kGpt2) return "gpt2";
  if (c.architecture == "Qwen2ForCausalLM") return "qwen2";
  if (c.architecture == "Qwen3ForCausalLM") return "qwen3";
  if (c.architecture == "LlamaForCausalLM" || c.architecture == "MistralForCausalLM" ||
      c.architecture == "MixtralForCausalLM")
    return "llama";
  if (c.architecture == "Qwen2MoeForCausalLM") return "qwen2moe";
  if (c.architecture == "Qwen3MoeForCausalLM") return "qwen3moe";
  if (c.architecture == "OlmoeForCausalLM") return "olmoe";
  fail(ErrorKind::kUnsupported, "convert: architecture {} cannot be written as GGUF yet",
       c.architecture);
}

// RoPE scaling as llama.cpp reads it: linear and yarn as rope.scaling.* keys, Llama 3.1's as the
// rope_freqs tensor (one divisor per rotated pair); the position-dependent kinds have no GGUF form.
void write_rope_scaling(GgufWriter& g, const std::string& p, const ModelConfig& c) {
  using K = RopeParams::Kind;
  const RopeParams& r = c.rope;
  switch (r.kind) {
    case K::kDefault:
      break;
    case K::kLinear:
    case K::kYarn:
      g.set_string(p + "rope.scaling.type", r.kind == K::kLinear ? "linear" : "yarn");
      g.set_f32(p + "rope.scaling.factor", static_cast<float>(r.factor));
      if (r.kind == K::kYarn) {
        g.set_u32(p + "rope.scaling.original_context_length",
                  static_cast<uint32_t>(r.original_max_pos));
        // llama.cpp multiplies this with YaRN's own 0.1 ln(factor) + 1.
        const double attn = Rope(r, c.head_dim, c.rope_style).scale() / yarn_mscale(r.factor);
        g.set_f32(p + "rope.scaling.attn_factor", static_cast<float>(attn));
        g.set_f32(p + "rope.scaling.yarn_beta_fast", static_cast<float>(r.beta_fast));
        g.set_f32(p + "rope.scaling.yarn_beta_slow", static_cast<float>(r.beta_slow));
      }
      break;
    case K::kLlama3: {
      RopeParams plain = r;
      plain.kind = K::kDefault;
      std::vector<float> scratch;
      const Rope scaled(r, c.head_dim, c.rope_style), base(plain, c.head_dim, c.rope_style);
      const int64_t half = scaled.rot_dim() / 2;
      const float* fs = scaled.inv_freq(0, scratch);
      const float* fb = base.inv_freq(0, scratch);
      std::vector<float> factors(static_cast<size_t>(half));
      for (int64_t i = 0; i < half; ++i) factors[i] = fb[i] / fs[i];
      std::vector<uint8_t> bytes(factors.size() * sizeof(float));
      std::memcpy(bytes.data(), factors.data(), bytes.size());
      g.add_tensor("rope_freqs.weight", {half}, GgmlType::kF32, std::move(bytes));
      break;
    }
    case K::kDynamic:
    case K::kLongRope:
      fail(ErrorKind::kUnsupported, "convert: rope scaling '{}' has no GGUF form",
           rope_kind_name(r.kind));
  }
}

// The GGUF name of a Hugging Face tensor name ("" for one GGUF does not keep).
std::string gguf_name(bool gpt2, const std::string& hf) {
  static const std::map<std::string, std::string> llama = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.bias", "attn_output.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
      {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"}};
  static const std::map<std::string, std::string> gpt2_block = {
      {"ln_1", "attn_norm"}, {"attn.c_attn", "attn_qkv"}, {"attn.c_proj", "attn_output"},
      {"ln_2", "ffn_norm"},  {"mlp.c_fc", "ffn_up"},      {"mlp.c_proj", "ffn_down"}};
  if (hf == "lm_head.weight") return "output.weight";
  if (gpt2) {
    std::string n = hf.rfind("transformer.", 0) == 0 ? hf.substr(12) : hf;
    if (n == "wte.weight") return "token_embd.weight";
    if (n == "wpe.weight") return "position_embd.weight";
    if (n.rfind("ln_f.", 0) == 0) return "output_norm." + n.substr(5);
    if (n.rfind("h.", 0) != 0) return {};
    const size_t dot = n.find('.', 2);
    const size_t last = n.rfind('.');
    if (dot == std::string::npos || last <= dot) return {};
    auto it = gpt2_block.find(n.substr(dot + 1, last - dot - 1));
    if (it == gpt2_block.end()) return {};
    return "blk." + n.substr(2, dot - 2) + "." + it->second + n.substr(last);
  }
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf.rfind("model.layers.", 0) != 0) return {};
  const size_t dot = hf.find('.', 13);
  if (dot == std::string::npos) return {};
  auto it = llama.find(hf.substr(dot + 1));
  if (it == llama.end()) return {};
  return "blk." + hf.substr(13, dot - 13) + "." + it->second;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// llama.cpp's tokenizer.ggml.pre for a byte-level BPE tokenizer.json's pre-tokenizer.
std::string pre_name(const json& pre, const std::string& path) {
  const std::string type = pre.value("type", "");
  if (type == "ByteLevel") return "gpt-2";
  if (type == "Sequence" && pre.contains("pretokenizers")) {
    const json& seq = pre["pretokenizers"];
    if (seq.size() == 2 && seq[0].value("type", "") == "Digits" &&
        seq[1].value("type", "") == "ByteLevel")
      return "smollm";
    if (seq.size() == 2 && seq[0].value("type", "") == "Split" &&
        seq[1].value("type", "") == "ByteLevel") {
      const std::string r = seq[0]["pattern"].value("Regex", "");
      if (r.find("\\p{N}{1,3}") != std::string::npos) return "llama-bpe";
      if (r.find("\\p{N}|") != std::string::npos) return "qwen2";
    }
  }
  fail(ErrorKind::kUnsupported,
       "convert: the pre-tokenizer of '{}' is not one GGUF names (gpt-2, llama-bpe, qwen2, "
       "smollm)",
       path);
}

// Pads a vocabulary shorter than the model's embedding (Hugging Face models often round it up)
// with unused tokens, as llama.cpp's converter does; refuses a longer one.
void fit_vocab(std::vector<std::string>& tokens, std::vector<int32_t>& types, int64_t model_vocab,
               const std::string& source) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n > model_vocab)
    fail("convert: the tokenizer '{}' has {} tokens but the model only {} embeddings", source, n,
         model_vocab);
  for (int64_t i = n; i < model_vocab; ++i) {
    tokens.push_back("[PAD" + std::to_string(i) + "]");
    types.push_back(5);
  }
}

void write_vocab(GgufWriter& g, const LoadedTokenizer& lt, int64_t model_vocab) {
  const Tokenizer& tok = *lt.tokenizer;
  if (const auto* l2 = dynamic_cast<const Llama2cTokenizer*>(&tok)) {
    // SentencePiece pieces with scores (a llama2.c vocabulary): spaces back to U+2581.
    std::vector<std::string> pieces;
    std::vector<float> scores;
    std::vector<int32_t> types;
    for (int32_t id = 0; id < static_cast<int32_t>(l2->vocab_size()); ++id) {
      std::string p;
      for (char ch : l2->piece(id))
        p += ch == ' ' ? std::string("\xe2\x96\x81") : std::string(1, ch);
      const bool byte = p.size() == 6 && p.rfind("<0x", 0) == 0 && p[5] == '>';
      types.push_back(id == 0 ? 2 : (l2->is_special(id) ? 3 : (byte ? 6 : 1)));
      pieces.push_back(std::move(p));
      scores.push_back(l2->score(id));
    }
    fit_vocab(pieces, types, model_vocab, lt.source);
    scores.resize(pieces.size(), -1e9f);
    g.set_string("tokenizer.ggml.model", "llama");
    g.set_strings("tokenizer.ggml.tokens", std::move(pieces));
    g.set_f32s("tokenizer.ggml.scores", scores);
    g.set_i32s("tokenizer.ggml.token_type", types);
  } else if (fs::path(lt.source).filename() == "tokenizer.json") {
    const json doc = json::parse(read_text(lt.source));
    const json& model = doc.at("model");
    const std::string model_type = model.value("type", model.contains("merges") ? "BPE" : "");
    if (model_type != "BPE" || model.value("byte_fallback", false) ||
        !doc.contains("pre_tokenizer") || doc["pre_tokenizer"].is_null()) {
      fail(ErrorKind::kUnsupported,
           "convert: '{}' is not a byte-level BPE tokenizer; only those and llama2.c "
           "vocabularies can be written as GGUF yet (or pass --tokenizer none)",
           lt.source);
    }
    std::map<int64_t, std::pair<std::string, int32_t>> by_id;
    for (const auto& [piece, id] : model.at("vocab").items()) by_id[id.get<int64_t>()] = {piece, 1};
    for (const json& a : doc.value("added_tokens", json::array()))
      by_id[a.at("id").get<int64_t>()] = {a.at("content").get<std::string>(),
                                          a.value("special", false) ? 3 : 4};
    const int64_t n = by_id.empty() ? 0 : by_id.rbegin()->first + 1;
    std::vector<std::string> tokens(static_cast<size_t>(n));
    std::vector<int32_t> types(static_cast<size_t>(n), 5);
    for (int64_t i = 0; i < n; ++i) tokens[i] = "[PAD" + std::to_string(i) + "]";
    for (const auto& [id, pt] : by_id) {
      tokens[id] = pt.first;
      types[id] = pt.second;
    }
    std::vector<std::string> merges;
    for (const json& m : model.value("merges", json::array()))
      merges.push_back(m.is_string()
                           ? m.get<std::string>()
                           : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
    fit_vocab(tokens, types, model_vocab, lt.source);
    g.set_string("tokenizer.ggml.model", "gpt2");
    g.set_string("tokenizer.ggml.pre", pre_name(doc["pre_tokenizer"], lt.source));
    g.set_strings("tokenizer.ggml.tokens", std::move(tokens));
    g.set_i32s("tokenizer.ggml.token_type", types);
    g.set_strings("tokenizer.ggml.merges", std::move(merges));
  } else {
    fail(ErrorKind::kUnsupported,
         "convert: the tokenizer '{}' cannot be written as GGUF yet (tokenizer.json byte-level "
         "BPE and llama2.c vocabularies can; or pass --tokenizer none)",
         lt.source);
  }
  if (tok.bos_id() >= 0)
    g.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(tok.bos_id()));
  if (tok.eos_id() >= 0)
    g.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tok.eos_id()));
  const std::vector<int32_t> probe = tok.encode("a", true);
  g.set_bool("tokenizer.ggml.add_bos_token", !probe.empty() && probe[0] == tok.bos_id());
  if (!lt.chat_template.empty()) g.set_string("tokenizer.chat_template", lt.chat_template);
}

// Layer l's experts as GGUF stacks them: gate, up [E, I, H] and down [E, H, I] (which 0, 1, 2),
// from one tensor per expert (transformers v4) or v5's stacked gate_up_proj / down_proj.
std::vector<float> expert_stack(const WeightStore& w, const ModelConfig& c, int64_t l, int which) {
  const int64_t E = c.n_experts, I = c.expert_ffn_dim, H = c.dim, n = I * H;
  const std::string p = "model.layers." + std::to_string(l) + ".";
  const bool mixtral = w.has(p + "block_sparse_moe.gate.weight");
  const std::string x = p + (mixtral ? "block_sparse_moe." : "mlp.") + "experts.";
  std::vector<float> out(static_cast<size_t>(E * n));
  const auto to_f32 = [&](const std::string& name, int64_t offset, float* dst) {
    const TensorView& v = w.get(name);
    if (v.dtype != DType::kF32 && v.dtype != DType::kF16 && v.dtype != DType::kBF16)
      fail(ErrorKind::kUnsupported, "convert: tensor '{}' is stored as {}", name,
           dtype_name(v.dtype));
    const size_t elem = dtype_size(v.dtype);
    convert_to_f32(v.dtype, static_cast<const uint8_t*>(v.data) + offset * elem,
                   static_cast<size_t>(n), dst);
  };
  if (w.has(x + "gate_up_proj")) {  // [E, 2I, H], gate rows first; down [E, H, I]
    for (int64_t e = 0; e < E; ++e) {
      if (which == 2)
        to_f32(x + "down_proj", e * n, out.data() + e * n);
      else
        to_f32(x + "gate_up_proj", (2 * e + which) * n, out.data() + e * n);
    }
    return out;
  }
  static const char* v4[] = {"gate_proj", "up_proj", "down_proj"};
  static const char* v4_mixtral[] = {"w1", "w3", "w2"};
  for (int64_t e = 0; e < E; ++e) {
    const std::string name =
        x + std::to_string(e) + "." + (mixtral ? v4_mixtral[which] : v4[which]) + ".weight";
    to_f32(name, 0, out.data() + e * n);
  }
  return out;
}

struct ConvertOptions {
  std::string in, out, dtype, tokenizer;
};

void set_file_type(GgufWriter& g, const Plan& plan) {
  g.set_u32("general.file_type", plan.file_type);
  if (plan.base != GgmlType::kF32 && plan.base != GgmlType::kF16 && plan.base != GgmlType::kBF16)
    g.set_u32("general.quantization_version", 2);
}

void check_output(const std::string& in, const std::string& out) {
  std::error_code ec;
  if (fs::path(out).extension() != ".gguf") fail("the output '{}' must end in .gguf", out);
  if (fs::exists(out, ec) && fs::equivalent(in, out, ec)) fail("the output is the input");
}

void report(const GgufWriter& g, const std::string& out, const std::string& plan) {
  std::printf("wrote %s: %zu tensors, %.1f MiB of tensor data as %s\n", out.c_str(),
              g.tensor_count(), static_cast<double>(g.tensor_bytes()) / (1 << 20), plan.c_str());
}

int run_convert(const ConvertOptions& o) {
  const Plan plan = parse_plan(o.dtype);
  check_output(o.in, o.out);
  if (fs::path(o.in).extension() == ".gguf")
    fail("'{}' is a GGUF already: use `tokenflow quantize IN.gguf OUT.gguf --dtype T`", o.in);
  auto model = load_model(o.in, WeightType::kF32, /*keep_files=*/true);
  const ModelConfig& c = model->config();
  const WeightStore& w = model->weights();
  const std::string arch = gguf_arch(c);
  const bool gpt2 = arch == "gpt2";
  GgufWriter g;
  g.set_string("general.architecture", arch);
  g.set_string("general.name", fs::path(o.in).filename().string());
  set_file_type(g, plan);
  const std::string p = arch + ".";
  g.set_u32(p + "context_length", static_cast<uint32_t>(c.max_seq_len));
  g.set_u32(p + "embedding_length", static_cast<uint32_t>(c.dim));
  g.set_u32(p + "block_count", static_cast<uint32_t>(c.n_layers));
  g.set_u32(p + "feed_forward_length", static_cast<uint32_t>(c.ffn_dim));
  g.set_u32(p + "attention.head_count", static_cast<uint32_t>(c.n_heads));
  if (gpt2) {
    g.set_f32(p + "attention.layer_norm_epsilon", c.norm_eps);
  } else {
    g.set_u32(p + "attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
    g.set_f32(p + "attention.layer_norm_rms_epsilon", c.norm_eps);
    g.set_f32(p + "rope.freq_base", static_cast<float>(c.rope.theta));
    const int64_t rot = c.rope.rot_dim > 0 ? c.rope.rot_dim : c.head_dim;
    g.set_u32(p + "rope.dimension_count", static_cast<uint32_t>(rot));
    write_rope_scaling(g, p, c);
    if (c.head_dim * c.n_heads != c.dim) {
      g.set_u32(p + "attention.key_length", static_cast<uint32_t>(c.head_dim));
      g.set_u32(p + "attention.value_length", static_cast<uint32_t>(c.head_dim));
    }
  }
  if (c.n_experts > 0) {
    g.set_u32(p + "expert_count", static_cast<uint32_t>(c.n_experts));
    g.set_u32(p + "expert_used_count", static_cast<uint32_t>(c.n_experts_used));
    if (arch != "llama" && arch != "olmoe")
      g.set_u32(p + "expert_feed_forward_length", static_cast<uint32_t>(c.expert_ffn_dim));
    if (c.shared_ffn_dim > 0)
      g.set_u32(p + "expert_shared_feed_forward_length", static_cast<uint32_t>(c.shared_ffn_dim));
    // Only where the file's architecture would otherwise imply the other choice.
    if (c.norm_topk_prob != (arch == "llama" || arch == "qwen3moe"))
      g.set_bool(p + "expert_weights_norm", c.norm_topk_prob);
  }
  if (o.tokenizer != "none") {
    const LoadedTokenizer lt = load_tokenizer(o.in, c.vocab_size, o.tokenizer);
    if (!lt.tokenizer)
      fail(ErrorKind::kNotFound,
           "convert: no tokenizer found for '{}': pass --tokenizer PATH (or --tokenizer none)",
           o.in);
    write_vocab(g, lt, c.vocab_size);
  } else {
    if (c.bos_id >= 0) g.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(c.bos_id));
    if (c.eos_id >= 0) g.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(c.eos_id));
  }
  // llama.cpp's "llama" rotates adjacent pairs: Q and K rows stored for rotating halves (as
  // Hugging Face stores them) are permuted, per head, row i of the first half to 2i and of the
  // second half to 2i + 1.
  const bool permute_qk = arch == "llama" && c.rope_style == kernels::RopeStyle::kHalf;
  if (permute_qk && c.rope.rot_dim > 0 && c.rope.rot_dim != c.head_dim)
    fail(ErrorKind::kUnsupported,
         "convert: partial rotary dimensions in a 'llama' GGUF are not written yet");
  const bool tied = c.tied_embeddings && !w.has("lm_head.weight");
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (!c.is_moe(l)) continue;
    static const char* stacked[] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                    "ffn_down_exps.weight"};
    for (int which = 0; which < 3; ++which) {
      const int64_t rows = which == 2 ? c.dim : c.expert_ffn_dim;
      const int64_t cols = which == 2 ? c.expert_ffn_dim : c.dim;
      const std::string gname = "blk." + std::to_string(l) + "." + stacked[which];
      const GgmlType t = type_for(plan, gname, rows, cols, c.n_layers);
      g.add_tensor(gname, {cols, rows, c.n_experts}, t, encode(t, expert_stack(w, c, l, which)));
    }
  }
  for (const std::string& name : w.names()) {
    const std::string gname = gguf_name(gpt2, name);
    if (gname.empty()) continue;
    if (tied && gname == "output.weight") continue;
    const TensorView& v = w.get(name);
    if (v.dtype != DType::kF32 && v.dtype != DType::kF16 && v.dtype != DType::kBF16) {
      fail(ErrorKind::kUnsupported,
           "convert: tensor '{}' is stored as {} (a packed checkpoint?); convert the unpacked "
           "one",
           name, dtype_name(v.dtype));
    }
    std::vector<float> f(static_cast<size_t>(v.numel()));
    convert_to_f32(v.dtype, v.data, f.size(), f.data());
    int64_t rows = v.shape.rank >= 2 ? v.shape.dims[0] : 1;
    int64_t cols = v.shape.rank >= 2 ? v.shape.dims[1] : v.shape.numel();
    const bool conv1d = gpt2 && v.shape.rank == 2 && gname.find("blk.") == 0;
    if (conv1d) {  // Conv1D [in, out] -> [out, in]
      std::vector<float> t(f.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t col = 0; col < cols; ++col) t[col * rows + r] = f[r * cols + col];
      f.swap(t);
      std::swap(rows, cols);
    }
    const bool q = gname.find(".attn_q.weight") != std::string::npos;
    if (permute_qk && (q || gname.find(".attn_k.weight") != std::string::npos)) {
      const int64_t heads = q ? c.n_heads : c.n_kv_heads, half = rows / heads / 2;
      std::vector<float> t(f.size());
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i)
          for (int s = 0; s < 2; ++s) {
            const int64_t from = h * 2 * half + s * half + i, to = h * 2 * half + 2 * i + s;
            std::memcpy(t.data() + to * cols, f.data() + from * cols, cols * sizeof(float));
          }
      f.swap(t);
    }
    const bool vector = v.shape.rank < 2 || gname.ends_with("ffn_gate_inp_shexp.weight");
    const GgmlType t = type_for(plan, gname, vector ? 1 : rows, cols, c.n_layers);
    std::vector<int64_t> ne =
        vector ? std::vector<int64_t>{rows * cols} : std::vector<int64_t>{cols, rows};
    g.add_tensor(gname, std::move(ne), t, encode(t, f));
  }
  g.write(o.out);
  report(g, o.out, plan.name);
  return 0;
}

}  // namespace

// GGUF -> GGUF with another --dtype: every tensor dequantized and quantized again by the plan,
// the metadata kept (general.file_type and quantization_version updated).
int requantize_gguf(const std::string& in, const std::string& out, const std::string& dtype) {
  const Plan plan = parse_plan(dtype);
  check_output(in, out);
  const MappedFile file = MappedFile::open(in);
  const GgufFile f = parse_gguf(file.data(), file.size(), in);
  const std::string arch = f.get_string("general.architecture");
  const int64_t n_layers = static_cast<int64_t>(f.get_uint(arch + ".block_count", 0));
  GgufWriter g;
  for (const auto& [key, value] : f.metadata) g.set(key, value);
  set_file_type(g, plan);
  for (const GgufTensorInfo& t : f.tensors) {
    if (!ggml_can_dequantize(t.type)) {
      const auto info = ggml_type_info(static_cast<uint32_t>(t.type));
      fail(ErrorKind::kUnsupported, "'{}': tensor '{}' is {}, a type tokenflow cannot read", in,
           t.name, info ? info->name : "?");
    }
    std::vector<float> v(static_cast<size_t>(t.numel()));
    dequantize_ggml(t.type, file.data() + f.data_offset + t.offset, t.numel(), v.data());
    const int64_t cols = t.ne[0], rows = t.numel() / std::max<int64_t>(cols, 1);
    const GgmlType type = type_for(plan, t.name, t.ne.size() >= 2 ? rows : 1, cols, n_layers);
    g.add_tensor(t.name, t.ne, type, encode(type, v));
  }
  g.write(out);
  report(g, out, plan.name);
  return 0;
}

Action add_convert(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  app.add_option("input", o->in, "Hugging Face model directory or llama2.c checkpoint")->required();
  app.add_option("output", o->out, "the GGUF file to write")->required();
  app.add_option("--dtype", o->dtype,
                 "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k_s, q4_k_m, q5_k_s, q5_k_m, "
                 "q6_k or iq4_nl")
      ->default_val("f16");
  app.add_option("--tokenizer", o->tokenizer,
                 "the tokenizer to write into the file (default: the model's; 'none': no "
                 "vocabulary)");
  return [o] { return run_convert(*o); };
}

}  // namespace tf::cli
