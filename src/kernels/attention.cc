#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "kernels/isa.h"
#include "kernels/ops.h"

namespace tf::kernels {

KvType parse_kv_type(const char* name) {
  const std::string_view n(name);
  if (n == "f32") return KvType::kF32;
  if (n == "bf16") return KvType::kBF16;
  if (n == "f16") return KvType::kF16;
  if (n == "q8_0" || n == "q8") return KvType::kQ8_0;
  fail("unknown KV cache dtype '{}': use f32, bf16, f16 or q8_0", n);
}

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::kF32:
      return "f32";
    case KvType::kBF16:
      return "bf16";
    case KvType::kF16:
      return "f16";
    case KvType::kQ8_0:
      return "q8_0";
  }
  return "?";
}

void attend_queries(const float* const* q, const int64_t* n_ctx, int n_q, const PagedKvLayer& kv,
                    const int32_t* block_table, int kv_head, int head_dim,
                    const AttentionOpts& opts, float* const* out) {
  TF_CHECK(n_q >= 1 && n_q <= kMaxAttentionQueries);
  TF_CHECK(head_dim <= kMaxAttentionHeadDim);
  isa().attend_queries(q, n_ctx, n_q, kv, block_table, kv_head, head_dim, opts, out);
}

void attend_head(const float* q, const PagedKvLayer& kv, const int32_t* block_table, int64_t n_ctx,
                 int kv_head, int head_dim, float scale, float* out) {
  attend_queries(&q, &n_ctx, 1, kv, block_table, kv_head, head_dim, scale, &out);
}

}  // namespace tf::kernels
