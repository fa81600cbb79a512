#pragma once
// Attention over a paged KV cache. A sequence's keys and values live in fixed-size blocks
// scattered through one pool; its block table maps position p to block table[p / block_size],
// row p % block_size. Reading through the table costs one indirection per block and no copy.

#include <cstdint>

namespace tf::kernels {

struct PagedKvLayer {
  float* k = nullptr;  // [num_blocks, block_size, kv_dim]
  float* v = nullptr;  // [num_blocks, block_size, kv_dim]
  int block_size = 0;
  int kv_dim = 0;  // n_kv_heads * head_dim

  float* k_row(const int32_t* block_table, int64_t pos) const {
    return k +
           (static_cast<int64_t>(block_table[pos / block_size]) * block_size + pos % block_size) *
               kv_dim;
  }
  float* v_row(const int32_t* block_table, int64_t pos) const {
    return v +
           (static_cast<int64_t>(block_table[pos / block_size]) * block_size + pos % block_size) *
               kv_dim;
  }
};

// One query head against positions [0, n_ctx) of one sequence:
// out = softmax(scale * q·Kᵀ) · V, using KV head kv_head. out has head_dim floats.
void attend_head(const float* q, const PagedKvLayer& kv, const int32_t* block_table, int64_t n_ctx,
                 int kv_head, int head_dim, float scale, float* out);

}  // namespace tf::kernels
