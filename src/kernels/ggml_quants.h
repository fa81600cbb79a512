#pragma once
// ggml's block formats, dequantized: the reference (scalar) form of each type GGUF files carry,
// written from the block layouts of ggml-common.h. A block holds block_size values (32, or 256
// for the K-quants' super-blocks) as small integers and one or more f16 scales:
//   Q8_0   d, q[32] int8                      x = d q
//   Q4_0   d, 16 bytes of nibbles             x = d (q - 8); low nibbles first, then high
//   Q4_1   d, m, nibbles                      x = d q + m
//   Q5_0   d, qh (32 fifth bits), nibbles     x = d (q - 16)
//   Q5_1   d, m, qh, nibbles                  x = d q + m
//   Q2_K   16 x (4-bit scale | 4-bit min), 2-bit q, d, dmin   x = d sc q - dmin m
//   Q3_K   high-bit mask, 2-bit q, 16 6-bit scales, d        x = d (sc - 32) (q - 4 * !hbit)
//   Q4_K   d, dmin, 8 x 6-bit (scale, min), nibbles          x = d sc q - dmin m
//   Q5_K   as Q4_K plus a fifth bit per value
//   Q6_K   4 low bits, 2 high bits, 16 int8 scales, d         x = d sc (q - 32)
//   IQ4_NL d, nibbles indexing a fixed non-linear table      x = d T[q]
//   IQ4_XS d, 8 x 6-bit scales, nibbles into the same table  x = d (sc - 32) T[q]
//   MXFP4  e (an E8M0 exponent byte), then nibbles that are FP4 E2M1 values (OCP Microscaling
//          Formats v1.0: sign, 2 exponent bits, 1 mantissa bit; 0, 0.5, 1, 1.5, 2, 3, 4, 6 and
//          their negatives)  x = 2^(e - 127) E2M1(q), held as the doubled values
//          kMxfp4Values[q] times 2^(e - 128), as ggml does (e = 255, NaN in the spec, is read as
//          the power of two too)

#include <cstdint>

#include "kernels/weights.h"

namespace tf::kernels {

// IQ4_NL's and IQ4_XS's non-linear values, indexed by the nibbles.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// MXFP4's E2M1 nibbles as twice their values (integers), and a block's scale byte as the
// power of two they are multiplied by: 2^(e - 128), exact in f32 for every byte (e < 2 gives
// subnormals).
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// The f16 at p (any alignment) as a float.
float f16_at(const uint8_t* p);

// Q4_K / Q5_K: sub-block j's (0..7) 6-bit scale and minimum from a super-block's 12 scale bytes.
void scale_min_k4(int j, const uint8_t* s, int& sc, int& m);

// Dequantizes n values (a multiple of block_size(t)) of block type t stored at data into out.
void dequantize_blocks(WeightType t, const void* data, int64_t n, float* out);

// Whether quantize_blocks writes type t (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K,
// IQ4_NL).
bool can_quantize_blocks(WeightType t);

// Quantizes n values (a multiple of block_size(t)) into n / block_size(t) blocks of type t at out,
// in the layouts above. Scales are chosen from each block's range (Q4_1/Q5_1/Q4_K/Q5_K: its
// minimum and maximum; the others: its value of largest magnitude maps to the most negative
// quant, as ggml's reference quantizers do), each value to the nearest quant under the scales
// as stored (f16, and the K-quants' 6- or 8-bit sub-block scales).
void quantize_blocks(WeightType t, const float* x, int64_t n, void* out);

}  // namespace tf::kernels
