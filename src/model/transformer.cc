#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"

namespace tf::transformer {

namespace {
void grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}
}  // namespace

void Activations::ensure(int64_t n, const ModelConfig& c) {
  grow(x, n * c.dim);
  grow(xb, n * std::max(c.dim, c.q_dim()));
  grow(q, n * c.q_dim());
  grow(k, n * c.kv_dim());
  grow(v, n * c.kv_dim());
  grow(att, n * c.q_dim());
  grow(h1, n * c.ffn_dim);
  grow(h2, n * c.ffn_dim);
  grow(head_in, n * c.dim);
}

void for_rows(ThreadPool& pool, int64_t n, FunctionRef<void(int64_t)> fn) {
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) fn(t);
  });
}

void store_kv(std::span<const SequenceChunk> batch, std::span<const TokenPosition> tokens,
              const kernels::PagedKvLayer& layer, const float* k, const float* v,
              ThreadPool& pool) {
  const int64_t kv_dim = layer.kv_dim;
  for_rows(pool, static_cast<int64_t>(tokens.size()), [&](int64_t t) {
    const int32_t* table = batch[tokens[t].seq].block_table.data();
    std::memcpy(layer.k_row(table, tokens[t].pos), k + t * kv_dim, kv_dim * sizeof(float));
    std::memcpy(layer.v_row(table, tokens[t].pos), v + t * kv_dim, kv_dim * sizeof(float));
  });
}

void attention(std::span<const SequenceChunk> batch, std::span<const TokenPosition> tokens,
               const kernels::PagedKvLayer& layer, const ModelConfig& c, const float* q, float* out,
               ThreadPool& pool) {
  const int64_t n_heads = c.n_heads;
  const int64_t group = c.n_heads / c.n_kv_heads;
  const int hd = static_cast<int>(c.head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t q_dim = c.q_dim();
  // One task per (token, head): decode batches of one sequence still spread over the pool.
  for_rows(pool, static_cast<int64_t>(tokens.size()) * n_heads, [&](int64_t i) {
    const int64_t t = i / n_heads;
    const int64_t h = i % n_heads;
    const int32_t* table = batch[tokens[t].seq].block_table.data();
    kernels::attend_head(q + t * q_dim + h * hd, layer, table, tokens[t].pos + 1,
                         static_cast<int>(h / group), hd, scale, out + t * q_dim + h * hd);
  });
}

int64_t gather_logit_rows(std::span<const SequenceChunk> batch, const float* x, int64_t dim,
                          float* out) {
  int64_t row = 0;
  int64_t t0 = 0;
  for (const auto& s : batch) {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    const int64_t first = s.all_logits ? 0 : n - 1;
    for (int64_t i = first; i < n; ++i) {
      std::memcpy(out + row * dim, x + (t0 + i) * dim, dim * sizeof(float));
      ++row;
    }
    t0 += n;
  }
  return row;
}

}  // namespace tf::transformer
