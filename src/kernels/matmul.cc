#include "kernels/matmul.h"

#include <algorithm>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/isa.h"

namespace tf::kernels {

void matmul_many(const float* x, int64_t m, std::span<const MatmulOutput> outs, ThreadPool& pool) {
  const IsaKernels& impl = isa();
  if (outs.empty()) return;
  const WeightMatrix& w0 = outs[0].w;
  const int64_t k = w0.k;
  bool same = true;
  for (const auto& o : outs) same = same && o.w.k == k && o.w.type == w0.type;
  if (!same) {  // each on its own (a q4 model's int8 fallbacks, for one)
    for (const auto& o : outs) matmul_many(x, m, std::span<const MatmulOutput>(&o, 1), pool);
    return;
  }
  // The activations in the form the kernels take, made once for all the matrices: quantized per
  // block of 32 (int8 dot products: VNNI's lane layout, or BlockQ8Rows for the AVX2 tables),
  // rounded to bf16 (bf16 dot products), or as they are (f32 and ggml's block formats). Row by row,
  // so a row's result never depends on its batch.
  enum class Path { kF32, kQ8, kBf16, kBlocks, kBlocksQ8, kTiles, kPanels } path = Path::kF32;
  const bool int8_or_q4 = w0.type == WeightType::kI8 || w0.type == WeightType::kQ4;
  if (is_panel_type(w0.type)) {
    // The loader lays weights out in panels only for a table with panel kernels.
    TF_CHECK(impl.matmul_cols_panels != nullptr);
    path = Path::kPanels;  // activations as for the block kernels
  } else if (impl.tiles != nullptr && impl.tiles->takes(w0.type, k)) {
    path = Path::kTiles;  // AMX: the activations in the tiles' layout
  } else if (impl.matmul_cols_q8 != nullptr && k % 64 == 0 && q8_kernel_takes(w0.type)) {
    path = Path::kQ8;  // VNNI: Q8_0, Q4_K-Q6_K read straight from their blocks
  } else if (is_block_type(w0.type)) {
    path = impl.matmul_cols_blocks_q8 != nullptr ? Path::kBlocksQ8 : Path::kBlocks;
  } else if (impl.matmul_cols_blocks_q8 != nullptr && k % 32 == 0 && int8_or_q4) {
    path = Path::kBlocksQ8;
  } else if (impl.matmul_cols_bf16 != nullptr && w0.type == WeightType::kBF16) {
    path = Path::kBf16;
  }
  thread_local QuantizedBuffer q8_buffer;
  thread_local BlockQ8Buffer bq8_buffer;
  BlockQ8Buffer& bq8 = bq8_buffer;
  thread_local std::vector<uint16_t> bf16_buffer;
  thread_local std::vector<uint8_t> tiles_buffer;
  std::vector<uint8_t>& xt = tiles_buffer;
  QuantizedBuffer& q8 = q8_buffer;  // references: the workers see the caller's buffers
  std::vector<uint16_t>& xb = bf16_buffer;
  const QuantizedRows* xq = nullptr;
  if (path == Path::kQ8) {
    xq = &prepare_activations(m, k, q8);
    pool.parallel_for(
        m,
        [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i) quantize_row(x, i, q8_offset(w0.type), q8);
        },
        16);
  } else if (path == Path::kBlocksQ8 || path == Path::kPanels) {
    // The AMX panel tiles read the activations per 16 rows and block.
    prepare_block_activations(m, k, bq8,
                              path == Path::kPanels && impl.tiles != nullptr &&
                                  impl.tiles->takes(w0.type, k) && m >= impl.tiles->panel_tokens);
    pool.parallel_for(
        m,
        [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i) quantize_block_row(x, i, bq8);
        },
        16);
  } else if (path == Path::kTiles) {
    xt.resize(static_cast<size_t>(impl.tiles->packed_bytes(w0.type, m, k)));
    pool.parallel_for(
        m,
        [&](int64_t i0, int64_t i1) { impl.tiles->pack_rows(w0.type, x, m, k, i0, i1, xt.data()); },
        16);
  } else if (path == Path::kBf16) {
    xb.resize(static_cast<size_t>(m * k));
    pool.parallel_for(
        m,
        [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0 * k; i < i1 * k; ++i) xb[i] = f32_to_bf16(x[i]);
        },
        16);
  }
  // One dispatch over the groups of g output columns of every matrix, in order (g = 4, the AMX
  // tiles' 16 rows, or a panel's 16, f32-panels' too).
  const int64_t g = path == Path::kTiles ? impl.tiles->col_granule
                    : path == Path::kPanels || is_float_panel_type(w0.type) ? kPanelRows
                                                                            : 4;
  int64_t total_groups = 0;
  for (const auto& o : outs) total_groups += (o.w.n + g - 1) / g;
  const int64_t work_per_col = std::max<int64_t>(1, m * k);
  const int64_t min_cols = std::max<int64_t>(g, (1 << 14) / work_per_col);
  pool.parallel_for(
      total_groups,
      [&](int64_t g0, int64_t g1) {
        int64_t base = 0;
        for (const auto& o : outs) {
          const int64_t groups = (o.w.n + g - 1) / g;
          const int64_t a = std::max(g0, base), b = std::min(g1, base + groups);
          if (a < b) {
            const int64_t j0 = (a - base) * g, j1 = std::min(o.w.n, (b - base) * g);
            switch (path) {
              case Path::kQ8:
                impl.matmul_cols_q8(*xq, o.w, j0, j1, o.bias, o.y, o.w.n, o.accumulate);
                break;
              case Path::kBlocksQ8:
                impl.matmul_cols_blocks_q8(bq8.rows, o.w, j0, j1, o.bias, o.y, o.w.n, o.accumulate);
                break;
              case Path::kBlocks:
                impl.matmul_cols_blocks(x, m, k, o.w, j0, j1, o.bias, o.y, o.w.n, o.accumulate);
                break;
              case Path::kBf16:
                impl.matmul_cols_bf16(xb.data(), m, k, o.w, j0, j1, o.bias, o.y, o.w.n,
                                      o.accumulate);
                break;
              case Path::kPanels:
                impl.matmul_cols_panels(bq8.rows, o.w, j0, j1, o.bias, o.y, o.w.n, o.accumulate);
                break;
              case Path::kTiles:
                impl.tiles->matmul_cols(xt.data(), m, k, o.w, j0, j1, o.bias, o.y, o.w.n,
                                        o.accumulate);
                break;
              case Path::kF32:
                impl.matmul_cols(x, m, k, o.w, j0, j1, o.bias, o.y, o.w.n, o.accumulate);
                break;
            }
          }
          base += groups;
        }
      },
      (min_cols + g - 1) / g);
}

void matmul(const float* x, int64_t m, const WeightMatrix& w, const float* bias, float* y,
            ThreadPool& pool) {
  const MatmulOutput one{w, bias, y};
  matmul_many(x, m, std::span<const MatmulOutput>(&one, 1), pool);
}

void matmul_add(const float* x, int64_t m, const WeightMatrix& w, const float* bias, float* y,
                ThreadPool& pool) {
  const MatmulOutput one{w, bias, y, true};
  matmul_many(x, m, std::span<const MatmulOutput>(&one, 1), pool);
}

void matmul(const float* x, int64_t m, int64_t k, const float* w, int64_t n, const float* bias,
            float* y, ThreadPool& pool) {
  matmul(x, m, WeightMatrix{WeightType::kF32, w, nullptr, n, k}, bias, y, pool);
}

LoadedMatrix load_like_the_loader(WeightType t, const float* w, int64_t n, int64_t k) {
  LoadedMatrix p;
  quantize_rows(t, w, n, k, p.data, p.scales);
  p.m = {t, p.data.data(), p.scales.empty() ? nullptr : p.scales.data(), n, k};
  if ((t == WeightType::kI8 || t == WeightType::kQ4) && use_weight_panels()) {
    LoadedMatrix q;
    q.data.resize(p.data.size());
    q.scales.resize(static_cast<size_t>(panel_scale_bytes(panel_type(t), n, k)));
    q.m = pack_panels(t, p.m.data, p.m.scales, n, k, q.data.data(), q.scales.data());
    return q;
  }
  if (use_float_panels(t)) {
    LoadedMatrix q;
    q.data.resize(p.data.size());
    q.m = t == WeightType::kF32
              ? pack_f32_panels(w, n, k, reinterpret_cast<float*>(q.data.data()))
              : pack_half_panels(t, reinterpret_cast<const uint16_t*>(p.data.data()), n, k,
                                 reinterpret_cast<uint16_t*>(q.data.data()));
    return q;
  }
  return p;
}

}  // namespace tf::kernels
