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
};

// Owns the buffers; reused across calls.
struct QuantizedBuffer {
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<int32_t> corr;
  QuantizedRows rows;
};

// The offset of the unsigned operand for weights of type t: int8 + 128, q4 nibbles are w + 8.
inline int32_t q8_offset(WeightType t) {
  return t == WeightType::kQ4 ? 8 : 128;
}

// Sizes buf for m rows of k (k % 64 == 0) and returns the view; fill rows with quantize_row.
const QuantizedRows& prepare_activations(int64_t m, int64_t k, QuantizedBuffer& buf);
// Quantizes row i of x [m, k] into buf with the correction for offset c.
void quantize_row(const float* x, int64_t i, int32_t c, QuantizedBuffer& buf);
// Both, for all rows on this thread.
const QuantizedRows& quantize_activations(const float* x, int64_t m, int64_t k, int32_t c,
                                          QuantizedBuffer& buf);

}  // namespace tf::kernels
