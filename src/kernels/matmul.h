#pragma once

#include <cstdint>

namespace tf {
class ThreadPool;
}

namespace tf::kernels {

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]). Weights are stored [out][in] as in PyTorch's Linear,
// so each output is a dot product of two contiguous rows. Split over n across the pool.
void matmul(const float* x, int64_t m, int64_t k, const float* w, int64_t n, const float* bias,
            float* y, ThreadPool& pool);

}  // namespace tf::kernels
