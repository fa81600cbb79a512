#pragma once
// Pieces shared by the decoder-only architectures: scratch buffers, row-parallel loops, writing
// K/V into the paged cache, attention over a ragged batch, and the LM head.

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "model/model.h"

namespace tf::transformer {

// Scalar activations of the recurrent layers (Mamba, Gated DeltaNet), as PyTorch computes them.
inline float sigmoid(float v) {
  return 1.0f / (1.0f + std::exp(-v));
}
inline float silu(float v) {
  return v / (1.0f + std::exp(-v));
}
// PyTorch's softplus (beta 1, threshold 20).
inline float softplus(float v) {
  return v > 20.0f ? v : std::log1p(std::exp(v));
}

// Grows v to at least n floats (scratch buffers only grow: steady state allocates nothing).
void grow(std::vector<float>& v, int64_t n);

// Scratch for one forward pass. Buffers only grow, so steady-state decoding allocates nothing.
struct Activations {
  std::vector<float> x, xb, q, k, v, att, h1, h2, head_in;
  void ensure(int64_t n_tokens, const ModelConfig& c);
};

// fn(t) for t in [0, n), rows split over the pool.
void for_rows(ThreadPool& pool, int64_t n, FunctionRef<void(int64_t)> fn);

// Writes one position's K and V rows (kv_dim floats each) into the cache through a block table,
// in the cache's type.
// A row of n values as q8_0 (attention.h): per group of `group` values, the scale
// max|x| / 127 as f16 in scales[g] and round(x / scale) in q.
void quantize_kv_q8(const float* x, int64_t n, int64_t group, int8_t* q, uint16_t* scales);
void store_kv_row(const kernels::PagedKvLayer& layer, const int32_t* table, int64_t pos,
                  const float* k, const float* v);
// Reads one position's K or V row back as floats (which: 0 keys, 1 values).
void load_kv_row(const kernels::PagedKvLayer& layer, const int32_t* table, int64_t pos, int which,
                 float* out);

// Writes each token's K and V rows into the cache at its position.
void store_kv(std::span<const SequenceChunk> batch, std::span<const TokenPosition> tokens,
              const kernels::PagedKvLayer& layer, const float* k, const float* v, ThreadPool& pool);

// Causal attention of every token over its own sequence's cache (positions <= its own).
// q is [T, n_heads * head_dim]; out has the same shape. opts: scale 1/sqrt(head_dim), no window
// and no soft-cap unless given; head_sinks: a sink logit per query head (gpt-oss), or none.
void attention(std::span<const SequenceChunk> batch, std::span<const TokenPosition> tokens,
               const kernels::PagedKvLayer& layer, const ModelConfig& c, const float* q, float* out,
               ThreadPool& pool, const kernels::AttentionOpts* opts = nullptr,
               const float* head_sinks = nullptr);

// The softmax-weighted values of one query over n keys (rows of kv_dim floats: this head's at
// offset h * dk), scores scale * q.k plus bias[j] where bias is given (T5's position bias).
// scores: n floats of scratch; out: dk floats.
void attend(const float* q, const float* keys, const float* values, int64_t n, int64_t kv_dim,
            int64_t h, int64_t dk, float scale, const float* bias, float* scores, float* out);

// The LayerNorm-headed models' end (GPT-2, GPT-J, CodeGen, GPT-NeoX): the rows that need logits
// gathered from x, LayerNorm(w, b) into a.head_in, copied to hidden when given, times the LM
// head (with its bias, if any) into logits.
void layer_norm_logits(std::span<const SequenceChunk> batch, const float* x, const float* w,
                       const float* b, const ModelConfig& c, const kernels::WeightMatrix& head,
                       const float* head_bias, Activations& a, float* hidden, float* logits,
                       ThreadPool& pool);

// Gathers the rows that need logits (all tokens of all_logits sequences, else each sequence's
// last) from x into out; returns how many.
int64_t gather_logit_rows(std::span<const SequenceChunk> batch, const float* x, int64_t dim,
                          float* out);

}  // namespace tf::transformer
