#include "model/bert.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/rope.h"
#include "model/transformer.h"

namespace tf {
namespace {

struct BertLayer {
  kernels::WeightMatrix q, k, v, o, up, gate, down;  // gate: a gated MLP's (NomicBERT's fc12)
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr, *bup = nullptr,
              *bgate = nullptr, *bdown = nullptr;
  const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
};

class BertModel final : public EncoderModel {
 public:
  BertModel(ModelConfig config, WeightStore weights)
      : EncoderModel(std::move(config), std::move(weights)) {
    const ModelConfig& c = config_;
    WeightStore& w = weights_;
    if (c.encoder_kind == ModelConfig::EncoderKind::kNomic) {
      load_nomic();
    } else {
      load_bert();
    }
    const std::string& P = prefix_;
    using Classifier = ModelConfig::Classifier;
    if (c.classifier == Classifier::kBertPooler) {
      head_dense_ = w.matrix(P + "pooler.dense.weight", c.dim, c.dim);
      head_dense_b_ = w.f32(P + "pooler.dense.bias", {c.dim});
      head_out_ = w.matrix("classifier.weight", c.num_labels, c.dim);
      head_out_b_ = w.f32("classifier.bias", {c.num_labels});
    } else if (c.classifier == Classifier::kRobertaHead) {
      head_dense_ = w.matrix("classifier.dense.weight", c.dim, c.dim);
      head_dense_b_ = w.f32("classifier.dense.bias", {c.dim});
      head_out_ = w.matrix("classifier.out_proj.weight", c.num_labels, c.dim);
      head_out_b_ = w.f32("classifier.out_proj.bias", {c.num_labels});
    }
  }

 private:
  void load_bert() {
    const ModelConfig& c = config_;
    WeightStore& w = weights_;
    // BertModel saved alone has no prefix; a ForSequenceClassification (or ForMaskedLM) model
    // keeps its encoder under "bert." or "roberta.".
    for (const char* p : {"", "bert.", "roberta."}) {
      if (w.has(std::string(p) + "embeddings.word_embeddings.weight")) prefix_ = p;
    }
    const std::string& P = prefix_;
    // LayerNorms: weight/bias, or the original TF conversion's gamma/beta.
    auto ln = [&](const std::string& name, const float*& g, const float*& b) {
      const bool old = !w.has(name + ".weight") && w.has(name + ".gamma");
      g = w.f32(name + (old ? ".gamma" : ".weight"), {c.dim});
      b = w.f32(name + (old ? ".beta" : ".bias"), {c.dim});
    };
    word_ = w.matrix(P + "embeddings.word_embeddings.weight", c.vocab_size, c.dim);
    const bool jina = c.encoder_kind == ModelConfig::EncoderKind::kJina;
    if (!jina)
      pos_ = w.f32(P + "embeddings.position_embeddings.weight",
                   {c.max_seq_len + c.position_offset, c.dim});
    if (c.type_vocab_size > 0)
      type_ = w.f32(P + "embeddings.token_type_embeddings.weight", {c.type_vocab_size, c.dim});
    ln(P + "embeddings.LayerNorm", emb_ln_w_, emb_ln_b_);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string p = P + "encoder.layer." + std::to_string(l) + ".";
      BertLayer L;
      L.q = w.matrix(p + "attention.self.query.weight", c.dim, c.dim);
      L.bq = w.f32(p + "attention.self.query.bias", {c.dim});
      L.k = w.matrix(p + "attention.self.key.weight", c.dim, c.dim);
      L.bk = w.f32(p + "attention.self.key.bias", {c.dim});
      L.v = w.matrix(p + "attention.self.value.weight", c.dim, c.dim);
      L.bv = w.f32(p + "attention.self.value.bias", {c.dim});
      L.o = w.matrix(p + "attention.output.dense.weight", c.dim, c.dim);
      L.bo = w.f32(p + "attention.output.dense.bias", {c.dim});
      ln(p + "attention.output.LayerNorm", L.ln1_w, L.ln1_b);
      if (jina) {
        // GEGLU: gated_layers [gate; up] without a bias (or llama.cpp's two halves), wo, and
        // the MLP's LayerNorm.
        if (w.has(p + "mlp.gated_layers.weight")) {
          const auto gated =
              w.matrix(p + "mlp.gated_layers.weight", 2 * c.ffn_dim, c.dim, false, c.ffn_dim);
          L.gate = gated.rows(0, c.ffn_dim);
          L.up = gated.rows(c.ffn_dim, c.ffn_dim);
        } else {
          L.gate = w.matrix(p + "mlp.gated_layers_w.weight", c.ffn_dim, c.dim);
          L.up = w.matrix(p + "mlp.gated_layers_v.weight", c.ffn_dim, c.dim);
        }
        L.down = w.matrix(p + "mlp.wo.weight", c.dim, c.ffn_dim);
        L.bdown = w.f32(p + "mlp.wo.bias", {c.dim});
        ln(p + "mlp.layernorm", L.ln2_w, L.ln2_b);
      } else {
        L.up = w.matrix(p + "intermediate.dense.weight", c.ffn_dim, c.dim);
        L.bup = w.f32(p + "intermediate.dense.bias", {c.ffn_dim});
        L.down = w.matrix(p + "output.dense.weight", c.dim, c.ffn_dim);
        L.bdown = w.f32(p + "output.dense.bias", {c.dim});
        ln(p + "output.LayerNorm", L.ln2_w, L.ln2_b);
      }
      layers_.push_back(L);
    }
    if (jina) alibi_slopes_ = alibi_slopes(c.n_heads);
  }

  // ALiBi's head slopes (Press et al. 2022): for n a power of two, 2^(-8 (h + 1) / n); else
  // those of the power of two below n, then every other slope of twice that for the rest.
  static std::vector<float> alibi_slopes(int64_t n) {
    auto pow2 = [](int64_t m) {
      std::vector<float> out;
      for (int64_t h = 0; h < m; ++h)
        out.push_back(static_cast<float>(std::exp2(-8.0 * static_cast<double>(h + 1) / m)));
      return out;
    };
    int64_t below = 1;
    while (below * 2 <= n) below *= 2;
    std::vector<float> out = pow2(below);
    const std::vector<float> more = pow2(2 * below);
    for (int64_t h = 0; static_cast<int64_t>(out.size()) < n; h += 2) out.push_back(more[h]);
    return out;
  }

  // NomicBERT's names (nomic-ai's NomicBertModel; under "bert." in its pre-training model):
  // embeddings (word, token type), emb_ln, per layer attn.Wqkv [q; k; v], attn.out_proj, norm1,
  // mlp.fc11 (value) / fc12 (gate) / fc2 (or fc1 / fc2 ungated), norm2; biases optional.
  void load_nomic() {
    const ModelConfig& c = config_;
    WeightStore& w = weights_;
    if (!w.has("embeddings.word_embeddings.weight") &&
        w.has("bert.embeddings.word_embeddings.weight"))
      prefix_ = "bert.";
    const std::string& P = prefix_;
    auto bias = [&](const std::string& name, int64_t n) {
      return w.has(name) ? w.f32(name, {n}) : nullptr;
    };
    word_ = w.matrix(P + "embeddings.word_embeddings.weight", c.vocab_size, c.dim);
    if (c.type_vocab_size > 0)
      type_ = w.f32(P + "embeddings.token_type_embeddings.weight", {c.type_vocab_size, c.dim});
    emb_ln_w_ = w.f32(P + "emb_ln.weight", {c.dim});
    emb_ln_b_ = w.f32(P + "emb_ln.bias", {c.dim});
    rope_ = Rope(c.rope, c.head_dim, c.rope_style);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string p = P + "encoder.layers." + std::to_string(l) + ".";
      BertLayer L;
      const auto qkv = w.matrix(p + "attn.Wqkv.weight", 3 * c.dim, c.dim, false, c.dim);
      L.q = qkv.rows(0, c.dim);
      L.k = qkv.rows(c.dim, c.dim);
      L.v = qkv.rows(2 * c.dim, c.dim);
      if (const float* b = bias(p + "attn.Wqkv.bias", 3 * c.dim)) {
        L.bq = b;
        L.bk = b + c.dim;
        L.bv = b + 2 * c.dim;
      }
      L.o = w.matrix(p + "attn.out_proj.weight", c.dim, c.dim);
      L.bo = bias(p + "attn.out_proj.bias", c.dim);
      L.ln1_w = w.f32(p + "norm1.weight", {c.dim});
      L.ln1_b = w.f32(p + "norm1.bias", {c.dim});
      const std::string up = c.gated_ffn ? "mlp.fc11" : "mlp.fc1";
      L.up = w.matrix(p + up + ".weight", c.ffn_dim, c.dim);
      L.bup = bias(p + up + ".bias", c.ffn_dim);
      if (c.gated_ffn) {
        L.gate = w.matrix(p + "mlp.fc12.weight", c.ffn_dim, c.dim);
        L.bgate = bias(p + "mlp.fc12.bias", c.ffn_dim);
      }
      L.down = w.matrix(p + "mlp.fc2.weight", c.dim, c.ffn_dim);
      L.bdown = bias(p + "mlp.fc2.bias", c.dim);
      L.ln2_w = w.f32(p + "norm2.weight", {c.dim});
      L.ln2_b = w.f32(p + "norm2.bias", {c.dim});
      layers_.push_back(L);
    }
  }

 protected:
  void run_encoder(std::span<const EncoderInput> inputs, float* hidden, ThreadPool& pool) override {
    const ModelConfig& c = config_;
    const int64_t dim = c.dim, ffn = c.ffn_dim, dk = c.head_dim;
    start_.assign(1, 0);
    for (const EncoderInput& in : inputs)
      start_.push_back(start_.back() + static_cast<int64_t>(in.tokens.size()));
    const int64_t n = start_.back();
    if (n == 0) return;
    for (auto* v : {&q_, &k_, &v_, &att_}) transformer::grow(*v, n * dim);
    transformer::grow(h_, n * ffn);
    if (c.gated_ffn) transformer::grow(up_, n * ffn);
    const bool rotary = c.encoder_kind == ModelConfig::EncoderKind::kNomic;  // else ALiBi or none
    float* x = hidden;  // the residual stream lives in the output
    for (size_t s = 0; s < inputs.size(); ++s) {
      const EncoderInput& in = inputs[s];
      transformer::for_rows(pool, static_cast<int64_t>(in.tokens.size()), [&](int64_t i) {
        float* row = x + (start_[s] + i) * dim;
        word_.dequantize_row(in.tokens[i], row);
        if (pos_) kernels::add(row, pos_ + (c.position_offset + i) * dim, dim);
        if (type_) kernels::add(row, type_ + (in.types.empty() ? 0 : in.types[i]) * dim, dim);
        kernels::layer_norm(row, emb_ln_w_, emb_ln_b_, c.norm_eps, dim, row);
      });
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
    for (const BertLayer& L : layers_) {
      const kernels::MatmulOutput qkv[] = {
          {L.q, L.bq, q_.data()}, {L.k, L.bk, k_.data()}, {L.v, L.bv, v_.data()}};
      kernels::matmul_many(x, n, qkv, pool);
      if (rotary) {  // positions count from each input's start
        transformer::for_rows(pool, n, [&](int64_t i) {
          const int64_t e = input_of(i), len = start_[e + 1] - start_[e];
          rope_.apply_in(q_.data() + i * dim, static_cast<int>(c.n_heads), i - start_[e], len);
          rope_.apply_in(k_.data() + i * dim, static_cast<int>(c.n_heads), i - start_[e], len);
        });
      }
      // Every query row over its own input's keys, all of them (bidirectional).
      transformer::for_rows(pool, n, [&](int64_t i) {
        const int64_t e = input_of(i);
        const int64_t first = start_[e], len = start_[e + 1] - first;
        thread_local std::vector<float> scores, bias;
        scores.resize(static_cast<size_t>(len));
        if (!alibi_slopes_.empty()) bias.resize(static_cast<size_t>(len));
        for (int64_t h = 0; h < c.n_heads; ++h) {
          if (!alibi_slopes_.empty()) {  // symmetric ALiBi: -slope |i - j|
            const float slope = alibi_slopes_[static_cast<size_t>(h)];
            for (int64_t j = 0; j < len; ++j)
              bias[j] = -slope * static_cast<float>(std::abs(i - first - j));
          }
          transformer::attend(q_.data() + i * dim + h * dk, k_.data() + first * dim,
                              v_.data() + first * dim, len, dim, h, dk, scale,
                              alibi_slopes_.empty() ? nullptr : bias.data(), scores.data(),
                              att_.data() + i * dim + h * dk);
        }
      });
      kernels::matmul_add(att_.data(), n, L.o, L.bo, x, pool);  // x += attention's output
      transformer::for_rows(pool, n, [&](int64_t i) {
        kernels::layer_norm(x + i * dim, L.ln1_w, L.ln1_b, c.norm_eps, dim, x + i * dim);
      });
      if (c.gated_ffn) {  // SwiGLU: up(x) * silu(gate(x)); GEGLU: up(x) * gelu(gate(x))
        const kernels::MatmulOutput mlp[] = {{L.gate, L.bgate, h_.data()},
                                             {L.up, L.bup, up_.data()}};
        kernels::matmul_many(x, n, mlp, pool);
        transformer::for_rows(pool, n, [&](int64_t i) {
          float* g = h_.data() + i * ffn;
          const float* u = up_.data() + i * ffn;
          if (c.encoder_kind != ModelConfig::EncoderKind::kJina) {
            kernels::silu_mul(g, u, ffn);
          } else {
            kernels::gelu_erf(g, ffn);
            for (int64_t d = 0; d < ffn; ++d) g[d] *= u[d];
          }
        });
      } else {
        kernels::matmul(x, n, L.up, L.bup, h_.data(), pool);
        transformer::for_rows(pool, n,
                              [&](int64_t i) { kernels::gelu_erf(h_.data() + i * ffn, ffn); });
      }
      kernels::matmul_add(h_.data(), n, L.down, L.bdown, x, pool);
      transformer::for_rows(pool, n, [&](int64_t i) {
        kernels::layer_norm(x + i * dim, L.ln2_w, L.ln2_b, c.norm_eps, dim, x + i * dim);
      });
    }
  }

  void run_classifier(const float* cls_rows, int64_t n, float* scores, ThreadPool& pool) override {
    const ModelConfig& c = config_;
    transformer::grow(q_, n * c.dim);
    kernels::matmul(cls_rows, n, head_dense_, head_dense_b_, q_.data(), pool);
    for (int64_t i = 0; i < n * c.dim; ++i) q_[i] = std::tanh(q_[i]);
    kernels::matmul(q_.data(), n, head_out_, head_out_b_, scores, pool);
  }

 private:
  std::string prefix_;
  kernels::WeightMatrix word_;
  const float* pos_ = nullptr;
  const float* type_ = nullptr;
  const float *emb_ln_w_ = nullptr, *emb_ln_b_ = nullptr;
  std::vector<BertLayer> layers_;
  kernels::WeightMatrix head_dense_, head_out_;
  const float *head_dense_b_ = nullptr, *head_out_b_ = nullptr;
  // The input a row of the batch belongs to.
  int64_t input_of(int64_t row) const {
    return std::upper_bound(start_.begin(), start_.end(), row) - start_.begin() - 1;
  }

  Rope rope_;                        // NomicBERT's
  std::vector<float> alibi_slopes_;  // JinaBERT's, per head
  std::vector<int64_t> start_;
  std::vector<float> q_, k_, v_, att_, h_, up_;
};

}  // namespace

EncoderPooling parse_encoder_pooling(const std::string& name) {
  if (name == "cls") return EncoderPooling::kCls;
  if (name == "mean") return EncoderPooling::kMean;
  if (name == "max") return EncoderPooling::kMax;
  if (name == "last") return EncoderPooling::kLast;
  fail(ErrorKind::kInvalidArgument, "pooling '{}' is not one of cls, mean, max, last", name);
}

const char* encoder_pooling_name(EncoderPooling p) {
  switch (p) {
    case EncoderPooling::kCls:
      return "cls";
    case EncoderPooling::kMean:
      return "mean";
    case EncoderPooling::kMax:
      return "max";
    case EncoderPooling::kLast:
      return "last";
  }
  return "cls";
}

void EncoderModel::encode(std::span<const EncoderInput> inputs, float* hidden, ThreadPool& pool) {
  const ModelConfig& c = config_;
  for (size_t s = 0; s < inputs.size(); ++s) {
    const EncoderInput& in = inputs[s];
    const int64_t len = static_cast<int64_t>(in.tokens.size());
    if (len == 0) fail(ErrorKind::kInvalidArgument, "input {} is empty", s);
    if (len > c.max_seq_len)
      fail(ErrorKind::kInvalidArgument, "input {} has {} tokens; the model takes at most {}", s,
           len, c.max_seq_len);
    for (int32_t id : in.tokens)
      if (id < 0 || id >= c.vocab_size)
        fail(ErrorKind::kInvalidArgument, "token id {} is outside the vocabulary (0..{})", id,
             c.vocab_size - 1);
    if (!in.types.empty() && in.types.size() != in.tokens.size())
      fail(ErrorKind::kInvalidArgument, "input {} has {} token types for {} tokens", s,
           in.types.size(), in.tokens.size());
    for (int32_t t : in.types)
      if (t < 0 || t >= std::max<int64_t>(c.type_vocab_size, 1))
        fail(ErrorKind::kInvalidArgument, "token type {} is outside the model's {} types", t,
             std::max<int64_t>(c.type_vocab_size, 1));
  }
  run_encoder(inputs, hidden, pool);
}

void EncoderModel::classify(std::span<const EncoderInput> inputs, const float* hidden,
                            float* scores, ThreadPool& pool) {
  const ModelConfig& c = config_;
  if (c.classifier == ModelConfig::Classifier::kNone)
    fail(ErrorKind::kInvalidArgument, "model '{}' has no classifier head", c.architecture);
  std::vector<float> cls(inputs.size() * static_cast<size_t>(c.dim));
  int64_t row = 0;
  for (size_t s = 0; s < inputs.size(); ++s) {
    std::memcpy(cls.data() + s * c.dim, hidden + row * c.dim, sizeof(float) * c.dim);
    row += static_cast<int64_t>(inputs[s].tokens.size());
  }
  run_classifier(cls.data(), static_cast<int64_t>(inputs.size()), scores, pool);
}

void EncoderModel::run(std::span<const SequenceChunk>, std::span<const TokenPosition>, KvCache&,
                       float*, ThreadPool&) {
  fail(ErrorKind::kUnsupported,
       "'{}' is an encoder: it embeds and classifies (tokenflow embed), it does not generate",
       config_.architecture);
}

void pool_hidden(const float* hidden, int64_t len, int64_t dim, EncoderPooling pooling,
                 float* out) {
  switch (pooling) {
    case EncoderPooling::kCls:
      std::memcpy(out, hidden, sizeof(float) * dim);
      return;
    case EncoderPooling::kLast:
      std::memcpy(out, hidden + (len - 1) * dim, sizeof(float) * dim);
      return;
    case EncoderPooling::kMean: {
      std::vector<double> sum(static_cast<size_t>(dim), 0.0);
      for (int64_t t = 0; t < len; ++t)
        for (int64_t d = 0; d < dim; ++d) sum[d] += hidden[t * dim + d];
      for (int64_t d = 0; d < dim; ++d)
        out[d] = static_cast<float>(sum[d] / static_cast<double>(len));
      return;
    }
    case EncoderPooling::kMax:
      std::fill(out, out + dim, -std::numeric_limits<float>::infinity());
      for (int64_t t = 0; t < len; ++t)
        for (int64_t d = 0; d < dim; ++d) out[d] = std::max(out[d], hidden[t * dim + d]);
      return;
  }
}

EncoderPoolingConfig read_encoder_pooling(const std::string& model_dir) {
  namespace fs = std::filesystem;
  EncoderPoolingConfig out;
  std::error_code ec;
  const fs::path dir(model_dir);
  const fs::path modules = dir / "modules.json";
  if (!fs::is_directory(dir, ec) || !fs::exists(modules, ec)) return out;
  const nlohmann::json m = parse_json(read_file(modules.string()), modules.string());
  if (!m.is_array()) fail("'{}': modules.json must be a list of modules", modules.string());
  for (const auto& mod : m) {
    const std::string type = mod.is_object() ? mod.value("type", "") : "";
    const std::string path = mod.is_object() ? mod.value("path", "") : "";
    if (type.ends_with(".Normalize")) out.normalize = true;
    if (!type.ends_with(".Pooling")) continue;
    if (path.find("..") != std::string::npos || (!path.empty() && path[0] == '/'))
      fail("'{}': a module path must stay inside the model directory", modules.string());
    const fs::path cfg = dir / path / "config.json";
    const nlohmann::json p = parse_json(read_file(cfg.string()), cfg.string());
    if (!p.is_object()) fail("'{}': expected a JSON object", cfg.string());
    std::vector<EncoderPooling> modes;
    if (p.value("pooling_mode_cls_token", false)) modes.push_back(EncoderPooling::kCls);
    if (p.value("pooling_mode_mean_tokens", false)) modes.push_back(EncoderPooling::kMean);
    if (p.value("pooling_mode_max_tokens", false)) modes.push_back(EncoderPooling::kMax);
    if (p.value("pooling_mode_lasttoken", false)) modes.push_back(EncoderPooling::kLast);
    if (p.value("pooling_mode_mean_sqrt_len_tokens", false) ||
        p.value("pooling_mode_weightedmean_tokens", false))
      fail(ErrorKind::kUnsupported,
           "'{}': pooling by mean over sqrt(length) or weighted mean is not supported (cls, "
           "mean, max and last token are)",
           cfg.string());
    if (modes.size() != 1)
      fail(ErrorKind::kUnsupported,
           "'{}': {} pooling modes are set; one is supported (their concatenation is not)",
           cfg.string(), modes.size());
    out.pooling = modes[0];
    out.from_config = true;
  }
  return out;
}

std::unique_ptr<Model> make_bert(ModelConfig config, WeightStore weights) {
  return std::make_unique<BertModel>(std::move(config), std::move(weights));
}

}  // namespace tf
