#pragma once
// Attention over a paged KV cache. A sequence's keys and values live in fixed-size blocks
// scattered through one pool; its block table maps position p to block table[p / block_size],
// row p % block_size. Reading through the table costs one indirection per block and no copy.

#include <cstdint>

namespace tf::kernels {

// Element type of the cached keys and values (--kv-cache-dtype): bf16 and f16 halve the memory
// per token; attention widens them to f32 as it reads. q8_0: int8 with one f16 scale per token
// and KV head (x = scale * q, scale = max|x| / 127 over the head's head_dim values): 2 + 4 /
// head_dim bytes a K/V pair element against bf16's 4 (1.94x the tokens at head_dim 64, 1.97x at
// 128; a scale per 32 values would be 1.88x). Attention widens a chunk's rows once and reads them
// as f32.
enum class KvType : uint8_t { kF32, kBF16, kF16, kQ8_0 };
// Bytes of one stored element (q8_0's scales apart).
inline int kv_type_size(KvType t) {
  return t == KvType::kF32 ? 4 : t == KvType::kQ8_0 ? 1 : 2;
}
// Bytes one token's keys and values take in one layer (kv_dim values each; q8_0 adds an f16
// scale per head of head_dim values to each).
inline int64_t kv_bytes_per_token(KvType t, int64_t kv_dim, int64_t head_dim) {
  const int64_t scales = t == KvType::kQ8_0 && head_dim > 0 ? kv_dim / head_dim * 2 : 0;
  return 2 * (kv_dim * kv_type_size(t) + scales);
}
// "f32", "bf16", "f16", "q8_0" (throws Error naming the choices otherwise).
KvType parse_kv_type(const char* name);
const char* kv_type_name(KvType t);

struct PagedKvLayer {
  void* k = nullptr;  // block b's rows at k + b * stride(), [block_size, kv_dim] of `type`
  void* v = nullptr;  // likewise from v
  int block_size = 0;
  int kv_dim = 0;  // n_kv_heads * head_dim
  KvType type = KvType::kF32;
  int32_t group = 0;  // the cache group whose block table addresses it (CacheLayout)
  // Elements from one block's rows to the next's (0: block_size * kv_dim, K and V in arrays of
  // their own). The KV cache keeps a block's K and V rows together, and a recurrent state of
  // the same block id in the same span (KvCache).
  int64_t block_stride = 0;
  // q8_0: the values one scale covers (head_dim), and the bytes from a block's first K row to
  // its K scales ([block_size, kv_dim / scale_group] f16); its V scales follow them.
  int scale_group = 0;
  int64_t scale_offset = 0;

  int64_t stride() const {
    return block_stride != 0 ? block_stride : static_cast<int64_t>(block_size) * kv_dim;
  }
  // Element index of position pos's row.
  int64_t row(const int32_t* block_table, int64_t pos) const {
    return static_cast<int64_t>(block_table[pos / block_size]) * stride() +
           (pos % block_size) * static_cast<int64_t>(kv_dim);
  }
  template <class T>
  T* k_at(const int32_t* block_table, int64_t pos) const {
    return static_cast<T*>(k) + row(block_table, pos);
  }
  template <class T>
  T* v_at(const int32_t* block_table, int64_t pos) const {
    return static_cast<T*>(v) + row(block_table, pos);
  }
  // q8_0 only: position pos's scales (kv_dim / scale_group f16 values), of K or of V.
  uint16_t* k_scales(const int32_t* block_table, int64_t pos) const {
    return block_scales(block_table[pos / block_size]) + (pos % block_size) * scales_per_row();
  }
  uint16_t* v_scales(const int32_t* block_table, int64_t pos) const {
    return k_scales(block_table, pos) + block_size * scales_per_row();
  }
  // q8_0 only: the K scales of block b's rows ([block_size, scales_per_row()]; V's follow).
  uint16_t* block_scales(int64_t b) const {
    return reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(k) + b * stride() + scale_offset);
  }
  int64_t scales_per_row() const { return kv_dim / scale_group; }
  // f32 caches only.
  float* k_row(const int32_t* block_table, int64_t pos) const {
    return k_at<float>(block_table, pos);
  }
  float* v_row(const int32_t* block_table, int64_t pos) const {
    return v_at<float>(block_table, pos);
  }
};

// A GQA group of eight query heads (Llama 2 70B, TinyLlama, Llama 3) in one pass over its KV
// head's keys and values: each read and widened once for the eight.
inline constexpr int kMaxAttentionQueries = 8;

// What a layer's attention does besides softmax(scale * q·Kᵀ)·V. Converts from a plain scale.
struct AttentionOpts {
  float scale = 1.0f;
  // > 0: each query attends only to its last `window` positions, itself included (sliding-window
  // layers of Mistral, Gemma 2/3, Qwen2): keys [n_ctx - window, n_ctx).
  int64_t window = 0;
  // > 0: each scaled score becomes softcap * tanh(score / softcap) before the softmax (Gemma 2).
  float softcap = 0.0f;
  // Where set, sinks[r] is a logit query r of the call (attend_queries' order) also normalizes
  // over, with no value behind it (gpt-oss's attention sinks): out = sum_j e^s_j v_j /
  // (sum_j e^s_j + e^sink).
  const float* sinks = nullptr;
  AttentionOpts(float s = 1.0f) : scale(s) {}  // NOLINT(google-explicit-constructor)
};
inline constexpr int kMaxAttentionHeadDim = 512;
// Keys are read in chunks of this many positions, aligned to multiples of it: with a window, the
// first chunk read is the one holding the first key in the window (earlier positions are never
// touched, so their KV blocks may be released).
inline constexpr int kAttentionKeyChunk = 16;

// n_q <= kMaxAttentionQueries queries of one sequence, each against positions [0, n_ctx[r]) of
// its paged cache (the last opts.window of them if set) with KV head kv_head:
// out[r] = softmax(scale * q[r]·Kᵀ) · V (head_dim floats).
// Keys are visited in fixed chunks of positions with an online softmax; the queries share the loads
// of keys and values, and each query's arithmetic is the same whichever queries it is grouped
// with (so a token's result does not depend on its batch or prefill chunk).
void attend_queries(const float* const* q, const int64_t* n_ctx, int n_q, const PagedKvLayer& kv,
                    const int32_t* block_table, int kv_head, int head_dim,
                    const AttentionOpts& opts, float* const* out);

// One query: attend_queries with n_q = 1.
void attend_head(const float* q, const PagedKvLayer& kv, const int32_t* block_table, int64_t n_ctx,
                 int kv_head, int head_dim, float scale, float* out);

}  // namespace tf::kernels
