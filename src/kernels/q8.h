#pragma once
// Activations quantized for int8 dot products (the VNNI kernels of int8 and q4 weights): each
// row in blocks of 32 as llama.cpp's Q8_0 (scale = max|x| / 127), laid out for 64-byte steps.
// A row's quantization depends on that row alone, so batch invariance holds.

#include <cstdint>
#include <vector>

#include "kernels/weights.h"

namespace tf::kernels {

struct QuantizedRows {
  int64_t m = 0, k = 0;       // k % 64 == 0
  const int8_t* q = nullptr;  // [m, k]
  // Per row, per 64-element chunk, 16 lanes (one per 4 bytes): the scale of the lane's block of
  // 32, and -c * the sum of the lane's 4 quantized values, where c is the offset the kernel's
  // unsigned operand carries (128 for int8 weights, 8 for q4 nibbles).
  const float* lane_scale = nullptr;   // [m, k / 64, 16]
  const int32_t* lane_corr = nullptr;  // [m, k / 64, 16]
  // Per row, per block of 32: the block's scale times the sum of its quants (what a weight
  // format's minimum per 32 multiplies).
  const float* block_sum = nullptr;  // [m, k / 32]
};

// One block of 32 as Q8_0: d = max|x| / 127, q = x / d rounded half away from zero (clamped to
// +-127); returns d. Every activation quantizer of the int8 kernels rounds with this.
float quantize_q8_block32(const float* xb, int8_t* qb);

// Owns the buffers; reused across calls.
struct QuantizedBuffer {
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<int32_t> corr;
  std::vector<float> sums;
  QuantizedRows rows;
};

// The weight types IsaKernels::matmul_cols_q8 takes: int8 and q4, and ggml's Q8_0 and Q4_K-Q6_K,
// read straight from their blocks.
inline bool q8_kernel_takes(WeightType t) {
  return t == WeightType::kI8 || t == WeightType::kQ4 || t == WeightType::kQ8_0 ||
         t == WeightType::kQ4_K || t == WeightType::kQ5_K || t == WeightType::kQ6_K;
}

// The offset of the unsigned operand for weights of type t: int8 and Q8_0 + 128, q4 nibbles are
// w + 8, Q6_K's w + 32, Q4_K's and Q5_K's are unsigned already (their minima come off through the
// block sums).
inline int32_t q8_offset(WeightType t) {
  if (t == WeightType::kQ4_K || t == WeightType::kQ5_K) return 0;
  if (t == WeightType::kQ6_K) return 32;
  return t == WeightType::kQ4 ? 8 : 128;
}

// Activations for the int8 block kernels (IsaKernels::matmul_cols_blocks_q8: ggml's formats and
// int8/q4 on the AVX2 tables): each row in blocks of 32 as Q8_0 (the same rounding as above), in
// element order, with each block's scale and the sums the kernels' corrections need (a weight
// format's minimum, or the offset that makes its quants unsigned).
struct BlockQ8Rows {
  int64_t m = 0, k = 0;          // k % 32 == 0
  const int8_t* q = nullptr;     // [m, k]
  const float* d = nullptr;      // [m, k / 32]: block scales
  const float* s16 = nullptr;    // [m, k / 16]: d * the sum of each 16 quantized values
  const float* s32 = nullptr;    // [m, k / 32]: d * the sum of each block's quantized values
  const int32_t* q32 = nullptr;  // [m, k / 32]: the sum of each block's quantized values
  const int32_t* q16 = nullptr;  // [m, k / 32]: the sum of each block's first 16 (Q6_K's scales)
  // Prepared with tiles: the same quants per 16 rows and block, 16 x 32 in a row
  // ([ceil(m / 16)][k / 32][16][32], rows past m zero), and their scales
  // ([ceil(m / 16)][k / 32][16]) and quant sums as floats (ts, as td): the A operand of the AMX
  // panel tiles (amx.h). Else nullptr.
  const int8_t* tq = nullptr;
  const float* td = nullptr;
  const float* ts = nullptr;
};
struct BlockQ8Buffer {
  std::vector<int8_t> q, tq;
  std::vector<float> d, s16, s32, td, ts;
  std::vector<int32_t> q32, q16;
  BlockQ8Rows rows;
};
// Sizes buf for m rows of k (k % 32 == 0), with the tiles' layout too if `tiles`; fill rows with
// quantize_block_row.
const BlockQ8Rows& prepare_block_activations(int64_t m, int64_t k, BlockQ8Buffer& buf,
                                             bool tiles = false);
void quantize_block_row(const float* x, int64_t i, BlockQ8Buffer& buf);

// Sizes buf for m rows of k (k % 64 == 0) and returns the view; fill rows with quantize_row.
const QuantizedRows& prepare_activations(int64_t m, int64_t k, QuantizedBuffer& buf);
// Quantizes row i of x [m, k] into buf with the correction for offset c.
void quantize_row(const float* x, int64_t i, int32_t c, QuantizedBuffer& buf);
// Both, for all rows on this thread.
const QuantizedRows& quantize_activations(const float* x, int64_t m, int64_t k, int32_t c,
                                          QuantizedBuffer& buf);

}  // namespace tf::kernels
