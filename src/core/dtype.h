#pragma once
// Element types of stored tensors and the conversions the loaders need. Compute runs in f32 for
// now; f16 and bf16 weights are widened once at load. int8 and 4-bit types arrive with the
// quantized kernels.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace tf {

enum class DType : uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
  kF8E4M3,
  kF8E5M2
};

size_t dtype_size(DType t);
// The safetensors spelling: "F32", "BF16", ...
std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view name);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of src (of type t, little-endian, any alignment) to f32. t must be a
// floating type; throws otherwise.
void convert_to_f32(DType t, const void* src, size_t n, float* dst);

}  // namespace tf
