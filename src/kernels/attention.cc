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
  impl.attend_head(q, kv, block_table, n_ctx, kv_head, head_dim, scale, scores.data(), out);
}

}  // namespace tf::kernels
