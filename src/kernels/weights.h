#pragma once
// A weight matrix [n rows, k columns] as the matmul kernels read it, in one of the compute
// dtypes. Every type widens to f32 in registers and multiplies f32 activations, so one code path
// serves every M and a row's reduction order never depends on the batch (see matmul.h).
//
// Layouts (rows contiguous, row j of k elements):
//   f32, bf16, f16: k elements.
//   i8:  k int8 values q; w = q * scale[j] (symmetric, one scale per output row).
//   q4:  k / 32 groups of 16 bytes; byte b of a group holds element b in its low nibble and
//        element b + 16 in its high nibble; w = (nibble - 8) * scale[j * k / 32 + g], scales f16
//        (4.5 bits per weight, as llama.cpp's Q4_0).

#include <cstdint>
#include <string_view>
#include <vector>

namespace tf::kernels {

enum class WeightType : uint8_t { kF32, kBF16, kF16, kI8, kQ4 };

inline constexpr int kQ4Group = 32;

std::string_view weight_type_name(WeightType t);  // "f32", "bf16", "f16", "int8", "q4"
// Parses those names (and "int8"'s alias "i8"); throws Error naming the choices otherwise.
WeightType parse_weight_type(std::string_view name);

struct WeightMatrix {
  WeightType type = WeightType::kF32;
  const void* data = nullptr;
  const void* scales = nullptr;  // i8: float[n]; q4: uint16_t (f16) [n * k / 32]
  int64_t n = 0, k = 0;

  // Bytes of one row's data (not counting scales).
  static int64_t row_bytes(WeightType t, int64_t k);
  // Bytes of all rows plus scales.
  int64_t bytes() const;
  // Rows [first, first + count) as a matrix of their own (no copy).
  WeightMatrix rows(int64_t first, int64_t count) const;
  // Row r widened to f32 (an embedding lookup).
  void dequantize_row(int64_t r, float* out) const;
};

// Packs f32 rows [n, k] into type t: data gets row_bytes(t, k) * n bytes, scales the scales
// (floats for i8, f16 bits for q4; empty otherwise). q4 needs k % 32 == 0 (throws otherwise).
// Rounding: bf16/f16 round to nearest even; i8 scale = max|w| / 127; q4 scale = max|w| / 7.
void quantize_rows(WeightType t, const float* src, int64_t n, int64_t k, std::vector<uint8_t>& data,
                   std::vector<uint8_t>& scales);

}  // namespace tf::kernels
