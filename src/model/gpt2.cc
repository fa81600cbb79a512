#include "model/gpt2.h"

#include <cstring>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/transformer.h"

namespace tf {
namespace {

struct Gpt2Layer {
  const float *ln1_w, *ln1_b;
  kernels::WeightMatrix w_q, w_k, w_v;  // rows of c_attn [3 * dim, dim] (Conv1D transposed)
  const float* b_qkv;
  kernels::WeightMatrix w_proj;
  const float* b_proj;
  const float *ln2_w, *ln2_b;
  kernels::WeightMatrix w_fc;
  const float* b_fc;
  kernels::WeightMatrix w_out;
  const float* b_out;
};

class Gpt2Model final : public Model {
 public:
  Gpt2Model(ModelConfig config, WeightStore weights)
      : Model(std::move(config), std::move(weights)) {
    const ModelConfig& c = config_;
    WeightStore& w = weights_;
    // HF's GPT2LMHeadModel saves "transformer.h.0..."; OpenAI's original conversion drops the
    // prefix.
    prefix_ = w.has("transformer.wte.weight") ? "transformer." : "";
    const std::string& P = prefix_;
    // Conv1D matrices are stored [in, out] by Hugging Face; GGUF stores them [out, in].
    const bool conv1d = c.format != "gguf";
    wte_ = w.matrix(P + "wte.weight", c.vocab_size, c.dim);
    wpe_ = w.f32(P + "wpe.weight", {c.max_seq_len, c.dim});
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string p = P + "h." + std::to_string(l) + ".";
      Gpt2Layer L;
      L.ln1_w = w.f32(p + "ln_1.weight", {c.dim});
      L.ln1_b = w.f32(p + "ln_1.bias", {c.dim});
      const kernels::WeightMatrix qkv =
          w.matrix(p + "attn.c_attn.weight", 3 * c.dim, c.dim, conv1d, c.dim);
      L.w_q = qkv.rows(0, c.dim);
      L.w_k = qkv.rows(c.dim, c.dim);
      L.w_v = qkv.rows(2 * c.dim, c.dim);
      L.b_qkv = w.f32(p + "attn.c_attn.bias", {3 * c.dim});
      L.w_proj = w.matrix(p + "attn.c_proj.weight", c.dim, c.dim, conv1d);
      L.b_proj = w.f32(p + "attn.c_proj.bias", {c.dim});
      L.ln2_w = w.f32(p + "ln_2.weight", {c.dim});
      L.ln2_b = w.f32(p + "ln_2.bias", {c.dim});
      L.w_fc = w.matrix(p + "mlp.c_fc.weight", c.ffn_dim, c.dim, conv1d);
      L.b_fc = w.f32(p + "mlp.c_fc.bias", {c.ffn_dim});
      L.w_out = w.matrix(p + "mlp.c_proj.weight", c.dim, c.ffn_dim, conv1d);
      L.b_out = w.f32(p + "mlp.c_proj.bias", {c.dim});
      layers_.push_back(L);
    }
    lnf_w_ = w.f32(P + "ln_f.weight", {c.dim});
    lnf_b_ = w.f32(P + "ln_f.bias", {c.dim});
    lm_head_ = w.has("lm_head.weight") ? w.matrix("lm_head.weight", c.vocab_size, c.dim) : wte_;
  }

 protected:
  void run(std::span<const SequenceChunk> batch, std::span<const TokenPosition> tokens, KvCache& kv,
           float* logits, ThreadPool& pool) override {
    const ModelConfig& c = config_;
    const int64_t T = static_cast<int64_t>(tokens.size());
    transformer::Activations& a = act_;
    a.ensure(T, c);
    const int64_t dim = c.dim, ffn = c.ffn_dim;

    int64_t t = 0;
    for (const auto& s : batch) {
      for (int32_t id : s.tokens) {
        const float* pe = wpe_ + tokens[t].pos * dim;
        float* x = a.x.data() + t * dim;
        wte_.dequantize_row(id, x);
        for (int64_t i = 0; i < dim; ++i) x[i] += pe[i];
        ++t;
      }
    }
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const Gpt2Layer& L = layers_[l];
      const kernels::PagedKvLayer cache = kv.layer(l);
      transformer::for_rows(pool, T, [&](int64_t i) {
        kernels::layer_norm(a.x.data() + i * dim, L.ln1_w, L.ln1_b, c.norm_eps, dim,
                            a.xb.data() + i * dim);
      });
      // The fused QKV weight's rows are q, then k, then v: three matmuls on its thirds.
      const kernels::MatmulOutput qkv[] = {{L.w_q, L.b_qkv, a.q.data()},
                                           {L.w_k, L.b_qkv + dim, a.k.data()},
                                           {L.w_v, L.b_qkv + 2 * dim, a.v.data()}};
      kernels::matmul_many(a.xb.data(), T, qkv, pool);
      transformer::store_kv(batch, tokens, cache, a.k.data(), a.v.data(), pool);
      transformer::attention(batch, tokens, cache, c, a.q.data(), a.att.data(), pool);
      kernels::matmul_add(a.att.data(), T, L.w_proj, L.b_proj, a.x.data(), pool);  // x += ...

      transformer::for_rows(pool, T, [&](int64_t i) {
        kernels::layer_norm(a.x.data() + i * dim, L.ln2_w, L.ln2_b, c.norm_eps, dim,
                            a.xb.data() + i * dim);
      });
      kernels::matmul(a.xb.data(), T, L.w_fc, L.b_fc, a.h1.data(), pool);
      transformer::for_rows(pool, T,
                            [&](int64_t i) { kernels::gelu_tanh(a.h1.data() + i * ffn, ffn); });
      kernels::matmul_add(a.h1.data(), T, L.w_out, L.b_out, a.x.data(), pool);
    }
    transformer::layer_norm_logits(batch, a.x.data(), lnf_w_, lnf_b_, c, lm_head_, nullptr, a,
                                   hidden_out_, logits, pool);
  }

 private:
  std::string prefix_;
  kernels::WeightMatrix wte_;
  const float* wpe_ = nullptr;
  const float *lnf_w_ = nullptr, *lnf_b_ = nullptr;
  kernels::WeightMatrix lm_head_;
  std::vector<Gpt2Layer> layers_;
  transformer::Activations act_;
};

}  // namespace

std::unique_ptr<Model> make_gpt2(ModelConfig config, WeightStore weights) {
  return std::make_unique<Gpt2Model>(std::move(config), std::move(weights));
}

}  // namespace tf
