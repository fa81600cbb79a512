#include "kernels/matmul.h"

#include <algorithm>

#include "core/thread_pool.h"
#include "kernels/isa.h"

namespace tf::kernels {

void matmul(const float* x, int64_t m, const WeightMatrix& w, const float* bias, float* y,
            ThreadPool& pool) {
  const IsaKernels& impl = isa();
  const int64_t k = w.k, n = w.n;
  // Chunks are multiples of 4 output columns (the tile width) and big enough that dispatch
  // overhead stays small against the work.
  const int64_t work_per_col = std::max<int64_t>(1, m * k);
  const int64_t min_cols = std::max<int64_t>(4, (1 << 14) / work_per_col);
  const int64_t n_groups = (n + 3) / 4;
  pool.parallel_for(
      n_groups,
      [&](int64_t g0, int64_t g1) {
        const int64_t j0 = g0 * 4;
        const int64_t j1 = std::min(n, g1 * 4);
        impl.matmul_cols(x, m, k, w, j0, j1, bias, y, n);
      },
      (min_cols + 3) / 4);
}

void matmul(const float* x, int64_t m, int64_t k, const float* w, int64_t n, const float* bias,
            float* y, ThreadPool& pool) {
  matmul(x, m, WeightMatrix{WeightType::kF32, w, nullptr, n, k}, bias, y, pool);
}

}  // namespace tf::kernels
