#include "model/ggml_quants.h"

#include <cstring>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/ggml_quants.h"

namespace tf {

std::optional<kernels::WeightType> block_weight_type(GgmlType type) {
  using kernels::WeightType;
  switch (type) {
    case GgmlType::kQ8_0:
      return WeightType::kQ8_0;
    case GgmlType::kQ4_0:
      return WeightType::kQ4_0;
    case GgmlType::kQ4_1:
      return WeightType::kQ4_1;
    case GgmlType::kQ5_0:
      return WeightType::kQ5_0;
    case GgmlType::kQ5_1:
      return WeightType::kQ5_1;
    case GgmlType::kQ2_K:
      return WeightType::kQ2_K;
    case GgmlType::kQ3_K:
      return WeightType::kQ3_K;
    case GgmlType::kQ4_K:
      return WeightType::kQ4_K;
    case GgmlType::kQ5_K:
      return WeightType::kQ5_K;
    case GgmlType::kQ6_K:
      return WeightType::kQ6_K;
    case GgmlType::kIQ4_NL:
      return WeightType::kIQ4_NL;
    case GgmlType::kMXFP4:
      return WeightType::kMXFP4;
    case GgmlType::kIQ4_XS:
      return WeightType::kIQ4_XS;
    default:
      return std::nullopt;
  }
}

bool ggml_can_dequantize(GgmlType type) {
  return type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16 ||
         block_weight_type(type).has_value();
}

void dequantize_ggml(GgmlType type, const void* data, int64_t n, float* out) {
  const auto info = ggml_type_info(static_cast<uint32_t>(type));
  if (!info || !ggml_can_dequantize(type))
    fail(ErrorKind::kUnsupported, "tensor type {} cannot be read",
         info ? info->name : std::to_string(static_cast<uint32_t>(type)));
  if (auto t = block_weight_type(type)) return kernels::dequantize_blocks(*t, data, n, out);
  const DType dtype =
      type == GgmlType::kF32 ? DType::kF32 : (type == GgmlType::kF16 ? DType::kF16 : DType::kBF16);
  convert_to_f32(dtype, data, static_cast<size_t>(n), out);
}

}  // namespace tf
