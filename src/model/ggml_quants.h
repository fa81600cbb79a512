#pragma once
// GGUF tensor types as the kernels' weight types: the block formats are read in place by the
// block kernels (kernels/ggml_quants.h has their layouts); F32, F16 and BF16 convert as their
// dtypes do.

#include <cstdint>
#include <optional>

#include "kernels/weights.h"
#include "model/gguf.h"

namespace tf {

// The weight type of a ggml block format; nullopt for F32/F16/BF16 and for types tokenflow
// cannot read.
std::optional<kernels::WeightType> block_weight_type(GgmlType type);

// Whether dequantize_ggml takes the type.
bool ggml_can_dequantize(GgmlType type);

// Dequantizes n values (a multiple of the type's block size) stored at data into out.
void dequantize_ggml(GgmlType type, const void* data, int64_t n, float* out);

}  // namespace tf
