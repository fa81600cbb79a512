#include "model/llama2c.h"

#include <cstring>

#include "core/error.h"
#include "core/mapped_file.h"
#include "model/weight_store.h"

namespace tf {
namespace {

constexpr uint64_t kHeaderBytes = 7 * 4;
constexpr uint32_t kVersionedMagic = 0x616b3432;  // "ak42": llama2.c export versions 1 and 2

}  // namespace

Llama2cLayout parse_llama2c(const uint8_t* data, size_t size, const std::string& path) {
  if (size < kHeaderBytes) fail("'{}': too short for a llama2.c checkpoint ({} bytes)", path, size);
  int32_t h[7];
  std::memcpy(h, data, sizeof(h));
  if (static_cast<uint32_t>(h[0]) == kVersionedMagic) {
    fail(ErrorKind::kUnsupported,
         "'{}': llama2.c export format version {} is not supported (only the legacy version 0)",
         path, h[1]);
  }
  Llama2cLayout L;
  ModelConfig& c = L.config;
  c.arch = Arch::kLlama;
  c.architecture = "LlamaForCausalLM";
  c.format = "llama2c";
  c.dim = h[0];
  c.ffn_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  L.shared_classifier = h[5] > 0;
  c.vocab_size = h[5] == INT32_MIN ? 0 : (h[5] < 0 ? -static_cast<int64_t>(h[5]) : h[5]);
  c.max_seq_len = h[6];
  c.head_dim = (c.n_heads > 0 && c.dim % c.n_heads == 0) ? c.dim / c.n_heads : 0;
  c.norm_eps = 1e-5f;
  c.rope.theta = 10000.0;
  c.rope_style = kernels::RopeStyle::kInterleaved;
  c.tied_embeddings = L.shared_classifier;
  c.qkv_bias = false;
  c.bos_id = 1;
  c.eos_id = 2;
  if (c.n_heads > 0 && c.dim % c.n_heads != 0) {
    fail("'{}': dim {} is not divisible by n_heads {}", path, c.dim, c.n_heads);
  }
  c.validate("'" + path + "'");

  // All sizes below are bounded by validate(), so 64-bit arithmetic cannot overflow.
  const uint64_t dim = c.dim, hidden = c.ffn_dim, layers = c.n_layers, vocab = c.vocab_size;
  const uint64_t kv_dim = c.kv_dim(), q_dim = c.q_dim(), seq = c.max_seq_len;
  uint64_t off = 0;
  auto take = [&](uint64_t n) {
    const uint64_t at = off;
    off += n;
    return at;
  };
  L.embedding = take(vocab * dim);
  L.rms_att = take(layers * dim);
  L.wq = take(layers * q_dim * dim);
  L.wk = take(layers * kv_dim * dim);
  L.wv = take(layers * kv_dim * dim);
  L.wo = take(layers * dim * q_dim);
  L.rms_ffn = take(layers * dim);
  L.w1 = take(layers * hidden * dim);
  L.w2 = take(layers * dim * hidden);
  L.w3 = take(layers * hidden * dim);
  L.rms_final = take(dim);
  L.freq_real = take(seq * c.head_dim);  // cos and sin tables, skipped: we compute RoPE ourselves
  L.wcls = L.shared_classifier ? L.embedding : take(vocab * dim);
  L.total_floats = off;
  const uint64_t expected = kHeaderBytes + 4 * L.total_floats;
  if (expected != size) {
    fail(
        "'{}': header (dim {}, hidden {}, layers {}, heads {}, kv heads {}, vocab {}, seq_len {}) "
        "implies {} bytes, but the file has {}",
        path, c.dim, c.ffn_dim, c.n_layers, c.n_heads, c.n_kv_heads, h[5], c.max_seq_len, expected,
        size);
  }
  return L;
}

ModelConfig load_llama2c(const std::string& path, WeightStore& store) {
  MappedFile file = MappedFile::open(path);
  const Llama2cLayout L = parse_llama2c(file.data(), file.size(), path);
  const float* base = reinterpret_cast<const float*>(file.data() + kHeaderBytes);
  const ModelConfig& c = L.config;
  const int index = store.add_file(std::move(file));
  auto add = [&](const std::string& name, uint64_t at, Shape shape) {
    store.add(name, TensorView{DType::kF32, shape, base + at}, index);
  };
  const int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim();
  add("model.embed_tokens.weight", L.embedding, {c.vocab_size, c.dim});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", L.rms_att + l * c.dim, {c.dim});
    add(p + "self_attn.q_proj.weight", L.wq + l * q_dim * c.dim, {q_dim, c.dim});
    add(p + "self_attn.k_proj.weight", L.wk + l * kv_dim * c.dim, {kv_dim, c.dim});
    add(p + "self_attn.v_proj.weight", L.wv + l * kv_dim * c.dim, {kv_dim, c.dim});
    add(p + "self_attn.o_proj.weight", L.wo + l * c.dim * q_dim, {c.dim, q_dim});
    add(p + "post_attention_layernorm.weight", L.rms_ffn + l * c.dim, {c.dim});
    add(p + "mlp.gate_proj.weight", L.w1 + l * c.ffn_dim * c.dim, {c.ffn_dim, c.dim});
    add(p + "mlp.down_proj.weight", L.w2 + l * c.dim * c.ffn_dim, {c.dim, c.ffn_dim});
    add(p + "mlp.up_proj.weight", L.w3 + l * c.ffn_dim * c.dim, {c.ffn_dim, c.dim});
  }
  add("model.norm.weight", L.rms_final, {c.dim});
  if (!L.shared_classifier) add("lm_head.weight", L.wcls, {c.vocab_size, c.dim});
  return c;
}

}  // namespace tf
