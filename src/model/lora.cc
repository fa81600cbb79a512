#include "model/lora.h"

#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "model/gguf.h"
#include "model/gguf_model.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/torch_checkpoint.h"

namespace tf {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr std::array<const char*, kLoraTargets> kNames = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
constexpr std::array<const char*, kLoraTargets> kBlocks = {
    "self_attn", "self_attn", "self_attn", "self_attn", "mlp", "mlp", "mlp"};

// "PREFIX" N "." REST -> (N, REST); false when name is not one.
bool split_layer(const std::string& name, std::string_view prefix, int64_t& layer,
                 std::string& rest) {
  if (name.rfind(prefix, 0) != 0) return false;
  size_t at = prefix.size(), end = at;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  if (end == at || end - at > 6 || end >= name.size() || name[end] != '.') return false;
  layer = std::stoll(name.substr(at, end - at));
  rest = name.substr(end + 1);
  return true;
}

// What one adapter tensor corrects: a projection the model applies (LoraTarget), or a fused
// one whose rows are several of them (Phi-3's qkv_proj and gate_up_proj).
constexpr int kFusedQkv = kLoraTargets, kFusedGateUp = kLoraTargets + 1;

// "model.layers.N.BLOCK.MODULE.lora_A.weight" -> (N, unit, 'A'); false when it is not one.
bool parse_name(const std::string& name, int64_t& layer, int& unit, char& which) {
  std::string rest;
  if (!split_layer(name, "model.layers.", layer, rest)) return false;
  for (char w : {'A', 'B'}) {
    for (int t = 0; t < kLoraTargets; ++t) {
      if (rest == fmt::format("{}.{}.lora_{}.weight", kBlocks[t], kNames[t], w)) {
        unit = t;
        which = w;
        return true;
      }
    }
    for (const auto& [module, u] : {std::pair{"self_attn.qkv_proj", kFusedQkv},
                                    std::pair{"mlp.gate_up_proj", kFusedGateUp}}) {
      if (rest == fmt::format("{}.lora_{}.weight", module, w)) {
        unit = u;
        which = w;
        return true;
      }
    }
  }
  return false;
}

uint64_t next_adapter_id() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

// llama.cpp's adapter names: "blk.N.TENSOR.weight.lora_a" (convert_lora_to_gguf.py).
bool parse_gguf_name(const std::string& name, int64_t& layer, int& unit, char& which) {
  constexpr std::array<const char*, kLoraTargets + 1> kGguf = {
      "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "attn_qkv"};
  std::string rest;
  if (!split_layer(name, "blk.", layer, rest)) return false;
  for (int t = 0; t < static_cast<int>(kGguf.size()); ++t) {
    for (char w : {'a', 'b'}) {
      if (rest == fmt::format("{}.weight.lora_{}", kGguf[static_cast<size_t>(t)], w)) {
        unit = t;
        which = w == 'a' ? 'A' : 'B';
        return true;
      }
    }
  }
  return false;
}

// A unit's name in messages: PEFT's module name.
std::string unit_name(int unit) {
  if (unit == kFusedQkv) return "qkv_proj";
  if (unit == kFusedGateUp) return "gate_up_proj";
  return kNames[static_cast<size_t>(unit)];
}

}  // namespace

const char* lora_target_name(LoraTarget t) {
  return kNames[static_cast<size_t>(t)];
}

std::optional<std::array<int64_t, 2>> lora_target_shape(const ModelConfig& c, int64_t layer,
                                                        LoraTarget t) {
  if (c.arch != Arch::kLlama || layer < 0 || layer >= c.n_layers) return std::nullopt;
  switch (t) {
    case LoraTarget::kQ:
    case LoraTarget::kK:
    case LoraTarget::kV:
    case LoraTarget::kO:
      if (c.is_linear(layer)) return std::nullopt;
      if (t == LoraTarget::kQ) return std::array{c.q_dim() * (c.gated_attention ? 2 : 1), c.dim};
      if (t == LoraTarget::kO) return std::array{c.dim, c.q_dim()};
      return std::array{c.kv_dim(), c.dim};
    case LoraTarget::kGate:
    case LoraTarget::kUp:
    case LoraTarget::kDown:
      if (c.is_moe(layer)) return std::nullopt;
      if (t == LoraTarget::kDown) return std::array{c.dim, c.ffn_dim};
      return std::array{c.ffn_dim, c.dim};
  }
  return std::nullopt;
}

std::vector<std::string> LoraAdapter::targets() const {
  std::vector<std::string> out;
  for (int t = 0; t < kLoraTargets; ++t) {
    for (const auto& l : layers_) {
      if (l[static_cast<size_t>(t)]) {
        out.emplace_back(kNames[static_cast<size_t>(t)]);
        break;
      }
    }
  }
  return out;
}

std::shared_ptr<const LoraAdapter> LoraAdapter::load(const std::string& path, const Model& base) {
  const ModelConfig& c = base.config();
  const fs::path dir(path);
  std::error_code ec;
  if (dir.extension() == ".gguf" && fs::is_regular_file(dir, ec)) return load_gguf(path, base);
  const fs::path cfg_path = dir / "adapter_config.json";
  if (!fs::is_directory(dir, ec) || !fs::exists(cfg_path, ec))
    fail(ErrorKind::kNotFound,
         "LoRA adapter '{}': expected a PEFT adapter directory (adapter_config.json and "
         "adapter_model.safetensors) or a GGUF adapter file",
         path);
  const std::string src = cfg_path.string();
  const json j = parse_json(read_file(src), src);
  if (!j.is_object()) fail("{}: expected a JSON object", src);
  auto field = [&](const char* key) -> const json* {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* p = field("peft_type"); p && (!p->is_string() || p->get<std::string>() != "LORA"))
    fail(ErrorKind::kUnsupported, "{}: peft_type {} is not a LoRA adapter", src, p->dump());
  const json* r = field("r");
  if (!r || !r->is_number_integer() || r->get<int64_t>() < 1 || r->get<int64_t>() > 4096)
    fail("{}: 'r' (the rank) must be an integer from 1 to 4096", src);
  const json* alpha = field("lora_alpha");
  if (alpha && !alpha->is_number()) fail("{}: 'lora_alpha' must be a number", src);
  const json* rs = field("use_rslora");
  if (rs && !rs->is_boolean()) fail("{}: 'use_rslora' must be true or false", src);
  if (const json* b = field("bias"); b && (!b->is_string() || b->get<std::string>() != "none"))
    fail(ErrorKind::kUnsupported,
         "{}: bias {} (the adapter trains biases): only adapters with bias \"none\" are applied",
         src, b->dump());
  if (const json* m = field("modules_to_save"); m && !(m->is_array() && m->empty()))
    fail(ErrorKind::kUnsupported,
         "{}: modules_to_save {} (whole modules trained beside the adapter, such as a new LM "
         "head) is not supported: merge the adapter into its base instead",
         src, m->dump());
  for (const char* k : {"use_dora", "fan_in_fan_out"}) {
    if (const json* v = field(k); v && !(v->is_boolean() && !v->get<bool>()))
      fail(ErrorKind::kUnsupported, "{}: '{}' {} is not supported", src, k, v->dump());
  }
  if (const json* a = field("alpha_pattern"); a && !(a->is_object() && a->empty()))
    fail(ErrorKind::kUnsupported, "{}: 'alpha_pattern' (a lora_alpha per module) is not supported",
         src);
  if (!base.supports_lora())
    fail(ErrorKind::kUnsupported,
         "LoRA adapter '{}': the base model {} takes no adapters (they apply to the decoder-only "
         "transformers: Llama, Mistral, Qwen, Gemma, Phi and their kin)",
         path, c.architecture);

  std::shared_ptr<LoraAdapter> ad(new LoraAdapter());
  ad->base_ = &base;
  ad->id_ = next_adapter_id();
  ad->path_ = path;
  ad->rank_ = r->get<int64_t>();
  ad->alpha_ = alpha ? alpha->get<float>() : 8.0f;  // PEFT's default
  ad->rslora_ = rs && rs->get<bool>();
  if (const json* b = field("base_model_name_or_path"); b && b->is_string())
    ad->base_model_ = b->get<std::string>();
  ad->layers_.resize(static_cast<size_t>(c.n_layers));

  const fs::path st = dir / "adapter_model.safetensors", bin = dir / "adapter_model.bin";
  if (fs::exists(st, ec)) {
    load_safetensors_file(st.string(), ad->store_);
  } else if (fs::exists(bin, ec)) {
    load_torch_file(bin.string(), ad->store_);
  } else {
    fail(ErrorKind::kNotFound, "LoRA adapter '{}': no adapter_model.safetensors (or .bin)", path);
  }
  ad->pair_up(c, false, false);
  return ad;
}

std::shared_ptr<const LoraAdapter> LoraAdapter::load_gguf(const std::string& path,
                                                          const Model& base) {
  const ModelConfig& c = base.config();
  std::shared_ptr<LoraAdapter> ad(new LoraAdapter());
  const GgufFile f = load_gguf_tensors(path, ad->store_);
  const std::string type = f.get_string("general.type", "");
  if (type != "adapter")
    fail(
        "'{}': general.type is '{}', not a GGUF adapter (convert_lora_to_gguf.py writes "
        "'adapter')",
        path, type);
  if (const std::string t = f.get_string("adapter.type", ""); t != "lora")
    fail(ErrorKind::kUnsupported, "'{}': adapter.type '{}' is not a LoRA adapter", path, t);
  if (f.find("adapter.alora.invocation_tokens"))
    fail(ErrorKind::kUnsupported,
         "'{}': an activated LoRA (adapter.alora.invocation_tokens) is not supported", path);
  if (!base.supports_lora())
    fail(ErrorKind::kUnsupported, "LoRA adapter '{}': the base model {} takes no adapters", path,
         c.architecture);
  ad->base_ = &base;
  ad->id_ = next_adapter_id();
  ad->path_ = path;
  ad->alpha_ = static_cast<float>(f.get_float("adapter.lora.alpha", 0.0));
  ad->layers_.resize(static_cast<size_t>(c.n_layers));
  ad->pair_up(c, true, f.get_string("general.architecture", "") == "llama");
  return ad;
}

void LoraAdapter::pair_up(const ModelConfig& c, bool gguf, bool interleaved) {
  LoraAdapter* ad = this;
  // A and B compute in f32 over an f32 base (a GGUF kept in its stored types included), else in
  // f16 (a bf16, f16, int8 or q4 base): half the bytes a decode step reads for every adapter
  // group, and f16's float panels multiply the thin products (rank 16: 4 rows by [16, in] and
  // by [out, 16]) in 0.5-0.8x the time of bf16's dot products (bench_kernels lora_step),
  // with three more bits of mantissa.
  using kernels::WeightType;
  const WeightType type =
      base_->weights().compute_type() == WeightType::kF32 ? WeightType::kF32 : WeightType::kF16;
  ad->store_.set_compute_type(type);
  const int64_t elem = type == WeightType::kF32 ? 4 : 2;
  const bool base_interleaved = c.rope_style == kernels::RopeStyle::kInterleaved;
  const std::string file = ad->store_.sources();
  // Each projection's pair, by PEFT's names (base_model.model. + the base's tensor name) or
  // llama.cpp's (blk.N.attn_q.weight.lora_a); a base that fuses q/k/v (and gate/up: Phi-3)
  // takes adapters of its fused projections, whose B rows are split into the parts it applies.
  std::map<std::pair<int64_t, int>, std::array<std::string, 2>> pairs;
  for (const std::string& stored : ad->store_.names()) {
    std::string name = stored;
    if (name.rfind("base_model.model.", 0) == 0) name = name.substr(17);
    if (!c.text_model_prefix.empty() && name.rfind(c.text_model_prefix, 0) == 0)
      name = "model." + name.substr(c.text_model_prefix.size());
    int64_t layer = 0;
    int unit = 0;
    char which = 0;
    if (!(gguf ? parse_gguf_name(name, layer, unit, which) : parse_name(name, layer, unit, which)))
      fail(ErrorKind::kUnsupported,
           "{}: tensor '{}' is not a LoRA pair of a projection tokenflow applies (q/k/v/o_proj, "
           "gate/up/down_proj, a fused qkv_proj / gate_up_proj: lora_A / lora_B weights)",
           file, stored);
    // llama.cpp's phi3 keeps gate and up in ffn_up.
    if (gguf && c.fused_qkv && unit == static_cast<int>(LoraTarget::kUp)) unit = kFusedGateUp;
    if (layer >= c.n_layers)
      fail("{}: tensor '{}': the base has {} layers", file, stored, c.n_layers);
    const bool fused_unit = unit == kFusedQkv || unit == kFusedGateUp;
    const bool fused_part = unit != static_cast<int>(LoraTarget::kO) &&
                            unit != static_cast<int>(LoraTarget::kDown) && !fused_unit;
    if (fused_unit && !c.fused_qkv)
      fail(ErrorKind::kUnsupported, "{}: tensor '{}': the base has no fused {} (it has {})", file,
           stored, unit_name(unit),
           unit == kFusedQkv ? "q_proj, k_proj and v_proj" : "gate_proj and up_proj");
    if (fused_part && c.fused_qkv)
      fail(ErrorKind::kUnsupported,
           "{}: tensor '{}': the base fuses q/k/v into qkv_proj and gate/up into gate_up_proj, "
           "which its adapters correct",
           file, stored);
    const LoraTarget first = unit == kFusedQkv      ? LoraTarget::kQ
                             : unit == kFusedGateUp ? LoraTarget::kGate
                                                    : static_cast<LoraTarget>(unit);
    if (!lora_target_shape(c, layer, first))
      fail(ErrorKind::kUnsupported,
           "{}: tensor '{}': layer {} of the base has no dense {} (a linear-attention layer or "
           "experts)",
           file, stored, layer, unit_name(unit));
    pairs[{layer, unit}][which == 'A' ? 0 : 1] = stored;
  }
  if (pairs.empty()) fail("{}: the adapter holds no LoRA weights", file);
  for (const auto& [key, names] : pairs) {
    const auto [layer, unit] = key;
    // The parts this unit's B rows hold: (target, first row, rows).
    std::vector<std::tuple<LoraTarget, int64_t, int64_t>> parts;
    if (unit == kFusedQkv) {
      const int64_t q = lora_target_shape(c, layer, LoraTarget::kQ)->at(0), kv = c.kv_dim();
      parts = {{LoraTarget::kQ, 0, q}, {LoraTarget::kK, q, kv}, {LoraTarget::kV, q + kv, kv}};
    } else if (unit == kFusedGateUp) {
      parts = {{LoraTarget::kGate, 0, c.ffn_dim}, {LoraTarget::kUp, c.ffn_dim, c.ffn_dim}};
    } else {
      const LoraTarget t = static_cast<LoraTarget>(unit);
      parts = {{t, 0, lora_target_shape(c, layer, t)->at(0)}};
    }
    const int64_t in = lora_target_shape(c, layer, std::get<0>(parts[0]))->at(1);
    const int64_t out = std::get<1>(parts.back()) + std::get<2>(parts.back());
    const std::string what = unit_name(unit);
    for (int w = 0; w < 2; ++w)
      if (names[static_cast<size_t>(w)].empty())
        fail("{}: layer {} {} has lora_{} but not lora_{}", file, layer, what, w ? 'A' : 'B',
             w ? 'B' : 'A');
    const Shape a = ad->store_.get(names[0]).shape, b = ad->store_.get(names[1]).shape;
    const int64_t rank = a.rank == 2 ? a[0] : 0;
    if (a.rank != 2 || rank < 1 || rank > 4096 || a[1] != in)
      fail("{}: tensor '{}' is {}; the base's {} takes [rank, {}]", file, names[0], a.to_string(),
           what, in);
    if (!(b == Shape{out, rank}))
      fail("{}: tensor '{}' is {}; expected [{}, {}] (the base's {} out, the rank of lora_A)", file,
           names[1], b.to_string(), out, rank, what);
    // s = alpha / r (rsLoRA: alpha / sqrt(r)), r this projection's rank (rank_pattern's); a
    // GGUF adapter without an alpha is applied as it is (llama.cpp's scale 1).
    const float s = gguf && ad->alpha_ == 0.0f
                        ? 1.0f
                        : ad->alpha_ / (ad->rslora_ ? std::sqrt(static_cast<float>(rank))
                                                    : static_cast<float>(rank));
    if (ad->rank_ == 0) ad->rank_ = rank;
    const float* bv = ad->store_.f32(names[1], b);
    const kernels::WeightMatrix a_matrix = ad->store_.matrix(names[0], rank, in);
    ad->bytes_ += static_cast<size_t>(rank * in * elem);  // A once, shared by a fused unit's parts
    for (const auto& [t, row0, rows] : parts) {
      std::vector<float> scaled(bv + row0 * rank, bv + (row0 + rows) * rank);
      for (float& v : scaled) v *= s;
      // q and k rows in the base's rotary layout: a llama.cpp "llama" file (and a llama2.c
      // checkpoint) keeps each head's rows interleaved for its adjacent-pair RoPE, PEFT's are
      // transformers' halves (row i pairs with i + hd/2); B's rows follow the base's.
      if ((t == LoraTarget::kQ || t == LoraTarget::kK) && interleaved != base_interleaved) {
        const int64_t hd = c.head_dim, heads = rows / hd, half = hd / 2;
        std::vector<float> moved(scaled.size());
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t i = 0; i < half; ++i)
            for (int64_t pair = 0; pair < 2; ++pair) {
              const int64_t halves = h * hd + i + pair * half, inter = h * hd + 2 * i + pair;
              const int64_t from = interleaved ? inter : halves, to = interleaved ? halves : inter;
              std::copy_n(scaled.data() + from * rank, rank, moved.data() + to * rank);
            }
        scaled = std::move(moved);
      }
      const std::string scaled_name = names[1] + "#scaled#" + kNames[static_cast<size_t>(t)];
      ad->store_.add_f32(scaled_name, Shape{rows, rank}, std::move(scaled),
                         ad->store_.file_index_of(names[1]));
      LoraPair p;
      p.a = a_matrix;
      p.b = ad->store_.matrix(scaled_name, rows, rank);
      p.rank = rank;
      ad->bytes_ += static_cast<size_t>(rows * rank * elem);
      ad->layers_[static_cast<size_t>(layer)][static_cast<size_t>(t)] = p;
    }
  }
  ad->store_.close_files();
  Sha256 h;
  h.update(ad->path_).update_u64(static_cast<uint64_t>(ad->rank_));
  for (size_t l = 0; l < ad->layers_.size(); ++l) {
    for (size_t t = 0; t < ad->layers_[l].size(); ++t) {
      const auto& p = ad->layers_[l][t];
      if (!p) continue;
      h.update_u64(l * kLoraTargets + t);
      for (const kernels::WeightMatrix* m : {&p->a, &p->b})
        h.update(m->data, static_cast<size_t>(m->bytes()));
    }
  }
  ad->digest_ = h.digest();
}

}  // namespace tf
