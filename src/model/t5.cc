#include "model/t5.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/transformer.h"

namespace tf {

int32_t t5_position_bucket(int64_t relative, bool bidirectional, int64_t num_buckets,
                           int64_t max_distance) {
  int64_t bucket = 0;
  int64_t n = num_buckets;
  if (bidirectional) {
    n /= 2;
    if (relative > 0) bucket += n;
    relative = std::abs(relative);
  } else {
    relative = relative < 0 ? -relative : 0;
  }
  const int64_t max_exact = n / 2;
  if (relative < max_exact) return static_cast<int32_t>(bucket + relative);
  // In float32, as transformers computes it (the truncation of a value that lands on a whole
  // number depends on it).
  const float scaled = std::log(static_cast<float>(relative) / static_cast<float>(max_exact)) /
                       static_cast<float>(std::log(static_cast<double>(max_distance) /
                                                   static_cast<double>(max_exact))) *
                       static_cast<float>(n - max_exact);
  const int64_t large = std::min<int64_t>(max_exact + static_cast<int64_t>(scaled), n - 1);
  return static_cast<int32_t>(bucket + large);
}

namespace {

struct T5Attention {
  kernels::WeightMatrix q, k, v, o;
};

struct T5Mlp {
  kernels::WeightMatrix wi, wi_1, wo;  // gated: wi is wi_0 (GELU), wi_1 the linear gate
};

struct T5Block {
  const float* rel_bias = nullptr;  // [buckets, heads]: its own, or its stack's first block's
  const float* ln_self = nullptr;
  T5Attention self;
  const float* ln_cross = nullptr;  // decoder blocks
  T5Attention cross;
  const float* ln_mlp = nullptr;
  T5Mlp mlp;
};

class T5Model final : public Model {
 public:
  T5Model(ModelConfig config, WeightStore weights) : Model(std::move(config), std::move(weights)) {
    const ModelConfig& c = config_;
    WeightStore& w = weights_;
    const int64_t inner = c.n_heads * c.head_dim;
    embed_ = w.matrix("shared.weight", c.vocab_size, c.dim);
    auto attention = [&](const std::string& p) {
      return T5Attention{
          w.matrix(p + "q.weight", inner, c.dim), w.matrix(p + "k.weight", inner, c.dim),
          w.matrix(p + "v.weight", inner, c.dim), w.matrix(p + "o.weight", c.dim, inner)};
    };
    auto mlp = [&](const std::string& p) {
      T5Mlp m;
      if (c.gated_ffn) {
        m.wi = w.matrix(p + "DenseReluDense.wi_0.weight", c.ffn_dim, c.dim);
        m.wi_1 = w.matrix(p + "DenseReluDense.wi_1.weight", c.ffn_dim, c.dim);
      } else {
        m.wi = w.matrix(p + "DenseReluDense.wi.weight", c.ffn_dim, c.dim);
      }
      m.wo = w.matrix(p + "DenseReluDense.wo.weight", c.dim, c.ffn_dim);
      return m;
    };
    // A block: self-attention (layer 0), cross-attention in the decoder's (layer 1), the MLP.
    auto block = [&](const char* stack, int64_t l, bool decoder) {
      const std::string p = fmt::format("{}.block.{}.layer.", stack, l);
      const std::string mlp_at = decoder ? "2." : "1.";
      T5Block b;
      // T5 keeps the position bias in each stack's first block; UMT5 (and llama.cpp's reader)
      // in every block that has one.
      const std::string bias = p + "0.SelfAttention.relative_attention_bias.weight";
      if (w.has(bias)) b.rel_bias = w.f32(bias, {c.rel_buckets, c.n_heads});
      b.ln_self = w.f32(p + "0.layer_norm.weight", {c.dim});
      b.self = attention(p + "0.SelfAttention.");
      if (decoder) {
        b.ln_cross = w.f32(p + "1.layer_norm.weight", {c.dim});
        b.cross = attention(p + "1.EncDecAttention.");
      }
      b.ln_mlp = w.f32(p + mlp_at + "layer_norm.weight", {c.dim});
      b.mlp = mlp(p + mlp_at);
      return b;
    };
    for (int64_t l = 0; l < c.n_encoder_layers; ++l) encoder_.push_back(block("encoder", l, false));
    for (int64_t l = 0; l < c.n_layers; ++l) decoder_.push_back(block("decoder", l, true));
    for (auto* stack : {&encoder_, &decoder_}) {
      const char* name = stack == &encoder_ ? "encoder" : "decoder";
      if (stack->empty() || (*stack)[0].rel_bias == nullptr)
        fail(ErrorKind::kNotFound,
             "T5: the {}'s first block has no relative_attention_bias (the position bias)", name);
      for (T5Block& b : *stack)
        if (b.rel_bias == nullptr) b.rel_bias = (*stack)[0].rel_bias;
    }
    enc_norm_ = w.f32("encoder.final_layer_norm.weight", {c.dim});
    dec_norm_ = w.f32("decoder.final_layer_norm.weight", {c.dim});
    const bool own_head = w.has("lm_head.weight") && !c.tied_embeddings;
    lm_head_ = own_head ? w.matrix("lm_head.weight", c.vocab_size, c.dim) : embed_;
    head_scale_ = c.tied_embeddings ? 1.0f / std::sqrt(static_cast<float>(c.dim)) : 1.0f;
  }

 protected:
  void run(std::span<const SequenceChunk> batch, std::span<const TokenPosition> tokens, KvCache& kv,
           float* logits, ThreadPool& pool) override {
    const ModelConfig& c = config_;
    const int64_t dim = c.dim;
    encode(batch, kv, pool);
    const int64_t T = static_cast<int64_t>(tokens.size());
    int64_t t = 0;
    grow(x_, T * dim);
    for (const auto& s : batch)
      for (int32_t id : s.tokens) embed_.dequantize_row(id, x_.data() + dim * t++);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const T5Block& B = decoder_[l];
      // Self-attention over the sequence's own cache, with the causal position bias.
      norm(x_, B.ln_self, T, pool);
      project(B.self, T, pool);
      const kernels::PagedKvLayer self = kv.layer(l);
      transformer::store_kv(batch, tokens, self, k_.data(), v_.data(), pool);
      attend_cached(batch, self, B.rel_bias, pool);
      kernels::matmul_add(att_.data(), T, B.self.o, nullptr, x_.data(), pool);
      // Cross-attention over the encoder's K/V, no bias.
      norm(x_, B.ln_cross, T, pool);
      kernels::matmul(xb_.data(), T, B.cross.q, nullptr, q_.data(), pool);
      attend_cached(batch, kv.layer(c.n_layers + l), /*rel_bias=*/nullptr, pool);
      kernels::matmul_add(att_.data(), T, B.cross.o, nullptr, x_.data(), pool);
      norm(x_, B.ln_mlp, T, pool);
      mlp(B.mlp, x_, T, pool);
    }
    const int64_t rows = transformer::gather_logit_rows(batch, x_.data(), dim, xb_.data());
    transformer::for_rows(pool, rows, [&](int64_t i) {
      float* r = xb_.data() + i * dim;
      kernels::rms_norm(r, dec_norm_, c.norm_eps, dim, r);
      if (head_scale_ != 1.0f)
        for (int64_t j = 0; j < dim; ++j) r[j] *= head_scale_;
    });
    if (hidden_out_)
      std::memcpy(hidden_out_, xb_.data(), static_cast<size_t>(rows * dim) * sizeof(float));
    kernels::matmul(xb_.data(), rows, lm_head_, nullptr, logits, pool);
  }

 private:
  static void grow(std::vector<float>& v, int64_t n) { transformer::grow(v, n); }

  // xb_ = RMSNorm(x) over n rows.
  void norm(const std::vector<float>& x, const float* w, int64_t n, ThreadPool& pool) {
    const int64_t dim = config_.dim;
    grow(xb_, n * dim);
    transformer::for_rows(pool, n, [&](int64_t i) {
      kernels::rms_norm(x.data() + i * dim, w, config_.norm_eps, dim, xb_.data() + i * dim);
    });
  }

  // q_, k_, v_ of xb_'s n rows.
  void project(const T5Attention& a, int64_t n, ThreadPool& pool) {
    const int64_t inner = config_.n_heads * config_.head_dim;
    grow(q_, n * inner);
    grow(k_, n * inner);
    grow(v_, n * inner);
    grow(att_, n * inner);
    const kernels::MatmulOutput outs[] = {
        {a.q, nullptr, q_.data()}, {a.k, nullptr, k_.data()}, {a.v, nullptr, v_.data()}};
    kernels::matmul_many(xb_.data(), n, outs, pool);
  }

  // x += MLP(xb_) over n rows.
  void mlp(const T5Mlp& m, std::vector<float>& x, int64_t n, ThreadPool& pool) {
    const int64_t ff = config_.ffn_dim;
    grow(h1_, n * ff);
    grow(h2_, n * ff);
    if (config_.gated_ffn) {
      const kernels::MatmulOutput outs[] = {{m.wi, nullptr, h1_.data()},
                                            {m.wi_1, nullptr, h2_.data()}};
      kernels::matmul_many(xb_.data(), n, outs, pool);
      transformer::for_rows(pool, n, [&](int64_t i) {
        float* a = h1_.data() + i * ff;
        const float* g = h2_.data() + i * ff;
        kernels::gelu_tanh(a, ff);
        for (int64_t j = 0; j < ff; ++j) a[j] *= g[j];
      });
    } else {
      kernels::matmul(xb_.data(), n, m.wi, nullptr, h1_.data(), pool);
      transformer::for_rows(pool, n, [&](int64_t i) {
        float* a = h1_.data() + i * ff;
        for (int64_t j = 0; j < ff; ++j) a[j] = std::max(a[j], 0.0f);
      });
    }
    kernels::matmul_add(h1_.data(), n, m.wo, nullptr, x.data(), pool);
  }

  // The encoder over every chunk that carries its input (all of them at once: the matmuls over
  // their rows together, attention within each), then each decoder layer's cross-attention K/V
  // into the chunk's cross-attention blocks.
  void encode(std::span<const SequenceChunk> batch, KvCache& kv, ThreadPool& pool) {
    const ModelConfig& c = config_;
    const int64_t dim = c.dim, inner = c.n_heads * c.head_dim, dk = c.head_dim;
    std::vector<size_t> which;
    enc_start_.assign(1, 0);
    for (size_t s = 0; s < batch.size(); ++s) {
      if (batch[s].encoder_tokens.empty()) continue;
      which.push_back(s);
      enc_start_.push_back(enc_start_.back() +
                           static_cast<int64_t>(batch[s].encoder_tokens.size()));
    }
    if (which.empty()) return;
    const int64_t n = enc_start_.back();
    grow(ex_, n * dim);
    int64_t r = 0;
    for (size_t s : which)
      for (int32_t id : batch[s].encoder_tokens) embed_.dequantize_row(id, ex_.data() + dim * r++);
    for (const T5Block& B : encoder_) {
      norm(ex_, B.ln_self, n, pool);
      project(B.self, n, pool);
      // Bidirectional attention within each sequence, with the position bias.
      // A task per query row: its keys' buckets once, then each head's bias from them.
      transformer::for_rows(pool, n, [&](int64_t i) {
        const size_t e = static_cast<size_t>(
            std::upper_bound(enc_start_.begin(), enc_start_.end(), i) - enc_start_.begin() - 1);
        const int64_t first = enc_start_[e], len = enc_start_[e + 1] - first;
        thread_local std::vector<int32_t> buckets;
        thread_local std::vector<float> bias, scores;
        buckets.resize(static_cast<size_t>(len));
        bias.resize(static_cast<size_t>(len));
        scores.resize(static_cast<size_t>(len));
        for (int64_t j = 0; j < len; ++j)
          buckets[j] = t5_position_bucket(j - (i - first), true, c.rel_buckets, c.rel_max_distance);
        for (int64_t h = 0; h < c.n_heads; ++h) {
          for (int64_t j = 0; j < len; ++j) bias[j] = B.rel_bias[buckets[j] * c.n_heads + h];
          transformer::attend(q_.data() + i * inner + h * dk, k_.data() + first * inner,
                              v_.data() + first * inner, len, inner, h, dk, 1.0f, bias.data(),
                              scores.data(), att_.data() + i * inner + h * dk);
        }
      });
      kernels::matmul_add(att_.data(), n, B.self.o, nullptr, ex_.data(), pool);
      norm(ex_, B.ln_mlp, n, pool);
      mlp(B.mlp, ex_, n, pool);
    }
    norm(ex_, enc_norm_, n, pool);  // xb_: the encoder's output
    grow(ek_, n * inner);
    grow(ev_, n * inner);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const kernels::MatmulOutput outs[] = {{decoder_[l].cross.k, nullptr, ek_.data()},
                                            {decoder_[l].cross.v, nullptr, ev_.data()}};
      kernels::matmul_many(xb_.data(), n, outs, pool);
      const kernels::PagedKvLayer cross = kv.layer(c.n_layers + l);
      transformer::for_rows(pool, n, [&](int64_t i) {
        const size_t e = static_cast<size_t>(
            std::upper_bound(enc_start_.begin(), enc_start_.end(), i) - enc_start_.begin() - 1);
        transformer::store_kv_row(cross, batch[which[e]].table(cross.group), i - enc_start_[e],
                                  ek_.data() + i * inner, ev_.data() + i * inner);
      });
    }
  }

  // att_ = attention of q_'s rows over each sequence's cache: its own positions <= the query's
  // with rel_bias's causal bias, or (rel_bias null: cross-attention) the encoder's positions.
  void attend_cached(std::span<const SequenceChunk> batch, const kernels::PagedKvLayer& layer,
                     const float* rel_bias, ThreadPool& pool) {
    const bool cross = rel_bias == nullptr;
    const ModelConfig& c = config_;
    const int64_t inner = c.n_heads * c.head_dim, dk = c.head_dim;
    starts_.assign(1, 0);
    for (const auto& s : batch)
      starts_.push_back(starts_.back() + static_cast<int64_t>(s.tokens.size()));
    // Per sequence: its keys and values gathered once as floats, then every (query, head).
    transformer::for_rows(pool, static_cast<int64_t>(batch.size()), [&](int64_t s) {
      const SequenceChunk& chunk = batch[s];
      const int32_t* table = chunk.table(layer.group);
      const int64_t n_tok = static_cast<int64_t>(chunk.tokens.size());
      const int64_t n_keys = cross ? chunk.encoder_len : chunk.start_pos + n_tok;
      thread_local std::vector<float> keys, values, bias, scores;
      thread_local std::vector<int32_t> buckets;
      buckets.resize(static_cast<size_t>(n_keys));
      keys.resize(static_cast<size_t>(n_keys * inner));
      values.resize(static_cast<size_t>(n_keys * inner));
      bias.resize(static_cast<size_t>(n_keys));
      scores.resize(static_cast<size_t>(n_keys));
      for (int64_t j = 0; j < n_keys; ++j) {
        transformer::load_kv_row(layer, table, j, 0, keys.data() + j * inner);
        transformer::load_kv_row(layer, table, j, 1, values.data() + j * inner);
      }
      for (int64_t t = 0; t < n_tok; ++t) {
        const int64_t row = starts_[s] + t, pos = chunk.start_pos + t;
        const int64_t n = cross ? n_keys : pos + 1;
        if (!cross)  // the keys' buckets once per query, each head's bias from them
          for (int64_t j = 0; j < n; ++j)
            buckets[j] = t5_position_bucket(j - pos, false, c.rel_buckets, c.rel_max_distance);
        for (int64_t h = 0; h < c.n_heads; ++h) {
          if (!cross)
            for (int64_t j = 0; j < n; ++j) bias[j] = rel_bias[buckets[j] * c.n_heads + h];
          transformer::attend(q_.data() + row * inner + h * dk, keys.data(), values.data(), n,
                              inner, h, dk, 1.0f, cross ? nullptr : bias.data(), scores.data(),
                              att_.data() + row * inner + h * dk);
        }
      }
    });
  }

  kernels::WeightMatrix embed_, lm_head_;
  float head_scale_ = 1.0f;
  std::vector<T5Block> encoder_, decoder_;
  const float *enc_norm_ = nullptr, *dec_norm_ = nullptr;
  std::vector<float> x_, xb_, q_, k_, v_, att_, h1_, h2_, ex_, ek_, ev_;
  std::vector<int64_t> enc_start_, starts_;
};

}  // namespace

std::unique_ptr<Model> make_t5(ModelConfig config, WeightStore weights) {
  return std::make_unique<T5Model>(std::move(config), std::move(weights));
}

}  // namespace tf
