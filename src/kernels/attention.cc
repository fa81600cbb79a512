#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/isa.h"
#include "kernels/ops.h"

namespace tf::kernels {

void attend_head(const float* q, const PagedKvLayer& kv, const int32_t* block_table, int64_t n_ctx,
                 int kv_head, int head_dim, float scale, float* out) {
  const IsaKernels& impl = isa();
  // Grows geometrically to the longest context this thread has seen, then stays: a handful of
  // allocations in a thread's life, none per token.
  thread_local std::vector<float> scores;
  if (static_cast<int64_t>(scores.size()) < n_ctx) {
    scores.resize(std::max<size_t>({static_cast<size_t>(n_ctx), 2 * scores.size(), 4096}));
  }
  const int64_t head_off = static_cast<int64_t>(kv_head) * head_dim;
  for (int64_t t = 0; t < n_ctx; ++t) {
    scores[t] = impl.dot(q, kv.k_row(block_table, t) + head_off, head_dim) * scale;
  }
  softmax(scores.data(), n_ctx);
  std::fill(out, out + head_dim, 0.0f);
  for (int64_t t = 0; t < n_ctx; ++t) {
    impl.axpy(scores[t], kv.v_row(block_table, t) + head_off, out, head_dim);
  }
}

}  // namespace tf::kernels
