#include "model/gptj.h"

#include <cstring>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/rope.h"
#include "model/transformer.h"

namespace tf {
namespace {

struct GptJLayer {
  const float *ln1_w, *ln1_b;
  const float *ln2_w = nullptr, *ln2_b = nullptr;  // NeoX: the MLP's own norm
  // Separate or stacked projections (views of one [q; k; v] matrix), or one fused matrix whose
  // output rows are reordered (qkv: NeoX's per-head and CodeGen's sharded layouts).
  kernels::WeightMatrix wq, wk, wv, qkv;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *b_qkv = nullptr;
  kernels::WeightMatrix wo;
  const float* bo = nullptr;
  kernels::WeightMatrix w_in, w_out;
  const float *b_in, *b_out;
};

class GptJModel final : public Model {
 public:
  GptJModel(ModelConfig config, WeightStore weights)
      : Model(std::move(config), std::move(weights)) {
    const ModelConfig& c = config_;
    WeightStore& w = weights_;
    using Layout = ModelConfig::QkvLayout;
    const bool neox = c.gptj_names == ModelConfig::GptJNames::kNeoX;
    const int64_t dim = c.dim, ffn = c.ffn_dim;
    const std::string top = neox ? "gpt_neox." : "transformer.";
    embed_ = w.matrix(top + (neox ? "embed_in.weight" : "wte.weight"), c.vocab_size, dim);
    rope_ = Rope(c.rope, c.head_dim, c.rope_style);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string p = top + (neox ? "layers." : "h.") + std::to_string(l) + ".";
      GptJLayer L;
      const std::string ln1 = p + (neox ? "input_layernorm." : "ln_1.");
      L.ln1_w = w.f32(ln1 + "weight", {dim});
      L.ln1_b = w.f32(ln1 + "bias", {dim});
      if (c.two_norms) {
        L.ln2_w = w.f32(p + "post_attention_layernorm.weight", {dim});
        L.ln2_b = w.f32(p + "post_attention_layernorm.bias", {dim});
      }
      const std::string attn = p + (neox ? "attention." : "attn.");
      switch (c.qkv_layout) {
        case Layout::kSeparate:
          L.wq = w.matrix(attn + "q_proj.weight", dim, dim);
          L.wk = w.matrix(attn + "k_proj.weight", dim, dim);
          L.wv = w.matrix(attn + "v_proj.weight", dim, dim);
          break;
        case Layout::kStacked: {
          const kernels::WeightMatrix m =
              w.matrix(attn + "query_key_value.weight", 3 * dim, dim, false, dim);
          L.wq = m.rows(0, dim);
          L.wk = m.rows(dim, dim);
          L.wv = m.rows(2 * dim, dim);
          if (c.qkv_bias) {
            const float* b = w.f32(attn + "query_key_value.bias", {3 * dim});
            L.bq = b;
            L.bk = b + dim;
            L.bv = b + 2 * dim;
          }
          break;
        }
        case Layout::kPerHead:
        case Layout::kCodeGen: {
          const std::string name = neox ? "query_key_value." : "qkv_proj.";
          L.qkv = w.matrix(attn + name + "weight", 3 * dim, dim);
          if (c.qkv_bias) L.b_qkv = w.f32(attn + name + "bias", {3 * dim});
          break;
        }
      }
      const std::string out = attn + (neox ? "dense." : "out_proj.");
      L.wo = w.matrix(out + "weight", dim, dim);
      if (c.o_bias) L.bo = w.f32(out + "bias", {dim});
      const std::string in = p + (neox ? "mlp.dense_h_to_4h." : "mlp.fc_in.");
      const std::string down = p + (neox ? "mlp.dense_4h_to_h." : "mlp.fc_out.");
      L.w_in = w.matrix(in + "weight", ffn, dim);
      L.b_in = w.f32(in + "bias", {ffn});
      L.w_out = w.matrix(down + "weight", dim, ffn);
      L.b_out = w.f32(down + "bias", {dim});
      layers_.push_back(L);
    }
    const std::string lnf = top + (neox ? "final_layer_norm." : "ln_f.");
    lnf_w_ = w.f32(lnf + "weight", {dim});
    lnf_b_ = w.f32(lnf + "bias", {dim});
    const std::string head = neox ? "embed_out." : "lm_head.";
    if (c.tied_embeddings && !w.has(head + "weight")) {
      lm_head_ = embed_;
    } else {
      lm_head_ = w.matrix(head + "weight", c.vocab_size, dim);
      if (c.lm_head_bias) lm_head_b_ = w.f32(head + "bias", {c.vocab_size});
    }
  }

 protected:
  void run(std::span<const SequenceChunk> batch, std::span<const TokenPosition> tokens, KvCache& kv,
           float* logits, ThreadPool& pool) override {
    const ModelConfig& c = config_;
    const int64_t T = static_cast<int64_t>(tokens.size());
    transformer::Activations& a = act_;
    a.ensure(T, c);
    const int64_t dim = c.dim, ffn = c.ffn_dim;
    transformer::grow(mlp_in_, T * dim);
    int64_t t = 0;
    for (const auto& s : batch)
      for (int32_t id : s.tokens) embed_.dequantize_row(id, a.x.data() + (t++) * dim);
    const auto norm = [&](const float* w, const float* b, float* out) {
      transformer::for_rows(pool, T, [&](int64_t i) {
        kernels::layer_norm(a.x.data() + i * dim, w, b, c.norm_eps, dim, out + i * dim);
      });
    };
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const GptJLayer& L = layers_[l];
      const kernels::PagedKvLayer cache = kv.layer(l);
      norm(L.ln1_w, L.ln1_b, a.xb.data());
      project_qkv(L, T, pool);
      transformer::for_rows(pool, T, [&](int64_t i) {
        rope_.apply(a.q.data() + i * dim, static_cast<int>(c.n_heads), tokens[i].pos);
        rope_.apply(a.k.data() + i * dim, static_cast<int>(c.n_heads), tokens[i].pos);
      });
      transformer::store_kv(batch, tokens, cache, a.k.data(), a.v.data(), pool);
      transformer::attention(batch, tokens, cache, c, a.q.data(), a.att.data(), pool);
      // The MLP's input: parallel blocks read the block's input x (through ln2, or ln1's output
      // when they share it) before attention adds to it; sequential ones read x after.
      const float* mlp_in = a.xb.data();
      if (c.parallel_residual && c.two_norms) {
        norm(L.ln2_w, L.ln2_b, mlp_in_.data());
        mlp_in = mlp_in_.data();
      }
      kernels::matmul_add(a.att.data(), T, L.wo, L.bo, a.x.data(), pool);  // x += attention
      if (!c.parallel_residual) norm(L.ln2_w, L.ln2_b, a.xb.data());
      kernels::matmul(mlp_in, T, L.w_in, L.b_in, a.h1.data(), pool);
      transformer::for_rows(pool, T, [&](int64_t i) {
        float* h = a.h1.data() + i * ffn;
        if (c.act == ModelConfig::Act::kGeluErf)
          kernels::gelu_erf(h, ffn);
        else
          kernels::gelu_tanh(h, ffn);
      });
      kernels::matmul_add(a.h1.data(), T, L.w_out, L.b_out, a.x.data(), pool);  // x += MLP
    }
    transformer::layer_norm_logits(batch, a.x.data(), lnf_w_, lnf_b_, c, lm_head_, lm_head_b_, a,
                                   hidden_out_, logits, pool);
  }

 private:
  // q, k and v of every token into a.q, a.k, a.v ([T, dim] each) from the normed a.xb.
  void project_qkv(const GptJLayer& L, int64_t T, ThreadPool& pool) {
    const ModelConfig& c = config_;
    transformer::Activations& a = act_;
    const int64_t dim = c.dim;
    if (L.qkv.n == 0) {
      const kernels::MatmulOutput out[] = {
          {L.wq, L.bq, a.q.data()}, {L.wk, L.bk, a.k.data()}, {L.wv, L.bv, a.v.data()}};
      kernels::matmul_many(a.xb.data(), T, out, pool);
      return;
    }
    transformer::grow(qkv_, T * 3 * dim);
    kernels::matmul(a.xb.data(), T, L.qkv, L.b_qkv, qkv_.data(), pool);
    const int64_t hd = c.head_dim;
    const bool per_head = c.qkv_layout == ModelConfig::QkvLayout::kPerHead;
    const int64_t shards = c.qkv_shards, local = dim / shards;
    transformer::for_rows(pool, T, [&](int64_t i) {
      const float* src = qkv_.data() + i * 3 * dim;
      float* dst[3] = {a.q.data() + i * dim, a.k.data() + i * dim, a.v.data() + i * dim};
      if (per_head) {  // head h: [q_h; k_h; v_h]
        for (int64_t h = 0; h < c.n_heads; ++h)
          for (int m = 0; m < 3; ++m)
            std::memcpy(dst[m] + h * hd, src + (3 * h + m) * hd, hd * sizeof(float));
      } else {  // shard s: [q_s; v_s; k_s], each `local` wide; heads numbered shard by shard
        for (int64_t s = 0; s < shards; ++s) {
          const float* part = src + s * 3 * local;
          std::memcpy(dst[0] + s * local, part, local * sizeof(float));
          std::memcpy(dst[2] + s * local, part + local, local * sizeof(float));
          std::memcpy(dst[1] + s * local, part + 2 * local, local * sizeof(float));
        }
      }
    });
  }

  kernels::WeightMatrix embed_, lm_head_;
  const float* lm_head_b_ = nullptr;
  const float *lnf_w_ = nullptr, *lnf_b_ = nullptr;
  std::vector<GptJLayer> layers_;
  Rope rope_;
  std::vector<float> qkv_, mlp_in_;
  transformer::Activations act_;
};

}  // namespace

std::unique_ptr<Model> make_gptj(ModelConfig config, WeightStore weights) {
  return std::make_unique<GptJModel>(std::move(config), std::move(weights));
}

}  // namespace tf
