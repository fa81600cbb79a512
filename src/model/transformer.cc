#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "kernels/attention.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace tf::transformer {

void grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

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

void quantize_kv_q8(const float* x, int64_t n, int64_t group, int8_t* q, uint16_t* scales) {
  for (int64_t g0 = 0; g0 < n; g0 += group) {
    float amax = 0.0f;
    for (int64_t i = g0; i < g0 + group; ++i) amax = std::max(amax, std::fabs(x[i]));
    // The scale as stored (f16), and the values divided by that one: what is read back is
    // exactly scale * q.
    const uint16_t h = f32_to_f16(amax / 127.0f);
    const float d = f16_to_f32(h);
    const float inv = d > 0.0f && std::isfinite(d) ? 1.0f / d : 0.0f;
    for (int64_t i = g0; i < g0 + group; ++i)
      q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f));
    scales[g0 / group] = h;
  }
}

void store_kv_row(const kernels::PagedKvLayer& layer, const int32_t* table, int64_t pos,
                  const float* ks, const float* vs) {
  const int64_t kv_dim = layer.kv_dim;
  switch (layer.type) {
    case kernels::KvType::kF32:
      std::memcpy(layer.k_row(table, pos), ks, kv_dim * sizeof(float));
      std::memcpy(layer.v_row(table, pos), vs, kv_dim * sizeof(float));
      break;
    case kernels::KvType::kBF16:
    case kernels::KvType::kF16: {
      uint16_t* kd = layer.k_at<uint16_t>(table, pos);
      uint16_t* vd = layer.v_at<uint16_t>(table, pos);
      const bool bf = layer.type == kernels::KvType::kBF16;
      for (int64_t i = 0; i < kv_dim; ++i) {
        kd[i] = bf ? f32_to_bf16(ks[i]) : f32_to_f16(ks[i]);
        vd[i] = bf ? f32_to_bf16(vs[i]) : f32_to_f16(vs[i]);
      }
      break;
    }
    case kernels::KvType::kQ8_0:
      quantize_kv_q8(ks, kv_dim, layer.scale_group, layer.k_at<int8_t>(table, pos),
                     layer.k_scales(table, pos));
      quantize_kv_q8(vs, kv_dim, layer.scale_group, layer.v_at<int8_t>(table, pos),
                     layer.v_scales(table, pos));
      break;
  }
}

void load_kv_row(const kernels::PagedKvLayer& layer, const int32_t* table, int64_t pos, int which,
                 float* out) {
  const int64_t kv_dim = layer.kv_dim;
  switch (layer.type) {
    case kernels::KvType::kF32:
      std::memcpy(out, which == 0 ? layer.k_row(table, pos) : layer.v_row(table, pos),
                  kv_dim * sizeof(float));
      break;
    case kernels::KvType::kBF16:
    case kernels::KvType::kF16: {
      const uint16_t* src =
          which == 0 ? layer.k_at<uint16_t>(table, pos) : layer.v_at<uint16_t>(table, pos);
      const bool bf = layer.type == kernels::KvType::kBF16;
      for (int64_t i = 0; i < kv_dim; ++i) out[i] = bf ? bf16_to_f32(src[i]) : f16_to_f32(src[i]);
      break;
    }
    case kernels::KvType::kQ8_0: {
      const int8_t* q =
          which == 0 ? layer.k_at<int8_t>(table, pos) : layer.v_at<int8_t>(table, pos);
      const uint16_t* sc = which == 0 ? layer.k_scales(table, pos) : layer.v_scales(table, pos);
      const int64_t g = layer.scale_group;
      for (int64_t i = 0; i < kv_dim; ++i)
        out[i] = f16_to_f32(sc[i / g]) * static_cast<float>(q[i]);
      break;
    }
  }
}

void store_kv(std::span<const SequenceChunk> batch, std::span<const TokenPosition> tokens,
              const kernels::PagedKvLayer& layer, const float* k, const float* v,
              ThreadPool& pool) {
  const int64_t kv_dim = layer.kv_dim;
  for_rows(pool, static_cast<int64_t>(tokens.size()), [&](int64_t t) {
    store_kv_row(layer, batch[tokens[t].seq].table(layer.group), tokens[t].pos, k + t * kv_dim,
                 v + t * kv_dim);
  });
}

void attention(std::span<const SequenceChunk> batch, std::span<const TokenPosition> tokens,
               const kernels::PagedKvLayer& layer, const ModelConfig& c, const float* q, float* out,
               ThreadPool& pool, const kernels::AttentionOpts* opts, const float* head_sinks) {
  const int64_t group = c.n_heads / c.n_kv_heads;
  const int hd = static_cast<int>(c.head_dim);
  const kernels::AttentionOpts att =
      opts != nullptr ? *opts
                      : kernels::AttentionOpts(1.0f / std::sqrt(static_cast<float>(c.head_dim)));
  const int64_t q_dim = c.q_dim();
  // Tasks of up to kMaxAttentionQueries queries that share a sequence and a KV head (tokens of
  // a prefill chunk, the heads of a GQA group), so that they share the loads of its keys and
  // values. Grouping never changes a query's result (see attend_queries).
  struct Task {
    int64_t seq, kv_head, first, count;  // queries [first, first + count) of (seq, kv_head)
  };
  thread_local std::vector<Task> task_buffer;
  thread_local std::vector<int64_t> start_buffer;
  // References: inside the pool's lambda a thread_local name would be the worker's own.
  std::vector<Task>& tasks = task_buffer;
  std::vector<int64_t>& chunk_start = start_buffer;
  tasks.clear();
  chunk_start.assign(batch.size() + 1, 0);
  for (size_t s = 0; s < batch.size(); ++s)
    chunk_start[s + 1] = chunk_start[s] + static_cast<int64_t>(batch[s].tokens.size());
  constexpr int64_t kQ = kernels::kMaxAttentionQueries;
  // Up to kQ queries a task (a GQA group of eight reads its keys and values once); half as many
  // where that would leave compute threads without a task (one sequence of a model with fewer
  // KV heads than threads).
  int64_t queries = 0;
  for (const auto& s : batch) queries += static_cast<int64_t>(s.tokens.size()) * group;
  const int64_t per_task = queries * c.n_kv_heads < kQ * pool.size() ? kQ / 2 : kQ;
  for (size_t s = 0; s < batch.size(); ++s) {
    const int64_t n_queries = static_cast<int64_t>(batch[s].tokens.size()) * group;
    for (int64_t g = 0; g < c.n_kv_heads; ++g) {
      for (int64_t f = 0; f < n_queries; f += per_task)
        tasks.push_back({static_cast<int64_t>(s), g, f, std::min(per_task, n_queries - f)});
    }
  }
  for_rows(pool, static_cast<int64_t>(tasks.size()), [&](int64_t i) {
    const Task& task = tasks[i];
    const float* qs[kQ];
    float* outs[kQ];
    int64_t n_ctx[kQ];
    float sinks[kQ];
    for (int64_t r = 0; r < task.count; ++r) {
      // Query index within (seq, kv_head): token-major, then the heads of the group.
      const int64_t t = chunk_start[task.seq] + (task.first + r) / group;
      const int64_t h = task.kv_head * group + (task.first + r) % group;
      qs[r] = q + t * q_dim + h * hd;
      outs[r] = out + t * q_dim + h * hd;
      n_ctx[r] = tokens[t].pos + 1;
      if (head_sinks != nullptr) sinks[r] = head_sinks[h];
    }
    kernels::AttentionOpts task_att = att;
    if (head_sinks != nullptr) task_att.sinks = sinks;
    kernels::attend_queries(qs, n_ctx, static_cast<int>(task.count), layer,
                            batch[task.seq].table(layer.group), static_cast<int>(task.kv_head), hd,
                            task_att, outs);
  });
}

void layer_norm_logits(std::span<const SequenceChunk> batch, const float* x, const float* w,
                       const float* b, const ModelConfig& c, const kernels::WeightMatrix& head,
                       const float* head_bias, Activations& a, float* hidden, float* logits,
                       ThreadPool& pool) {
  const int64_t dim = c.dim;
  const int64_t rows = gather_logit_rows(batch, x, dim, a.xb.data());
  for_rows(pool, rows, [&](int64_t i) {
    kernels::layer_norm(a.xb.data() + i * dim, w, b, c.norm_eps, dim, a.head_in.data() + i * dim);
  });
  if (hidden)
    std::memcpy(hidden, a.head_in.data(), static_cast<size_t>(rows * dim) * sizeof(float));
  kernels::matmul(a.head_in.data(), rows, head, head_bias, logits, pool);
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

void attend(const float* q, const float* keys, const float* values, int64_t n, int64_t kv_dim,
            int64_t h, int64_t dk, float scale, const float* bias, float* scores, float* out) {
  // The ISA table's dot product and axpy: the scalar loops took ~40 % of a BERT-base step.
  const kernels::IsaKernels& isa = kernels::isa();
  float top = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    float s = isa.dot(q, keys + j * kv_dim + h * dk, dk) * scale;
    if (bias) s += bias[j];
    scores[j] = s;
    top = std::max(top, s);
  }
  const float sum = isa.exp_shifted_sum(scores, n, top);
  std::fill(out, out + dk, 0.0f);
  for (int64_t j = 0; j < n; ++j) isa.axpy(scores[j] / sum, values + j * kv_dim + h * dk, out, dk);
}

}  // namespace tf::transformer
