#include "kernels/matmul.h"

#include <algorithm>
#include <vector>

#include "core/dtype.h"

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
  if (impl.matmul_cols_q8 != nullptr && k % 64 == 0 &&
      (w.type == WeightType::kI8 || w.type == WeightType::kQ4)) {
    // int8 dot products: the activations are quantized once per call (row by row, so a row's
    // result still does not depend on its batch).
    thread_local QuantizedBuffer buf;
    const QuantizedRows& xq = prepare_activations(m, k, buf);
    QuantizedBuffer& b = buf;  // the workers see the caller's buffer, not their own
    pool.parallel_for(
        m,
        [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i) quantize_row(x, i, q8_offset(w.type), b);
        },
        16);
    pool.parallel_for(
        n_groups,
        [&](int64_t g0, int64_t g1) {
          impl.matmul_cols_q8(xq, w, g0 * 4, std::min(n, g1 * 4), bias, y, n);
        },
        (min_cols + 3) / 4);
    return;
  }
  if (impl.matmul_cols_bf16 != nullptr && w.type == WeightType::kBF16) {
    // bf16 dot products: the activations are rounded to bf16 once per call, row by row.
    thread_local std::vector<uint16_t> xb_buffer;
    std::vector<uint16_t>& xb = xb_buffer;  // the workers see the caller's buffer
    xb.resize(static_cast<size_t>(m * k));
    pool.parallel_for(
        m,
        [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0 * k; i < i1 * k; ++i) xb[i] = f32_to_bf16(x[i]);
        },
        16);
    pool.parallel_for(
        n_groups,
        [&](int64_t g0, int64_t g1) {
          impl.matmul_cols_bf16(xb.data(), m, k, w, g0 * 4, std::min(n, g1 * 4), bias, y, n);
        },
        (min_cols + 3) / 4);
    return;
  }
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
