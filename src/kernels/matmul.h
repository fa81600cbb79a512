#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/weights.h"

namespace tf {
class ThreadPool;
}

namespace tf::kernels {

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]). Weights are stored [out][in] as in PyTorch's Linear,
// so each output is a dot product of two contiguous rows. Split over n across the pool.
// w may be any WeightType (weights.h); its rows widen to f32 in registers. Each output element's
// reduction order is fixed by k alone: never by m, the thread count or the other rows.
void matmul(const float* x, int64_t m, const WeightMatrix& w, const float* bias, float* y,
            ThreadPool& pool);
// Several matrices with the same input rows (q, k and v; gate and up): the activations are
// prepared once and all the output columns go through one dispatch to the pool. Results are
// those of separate matmul calls, bit for bit.
struct MatmulOutput {
  WeightMatrix w;
  const float* bias;        // nullptr: none
  float* y;                 // [m, w.n]
  bool accumulate = false;  // y += x · wᵀ (+ bias): a residual add in the epilogue
};
void matmul_many(const float* x, int64_t m, std::span<const MatmulOutput> outs, ThreadPool& pool);

// y[m, n] += x[m, k] · w[n, k]ᵀ: the residual add fused into the matmul's epilogue (one pass
// over y fewer; the same arithmetic as matmul into a scratch buffer and a separate add).
void matmul_add(const float* x, int64_t m, const WeightMatrix& w, const float* bias, float* y,
                ThreadPool& pool);

// f32 weights [n, k].
void matmul(const float* x, int64_t m, int64_t k, const float* w, int64_t n, const float* bias,
            float* y, ThreadPool& pool);

// A matrix made from f32 rows [n, k] in type t and laid out as the loader lays t out on this
// kernel table (panels where the table multiplies them): what the benchmarks multiply. The
// matrix points into data and scales, so a copy must be pointed at its own (`rebind`).
struct LoadedMatrix {
  std::vector<uint8_t> data, scales;
  WeightMatrix m;
  void rebind() { m = {m.type, data.data(), scales.empty() ? nullptr : scales.data(), m.n, m.k}; }
};
LoadedMatrix load_like_the_loader(WeightType t, const float* w, int64_t n, int64_t k);

}  // namespace tf::kernels
