#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/gated_deltanet.h"
#include "model/lora.h"
#include "model/rope.h"
#include "model/transformer.h"

namespace tf {
namespace {

struct LlamaLayer {
  const float* attn_norm;
  kernels::WeightMatrix wq, wk, wv, wo;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
  // per head (Qwen3, Gemma 3) or over the whole projection (OLMoE)
  const float *q_norm = nullptr, *k_norm = nullptr;
  const float* attn_post_norm = nullptr;  // Gemma 2/3
  const float* ffn_norm;
  const float* ffn_post_norm = nullptr;  // Gemma 2/3
  kernels::WeightMatrix w_gate, w_up, w_down;
  // Mixture of experts (moe): the router, each expert's MLP, a shared expert and its gate.
  bool moe = false;
  kernels::WeightMatrix router;
  std::vector<kernels::WeightMatrix> e_gate, e_up, e_down;
  // gpt-oss: the router's and each expert's biases ([E, I] gate and up, [E, dim] down).
  const float *router_b = nullptr, *e_gate_b = nullptr, *e_up_b = nullptr, *e_down_b = nullptr;
  const float* sinks = nullptr;  // gpt-oss: one logit per head
  bool shared = false;
  kernels::WeightMatrix s_gate, s_up, s_down, s_gate_w;
  kernels::AttentionOpts att;
  const Rope* rope = nullptr;
  int gdn = -1;       // a Gated DeltaNet layer (Qwen3-Next, Qwen3.5): its index in gdn_
  int64_t index = 0;  // its place in the stack (what a LoRA adapter's pairs are keyed by)
};

class LlamaModel final : public Model {
 public:
  bool supports_lora() const override { return true; }
  LlamaModel(ModelConfig config, WeightStore weights)
      : Model(std::move(config), std::move(weights)) {
    const ModelConfig& c = config_;
    WeightStore& w = weights_;
    embed_ = w.matrix("model.embed_tokens.weight", c.vocab_size, c.dim);
    rope_ = Rope(c.rope, c.head_dim, c.rope_style);
    if (c.has_local_rope) local_rope_ = Rope(c.local_rope, c.head_dim, c.rope_style);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      LlamaLayer L;
      L.index = l;
      L.attn_norm = norm(p + "input_layernorm.weight", c.dim);
      if (c.is_linear(l)) {
        L.gdn = static_cast<int>(gdn_.size());
        gdn_.emplace_back(c, w, p + "linear_attn.");
      } else if (c.gated_attention) {  // q_proj: [q_h; gate_h] per head
        L.wq = w.matrix(p + "self_attn.q_proj.weight", 2 * c.q_dim(), c.dim);
        L.wk = w.matrix(p + "self_attn.k_proj.weight", c.kv_dim(), c.dim);
        L.wv = w.matrix(p + "self_attn.v_proj.weight", c.kv_dim(), c.dim);
      } else if (c.fused_qkv) {  // views of the fused matrices' row ranges
        const auto qkv = w.matrix(p + "self_attn.qkv_proj.weight", c.q_dim() + 2 * c.kv_dim(),
                                  c.dim, false, std::gcd(c.q_dim(), c.kv_dim()));
        L.wq = qkv.rows(0, c.q_dim());
        L.wk = qkv.rows(c.q_dim(), c.kv_dim());
        L.wv = qkv.rows(c.q_dim() + c.kv_dim(), c.kv_dim());
      } else {
        L.wq = w.matrix(p + "self_attn.q_proj.weight", c.q_dim(), c.dim);
        L.wk = w.matrix(p + "self_attn.k_proj.weight", c.kv_dim(), c.dim);
        L.wv = w.matrix(p + "self_attn.v_proj.weight", c.kv_dim(), c.dim);
      }
      if (L.gdn < 0) load_attention_rest(L, p);
      if (c.post_norms) {
        // Gemma 2/3: post_attention_layernorm follows attention; the MLP has its own pre and post.
        L.attn_post_norm = norm(p + "post_attention_layernorm.weight", c.dim);
        L.ffn_norm = norm(p + "pre_feedforward_layernorm.weight", c.dim);
        L.ffn_post_norm = norm(p + "post_feedforward_layernorm.weight", c.dim);
      } else {
        L.ffn_norm = norm(p + "post_attention_layernorm.weight", c.dim);
      }
      if (c.is_moe(l)) {
        load_experts(L, p);
      } else if (c.fused_qkv) {
        const auto gate_up =
            w.matrix(p + "mlp.gate_up_proj.weight", 2 * c.ffn_dim, c.dim, false, c.ffn_dim);
        L.w_gate = gate_up.rows(0, c.ffn_dim);
        L.w_up = gate_up.rows(c.ffn_dim, c.ffn_dim);
      } else {
        L.w_gate = w.matrix(p + "mlp.gate_proj.weight", c.ffn_dim, c.dim);
        L.w_up = w.matrix(p + "mlp.up_proj.weight", c.ffn_dim, c.dim);
      }
      if (!L.moe) L.w_down = w.matrix(p + "mlp.down_proj.weight", c.dim, c.ffn_dim);
      L.att.scale =
          c.attn_scale > 0.0f ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      L.att.softcap = c.attn_softcap;
      const bool sliding = c.is_sliding(l);
      if (sliding) L.att.window = c.sliding_window;
      L.rope = sliding && c.has_local_rope ? &local_rope_ : &rope_;
      layers_.push_back(L);
    }
    final_norm_ = norm("model.norm.weight", c.dim);
    lm_head_ = (c.tied_embeddings && !w.has("lm_head.weight"))
                   ? embed_
                   : w.matrix("lm_head.weight", c.vocab_size, c.dim);
  }

 protected:
  void run(std::span<const SequenceChunk> batch, std::span<const TokenPosition> tokens, KvCache& kv,
           float* logits, ThreadPool& pool) override {
    const ModelConfig& c = config_;
    const int64_t T = static_cast<int64_t>(tokens.size());
    transformer::Activations& a = act_;
    a.ensure(T, c);
    const int64_t dim = c.dim, q_dim = c.q_dim(), ffn = c.ffn_dim;

    int64_t t = 0;
    for (const auto& s : batch) {
      for (int32_t id : s.tokens) {
        float* row = a.x.data() + t * dim;
        embed_.dequantize_row(id, row);
        if (c.embed_scale > 0.0f)
          for (int64_t i = 0; i < dim; ++i) row[i] *= c.embed_scale;
        ++t;
      }
    }
    if (c.gated_attention) {
      transformer::grow(qg_, T * 2 * q_dim);
      transformer::grow(gate_, T * q_dim);
    }
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const LlamaLayer& L = layers_[l];
      transformer::for_rows(pool, T, [&](int64_t i) {
        kernels::rms_norm(a.x.data() + i * dim, L.attn_norm, c.norm_eps, dim,
                          a.xb.data() + i * dim);
      });
      if (L.gdn >= 0) {  // x += the Gated DeltaNet's output
        gdn_[L.gdn].forward(batch, a.xb.data(), T, kv, l, a.x.data(), gdn_scratch_, pool);
      } else {
        attention_block(L, batch, tokens, kv.layer(l), T, pool);
      }

      transformer::for_rows(pool, T, [&](int64_t i) {
        kernels::rms_norm(a.x.data() + i * dim, L.ffn_norm, c.norm_eps, dim, a.xb.data() + i * dim);
      });
      if (L.moe) {
        moe_mlp(L, T, pool);
        continue;
      }
      const kernels::MatmulOutput gate_up[] = {{L.w_gate, nullptr, a.h1.data()},
                                               {L.w_up, nullptr, a.h2.data()}};
      kernels::matmul_many(a.xb.data(), T, gate_up, pool);
      lora_add(batch, l, LoraTarget::kGate, a.xb.data(), dim, a.h1.data(), ffn, pool);
      lora_add(batch, l, LoraTarget::kUp, a.xb.data(), dim, a.h2.data(), ffn, pool);
      transformer::for_rows(pool, T, [&](int64_t i) {
        float* g = a.h1.data() + i * ffn;
        const float* u = a.h2.data() + i * ffn;
        if (c.act == ModelConfig::Act::kGeluTanh) {
          kernels::gelu_tanh(g, ffn);
          for (int64_t e = 0; e < ffn; ++e) g[e] *= u[e];
        } else {
          kernels::silu_mul(g, u, ffn);
        }
      });
      if (L.ffn_post_norm != nullptr) {
        kernels::matmul(a.h1.data(), T, L.w_down, nullptr, a.xb.data(), pool);
        lora_add(batch, l, LoraTarget::kDown, a.h1.data(), ffn, a.xb.data(), dim, pool);
        add_normed(L.ffn_post_norm, a.xb.data(), T, pool);
      } else {
        kernels::matmul_add(a.h1.data(), T, L.w_down, nullptr, a.x.data(), pool);
        lora_add(batch, l, LoraTarget::kDown, a.h1.data(), ffn, a.x.data(), dim, pool);
      }
    }
    const int64_t rows = transformer::gather_logit_rows(batch, a.x.data(), dim, a.xb.data());
    transformer::for_rows(pool, rows, [&](int64_t i) {
      kernels::rms_norm(a.xb.data() + i * dim, final_norm_, c.norm_eps, dim,
                        a.head_in.data() + i * dim);
    });
    if (hidden_out_)
      std::memcpy(hidden_out_, a.head_in.data(), static_cast<size_t>(rows * dim) * sizeof(float));
    kernels::matmul(a.head_in.data(), rows, lm_head_, nullptr, logits, pool);
    if (c.final_softcap > 0.0f) {
      const float cap = c.final_softcap, inv = 1.0f / cap;
      const int64_t V = c.vocab_size;
      transformer::for_rows(pool, rows, [&](int64_t i) {
        for (float* v = logits + i * V; v < logits + (i + 1) * V; ++v)
          *v = cap * std::tanh(*v * inv);
      });
    }
  }

 private:
  // x = x + attention(xb) (normed by attn_post_norm first, Gemma 2/3), a.xb the normed input.
  void attention_block(const LlamaLayer& L, std::span<const SequenceChunk> batch,
                       std::span<const TokenPosition> tokens, const kernels::PagedKvLayer& cache,
                       int64_t T, ThreadPool& pool) {
    const ModelConfig& c = config_;
    transformer::Activations& a = act_;
    const int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim();
    const kernels::MatmulOutput qkv[] = {{L.wq, L.bq, c.gated_attention ? qg_.data() : a.q.data()},
                                         {L.wk, L.bk, a.k.data()},
                                         {L.wv, L.bv, a.v.data()}};
    kernels::matmul_many(a.xb.data(), T, qkv, pool);
    const int64_t dim = c.dim, l = L.index;
    lora_add(batch, l, LoraTarget::kQ, a.xb.data(), dim,
             c.gated_attention ? qg_.data() : a.q.data(), c.gated_attention ? 2 * q_dim : q_dim,
             pool);
    lora_add(batch, l, LoraTarget::kK, a.xb.data(), dim, a.k.data(), kv_dim, pool);
    lora_add(batch, l, LoraTarget::kV, a.xb.data(), dim, a.v.data(), kv_dim, pool);
    transformer::for_rows(pool, T, [&](int64_t i) {
      float* q = a.q.data() + i * q_dim;
      if (c.gated_attention) {  // [q_h; gate_h] per head, apart
        const int64_t hd = c.head_dim;
        for (int64_t h = 0; h < c.n_heads; ++h) {
          const float* src = qg_.data() + i * 2 * q_dim + h * 2 * hd;
          std::copy_n(src, hd, q + h * hd);
          std::copy_n(src + hd, hd, gate_.data() + i * q_dim + h * hd);
        }
      }
      float* k = a.k.data() + i * kv_dim;
      if (c.qk_norm_full) {
        kernels::rms_norm(q, L.q_norm, c.norm_eps, q_dim, q);
        kernels::rms_norm(k, L.k_norm, c.norm_eps, kv_dim, k);
      } else if (c.qk_norm) {
        const int64_t hd = c.head_dim;
        for (int64_t h = 0; h < c.n_heads; ++h)
          kernels::rms_norm(q + h * hd, L.q_norm, c.norm_eps, hd, q + h * hd);
        for (int64_t h = 0; h < c.n_kv_heads; ++h)
          kernels::rms_norm(k + h * hd, L.k_norm, c.norm_eps, hd, k + h * hd);
      }
      L.rope->apply(q, static_cast<int>(c.n_heads), tokens[i].pos);
      L.rope->apply(k, static_cast<int>(c.n_kv_heads), tokens[i].pos);
    });
    transformer::store_kv(batch, tokens, cache, a.k.data(), a.v.data(), pool);
    transformer::attention(batch, tokens, cache, c, a.q.data(), a.att.data(), pool, &L.att,
                           L.sinks);
    if (c.gated_attention) {
      transformer::for_rows(pool, T, [&](int64_t i) {
        float* o = a.att.data() + i * q_dim;
        const float* g = gate_.data() + i * q_dim;
        for (int64_t j = 0; j < q_dim; ++j) o[j] *= transformer::sigmoid(g[j]);
      });
    }
    if (L.attn_post_norm != nullptr) {
      kernels::matmul(a.att.data(), T, L.wo, L.bo, a.xb.data(), pool);
      lora_add(batch, l, LoraTarget::kO, a.att.data(), q_dim, a.xb.data(), dim, pool);
      add_normed(L.attn_post_norm, a.xb.data(), T, pool);
    } else {
      kernels::matmul_add(a.att.data(), T, L.wo, L.bo, a.x.data(), pool);  // x += ...
      lora_add(batch, l, LoraTarget::kO, a.att.data(), q_dim, a.x.data(), dim, pool);
    }
  }

  // y += s B (A x) (a LoRA pair's correction of projection t of layer l; x [T, in], y [T, out])
  // for the rows of every sequence that runs with an adapter: per adapter, its rows gathered
  // (in place when they are one run), shrunk by A, expanded by B and added back, so a step of
  // many sequences over a few adapters makes two small products per adapter, not per sequence.
  void lora_add(std::span<const SequenceChunk> batch, int64_t l, LoraTarget t, const float* x,
                int64_t in, float* y, int64_t out, ThreadPool& pool) {
    lora_groups_.clear();
    int64_t row = 0;
    for (const SequenceChunk& s : batch) {
      const int64_t n = static_cast<int64_t>(s.tokens.size());
      if (s.lora != nullptr && s.lora->pair(l, t) != nullptr) {
        auto g = std::find_if(lora_groups_.begin(), lora_groups_.end(),
                              [&](const LoraGroup& e) { return e.adapter == s.lora; });
        if (g == lora_groups_.end()) g = lora_groups_.insert(g, LoraGroup{s.lora, {}, 0});
        if (!g->runs.empty() && g->runs.back().first + g->runs.back().second == row)
          g->runs.back().second += n;  // continues the last run
        else
          g->runs.push_back({row, n});
        g->rows += n;
      }
      row += n;
    }
    // Each group's scratch: its gathered rows, their shrunk [rows, rank] and expanded rows.
    int64_t x_size = 0, t_size = 0, y_size = 0;
    for (LoraGroup& g : lora_groups_) {
      const int64_t rank = g.adapter->pair(l, t)->rank;
      g.x_at = x_size;
      g.t_at = t_size;
      g.y_at = y_size;
      t_size += g.rows * rank;
      if (g.runs.size() > 1) {
        x_size += g.rows * in;
        y_size += g.rows * out;
      }
    }
    transformer::grow(lora_tmp_, t_size);
    transformer::grow(lora_x_, x_size);
    transformer::grow(lora_y_, y_size);
    // One group's correction: its products split over the pool, or inline when called from a
    // piece of the pool (below).
    const auto apply = [&](const LoraGroup& g, ThreadPool& on) {
      const LoraPair* p = g.adapter->pair(l, t);
      const int64_t n = g.rows;
      float* tmp = lora_tmp_.data() + g.t_at;
      if (g.runs.size() == 1) {
        const int64_t r0 = g.runs[0].first;
        kernels::matmul(x + r0 * in, n, p->a, nullptr, tmp, on);
        kernels::matmul_add(tmp, n, p->b, nullptr, y + r0 * out, on);
        return;
      }
      float* gx = lora_x_.data() + g.x_at;
      float* gy = lora_y_.data() + g.y_at;
      int64_t at = 0;
      for (const auto& [r0, cnt] : g.runs) {
        std::copy_n(x + r0 * in, cnt * in, gx + at * in);
        at += cnt;
      }
      kernels::matmul(gx, n, p->a, nullptr, tmp, on);
      kernels::matmul(tmp, n, p->b, nullptr, gy, on);
      at = 0;
      for (const auto& [r0, cnt] : g.runs) {
        kernels::add(y + r0 * out, gy + at * out, cnt * out);
        at += cnt;
      }
    };
    // As many groups as threads, each of a few rows (decode): a group per piece, its two small
    // products inline (one dispatch to the pool for all of them, not two per group: a decode
    // step over 8 adapters makes 16 small products per layer and projection). Fewer groups, or
    // one with a prompt's many rows: each group's products split over the pool.
    const int64_t groups = static_cast<int64_t>(lora_groups_.size());
    int64_t most_rows = 0;
    for (const LoraGroup& g : lora_groups_) most_rows = std::max(most_rows, g.rows);
    if (groups >= pool.size() && most_rows <= 64) {
      pool.parallel_for(groups, [&](int64_t g0, int64_t g1) {
        for (int64_t g = g0; g < g1; ++g) apply(lora_groups_[static_cast<size_t>(g)], pool);
      });
    } else {
      for (const LoraGroup& g : lora_groups_) apply(g, pool);
    }
  }

  // x += norm(y) row by row (the norms after attention and MLP of Gemma 2/3).
  void add_normed(const float* y_norm, float* y, int64_t T, ThreadPool& pool) {
    const int64_t dim = config_.dim;
    transformer::for_rows(pool, T, [&](int64_t i) {
      float* yi = y + i * dim;
      kernels::rms_norm(yi, y_norm, config_.norm_eps, dim, yi);
      kernels::add(act_.x.data() + i * dim, yi, dim);
    });
  }

  // An attention layer's output projection, biases, q/k norms and sinks.
  void load_attention_rest(LlamaLayer& L, const std::string& p) {
    const ModelConfig& c = config_;
    WeightStore& w = weights_;
    L.wo = w.matrix(p + "self_attn.o_proj.weight", c.dim, c.q_dim());
    if (c.qkv_bias) {
      L.bq = w.f32(p + "self_attn.q_proj.bias", {c.q_dim()});
      L.bk = w.f32(p + "self_attn.k_proj.bias", {c.kv_dim()});
      L.bv = w.f32(p + "self_attn.v_proj.bias", {c.kv_dim()});
    }
    if (c.o_bias) L.bo = w.f32(p + "self_attn.o_proj.bias", {c.dim});
    if (c.qk_norm) {
      L.q_norm = norm(p + "self_attn.q_norm.weight", c.qk_norm_full ? c.q_dim() : c.head_dim);
      L.k_norm = norm(p + "self_attn.k_norm.weight", c.qk_norm_full ? c.kv_dim() : c.head_dim);
    }
    if (c.attn_sinks) L.sinks = w.f32(p + "self_attn.sinks", {c.n_heads});
  }

  void load_experts(LlamaLayer& L, const std::string& p) {
    const ModelConfig& c = config_;
    WeightStore& w = weights_;
    if (c.moe_names == ModelConfig::MoeNames::kGptOss) {
      load_gpt_oss_experts(L, p);
      return;
    }
    // Mixtral's v4 names sit under block_sparse_moe (w1/w3/w2); transformers v5 saves every
    // family under mlp.
    const bool mixtral =
        c.moe_names == ModelConfig::MoeNames::kMixtral && w.has(p + "block_sparse_moe.gate.weight");
    const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
    L.moe = true;
    L.router = w.matrix(moe + "gate.weight", c.n_experts, c.dim);
    const int64_t E = c.n_experts, I = c.expert_ffn_dim;
    const std::string x = moe + "experts.";
    if (w.has(x + "gate_up_proj")) {
      // transformers v5: every expert's gate and up stacked [E, 2I, H] (gate first), down
      // [E, H, I].
      for (const auto& m : w.matrix_stack(x + "gate_up_proj", E, 2 * I, c.dim, I)) {
        L.e_gate.push_back(m.rows(0, I));
        L.e_up.push_back(m.rows(I, I));
      }
      L.e_down = w.matrix_stack(x + "down_proj", E, c.dim, I);
    } else if (w.has(x + "gate_proj")) {  // GGUF's ffn_{gate,up,down}_exps: [E, I, H], [E, H, I]
      L.e_gate = w.matrix_stack(x + "gate_proj", E, I, c.dim);
      L.e_up = w.matrix_stack(x + "up_proj", E, I, c.dim);
      L.e_down = w.matrix_stack(x + "down_proj", E, c.dim, I);
    } else {  // one tensor per expert and matrix (transformers v4)
      for (int64_t e = 0; e < E; ++e) {
        const std::string xe = x + std::to_string(e) + ".";
        L.e_gate.push_back(w.matrix(xe + (mixtral ? "w1.weight" : "gate_proj.weight"), I, c.dim));
        L.e_up.push_back(w.matrix(xe + (mixtral ? "w3.weight" : "up_proj.weight"), I, c.dim));
        L.e_down.push_back(w.matrix(xe + (mixtral ? "w2.weight" : "down_proj.weight"), c.dim, I));
      }
    }
    if (c.shared_ffn_dim > 0) {
      L.shared = true;
      const int64_t S = c.shared_ffn_dim;
      L.s_gate = w.matrix(moe + "shared_expert.gate_proj.weight", S, c.dim);
      L.s_up = w.matrix(moe + "shared_expert.up_proj.weight", S, c.dim);
      L.s_down = w.matrix(moe + "shared_expert.down_proj.weight", c.dim, S);
      if (c.shared_expert_gate) L.s_gate_w = w.matrix(moe + "shared_expert_gate.weight", 1, c.dim);
    }
  }

  // gpt-oss's experts as Hugging Face stores them (mlp.router with a bias; mlp.experts.gate_up_proj
  // with gate and up interleaved column by column and its bias likewise, down_proj and its bias):
  // in OpenAI's MXFP4 (*_blocks [E, rows, k / 32, 16] whose bytes hold elements 2i (low nibble)
  // and 2i + 1 (high), *_scales [E, rows, k / 32] E8M0 bytes; rows are outputs), laid out at load
  // as ggml MXFP4 blocks and computed as stored; or dequantized ([E, k, rows]: inputs first),
  // taken apart into f32 matrices. GGUF's (llama.cpp's converter split gate and up already):
  // mlp.experts.{gate,up,down}_proj stacked [E, rows, k] with their *_bias.
  void load_gpt_oss_experts(LlamaLayer& L, const std::string& p) {
    const ModelConfig& c = config_;
    WeightStore& w = weights_;
    const int64_t E = c.n_experts, I = c.expert_ffn_dim, H = c.dim;
    L.moe = true;
    L.router = w.matrix(p + "mlp.router.weight", E, H);
    L.router_b = w.f32(p + "mlp.router.bias", {E});
    const std::string x = p + "mlp.experts.";
    if (w.has(x + "gate_proj")) {  // GGUF
      L.e_gate = w.matrix_stack(x + "gate_proj", E, I, H);
      L.e_up = w.matrix_stack(x + "up_proj", E, I, H);
      L.e_down = w.matrix_stack(x + "down_proj", E, H, I);
      L.e_gate_b = w.f32(x + "gate_proj_bias", {E, I});
      L.e_up_b = w.f32(x + "up_proj_bias", {E, I});
      L.e_down_b = w.f32(x + "down_proj_bias", {E, H});
      return;
    }
    // The interleaved gate/up bias split in two.
    const float* gub = w.f32(x + "gate_up_proj_bias", {E, 2 * I});
    owned_.emplace_back(static_cast<size_t>(2 * E * I));
    float* split = owned_.back().data();
    for (int64_t e = 0; e < E; ++e)
      for (int64_t i = 0; i < I; ++i) {
        split[e * I + i] = gub[e * 2 * I + 2 * i];
        split[E * I + e * I + i] = gub[e * 2 * I + 2 * i + 1];
      }
    L.e_gate_b = split;
    L.e_up_b = split + E * I;
    L.e_down_b = w.f32(x + "down_proj_bias", {E, H});
    const std::string gate = x + "gate_proj.tf_split", up = x + "up_proj.tf_split",
                      down = x + "down_proj.tf_split";
    if (w.has(x + "gate_up_proj_blocks")) {
      // rows r of the source (pick: even rows for gate, odd for up, all for down) into ggml
      // blocks: byte 0 the scale, then element j in the low nibble of byte j and element j + 16
      // in its high one.
      const auto convert = [&](const std::string& name, int64_t rows, int64_t k, int64_t first,
                               int64_t step, const std::string& out) {
        const int64_t g = k / 32;
        if (k % 32 != 0) fail("'{}': rows of {} values are not whole MXFP4 blocks", name, k);
        const TensorView& blocks = w.get(name + "_blocks");
        const TensorView& scales = w.get(name + "_scales");
        const int64_t src_rows = rows * step;
        if (blocks.dtype != DType::kU8 || !(blocks.shape == Shape{E, src_rows, g, 16}) ||
            scales.dtype != DType::kU8 || !(scales.shape == Shape{E, src_rows, g}))
          fail("'{}_blocks' / '_scales' must be U8 [{}, {}, {}, 16] / [{}, {}, {}] (MXFP4)", name,
               E, src_rows, g, E, src_rows, g);
        const auto* b = static_cast<const uint8_t*>(blocks.data);
        const auto* s = static_cast<const uint8_t*>(scales.data);
        uint8_t* o = w.add_owned_blocks(out, Shape{E, rows, k}, kernels::WeightType::kMXFP4,
                                        w.file_index_of(name + "_blocks"));
        for (int64_t e = 0; e < E; ++e)
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t src = e * src_rows + first + r * step;
            for (int64_t blk = 0; blk < g; ++blk, o += 17) {
              const uint8_t* in = b + (src * g + blk) * 16;
              o[0] = s[src * g + blk];
              const auto nib = [&](int v) { return (in[v / 2] >> (4 * (v % 2))) & 0xF; };
              for (int j = 0; j < 16; ++j)
                o[1 + j] = static_cast<uint8_t>(nib(j) | nib(j + 16) << 4);
            }
          }
      };
      convert(x + "gate_up_proj", I, H, 0, 2, gate);
      convert(x + "gate_up_proj", I, H, 1, 2, up);
      convert(x + "down_proj", H, I, 0, 1, down);
    } else {
      // Dequantized: [E, k, rows], rows of gate_up interleaved.
      const auto split_float = [&](const std::string& name, int64_t rows, int64_t k, int64_t first,
                                   int64_t step, const std::string& out) {
        const int64_t cols = rows * step;
        const float* src = w.f32(name, {E, k, cols});
        std::vector<float> v(static_cast<size_t>(E * rows * k));
        for (int64_t e = 0; e < E; ++e)
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < k; ++i)
              v[(e * rows + r) * k + i] = src[(e * k + i) * cols + first + r * step];
        w.add_f32(out, Shape{E, rows, k}, std::move(v), w.file_index_of(name));
      };
      split_float(x + "gate_up_proj", I, H, 0, 2, gate);
      split_float(x + "gate_up_proj", I, H, 1, 2, up);
      split_float(x + "down_proj", H, I, 0, 1, down);
    }
    L.e_gate = w.matrix_stack(gate, E, I, H);
    L.e_up = w.matrix_stack(up, E, I, H);
    L.e_down = w.matrix_stack(down, E, H, I);
  }

  // The mixture of experts on a.xb (the normed rows), added into a.x. Each token's router
  // softmax picks its top n_experts_used (ties to the lower index), weighted by their
  // probabilities (renormalized over the chosen when norm_topk_prob). The batch's tokens are
  // grouped by expert so that each chosen expert multiplies only its rows (decode reads only the
  // experts its tokens chose); each token then sums its experts in expert order, so its result
  // does not depend on the other tokens.
  void moe_mlp(const LlamaLayer& L, int64_t T, ThreadPool& pool) {
    const ModelConfig& c = config_;
    transformer::Activations& a = act_;
    const int64_t E = c.n_experts, K = c.n_experts_used, I = c.expert_ffn_dim, dim = c.dim;
    using transformer::grow;
    grow(moe_logits_, T * E);
    kernels::matmul(a.xb.data(), T, L.router, L.router_b, moe_logits_.data(), pool);
    choice_.resize(static_cast<size_t>(T * K));
    weight_.resize(static_cast<size_t>(T * K));
    std::vector<int64_t>& count = moe_count_;
    std::vector<int32_t>& idx = moe_idx_;
    count.assign(static_cast<size_t>(E + 1), 0);
    idx.resize(static_cast<size_t>(E));
    for (int64_t t = 0; t < T; ++t) {
      float* p = moe_logits_.data() + t * E;
      kernels::softmax(p, E);
      for (int64_t e = 0; e < E; ++e) idx[e] = static_cast<int32_t>(e);
      std::partial_sort(idx.begin(), idx.begin() + K, idx.end(), [&](int32_t x, int32_t y) {
        return p[x] > p[y] || (p[x] == p[y] && x < y);
      });
      float sum = 0.0f;
      for (int64_t r = 0; r < K; ++r) sum += p[idx[r]];
      // The chosen experts in expert order: the order their outputs are summed in.
      std::sort(idx.begin(), idx.begin() + K);
      for (int64_t r = 0; r < K; ++r) {
        choice_[t * K + r] = idx[r];
        weight_[t * K + r] = c.norm_topk_prob ? p[idx[r]] / sum : p[idx[r]];
        ++count[idx[r] + 1];
      }
    }
    for (int64_t e = 0; e < E; ++e) count[e + 1] += count[e];  // each expert's first slot
    std::vector<int64_t>& next = moe_next_;
    next.assign(count.begin(), count.end() - 1);
    slot_.resize(static_cast<size_t>(T * K));
    grow(moe_x_, T * K * dim);
    grow(moe_h1_, T * K * I);
    grow(moe_h2_, T * K * I);
    grow(moe_y_, T * K * dim);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t r = 0; r < K; ++r) {
        const int64_t s = next[choice_[t * K + r]]++;
        slot_[t * K + r] = s;
        std::copy_n(a.xb.data() + t * dim, dim, moe_x_.data() + s * dim);
      }
    }
    for (int64_t e = 0; e < E; ++e) {
      const int64_t b = count[e], n = count[e + 1] - count[e];
      if (n == 0) continue;
      const float* gb = L.e_gate_b ? L.e_gate_b + e * I : nullptr;
      const float* ub = L.e_up_b ? L.e_up_b + e * I : nullptr;
      const kernels::MatmulOutput gate_up[] = {{L.e_gate[e], gb, moe_h1_.data() + b * I},
                                               {L.e_up[e], ub, moe_h2_.data() + b * I}};
      kernels::matmul_many(moe_x_.data() + b * dim, n, gate_up, pool);
      transformer::for_rows(pool, n, [&](int64_t i) {
        float* g = moe_h1_.data() + (b + i) * I;
        const float* u = moe_h2_.data() + (b + i) * I;
        if (c.clamped_swiglu) {
          const float limit = c.swiglu_limit, alpha = c.swiglu_alpha;
          for (int64_t v = 0; v < I; ++v) {
            const float gv = std::min(g[v], limit);
            const float uv = std::clamp(u[v], -limit, limit);
            g[v] = (uv + 1.0f) * (gv / (1.0f + std::exp(-alpha * gv)));
          }
        } else {
          kernels::silu_mul(g, u, I);
        }
      });
      kernels::matmul(moe_h1_.data() + b * I, n, L.e_down[e],
                      L.e_down_b ? L.e_down_b + e * dim : nullptr, moe_y_.data() + b * dim, pool);
    }
    if (L.shared) {
      const int64_t S = c.shared_ffn_dim;
      grow(shared_h1_, T * S);
      grow(shared_h2_, T * S);
      grow(shared_y_, T * dim);
      grow(shared_g_, T);
      const kernels::MatmulOutput gate_up[] = {{L.s_gate, nullptr, shared_h1_.data()},
                                               {L.s_up, nullptr, shared_h2_.data()}};
      kernels::matmul_many(a.xb.data(), T, gate_up, pool);
      transformer::for_rows(pool, T, [&](int64_t i) {
        kernels::silu_mul(shared_h1_.data() + i * S, shared_h2_.data() + i * S, S);
      });
      kernels::matmul(shared_h1_.data(), T, L.s_down, nullptr, shared_y_.data(), pool);
      if (c.shared_expert_gate)
        kernels::matmul(a.xb.data(), T, L.s_gate_w, nullptr, shared_g_.data(), pool);
    }
    transformer::for_rows(pool, T, [&](int64_t t) {
      float* x = a.x.data() + t * dim;
      for (int64_t r = 0; r < K; ++r) {
        const float wgt = weight_[t * K + r];
        const float* y = moe_y_.data() + slot_[t * K + r] * dim;
        for (int64_t i = 0; i < dim; ++i) x[i] += wgt * y[i];
      }
      if (L.shared) {
        const float g = c.shared_expert_gate ? 1.0f / (1.0f + std::exp(-shared_g_[t])) : 1.0f;
        const float* y = shared_y_.data() + t * dim;
        for (int64_t i = 0; i < dim; ++i) x[i] += g * y[i];
      }
    });
  }

  // A norm's weights as applied: stored in place, or (1 + w) for Gemma (a copy).
  const float* norm(const std::string& name, int64_t n) {
    const float* w = weights_.f32(name, {n});
    if (!config_.norm_plus_one) return w;
    owned_.emplace_back(w, w + n);
    for (float& v : owned_.back()) v += 1.0f;
    return owned_.back().data();
  }

  kernels::WeightMatrix embed_;
  const float* final_norm_ = nullptr;
  kernels::WeightMatrix lm_head_;
  std::vector<LlamaLayer> layers_;
  Rope rope_, local_rope_;
  std::deque<std::vector<float>> owned_;  // (1 + w) norms
  // Mixture-of-experts scratch (grown, never shrunk).
  std::vector<float> moe_logits_, moe_x_, moe_h1_, moe_h2_, moe_y_;
  std::vector<float> shared_h1_, shared_h2_, shared_y_, shared_g_;
  std::vector<int32_t> choice_;
  std::vector<float> weight_;
  std::vector<int64_t> slot_, moe_count_, moe_next_;
  std::vector<int32_t> moe_idx_;
  transformer::Activations act_;
  // Qwen3-Next / Qwen3.5: the Gated DeltaNet layers, their scratch, the gated attention's
  // q_proj output and gates.
  std::deque<GatedDeltaNet> gdn_;
  GatedDeltaNet::Scratch gdn_scratch_;
  std::vector<float> qg_, gate_;
  // LoRA: the rows of each adapter in a step (their runs: first row, count), and scratch for
  // the gathered rows, their x A^T and its B.
  struct LoraGroup {
    const LoraAdapter* adapter;
    std::vector<std::pair<int64_t, int64_t>> runs;  // (first row, rows) of its sequences
    int64_t rows;
    int64_t x_at = 0, t_at = 0, y_at = 0;  // its parts of lora_x_, lora_tmp_, lora_y_
  };
  std::vector<LoraGroup> lora_groups_;
  std::vector<float> lora_tmp_, lora_x_, lora_y_;
};

}  // namespace

std::unique_ptr<Model> make_llama(ModelConfig config, WeightStore weights) {
  return std::make_unique<LlamaModel>(std::move(config), std::move(weights));
}

}  // namespace tf
