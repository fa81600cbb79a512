// AMX bf16 tile kernels (see amx.h). Built with -mamx-tile -mamx-bf16 and the AVX-512 flags;
// reached only through the AMX kernel table, which dispatch lists only on a CPU with AMX whose
// kernel granted the tile state.

#include "kernels/amx.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace tf::kernels {
namespace {

constexpr int kRows = 16;    // tile rows: weight rows (A), k pairs (B), weight rows (C)
constexpr int kK = 32;       // bf16 values of k per tile row
constexpr int kBlock = 512;  // uint16 per packed activation block (16 tokens x 32 values)

// The palette 1 configuration: tiles 0-3 accumulators (16 weight rows x 16 tokens of f32),
// 4-5 weights (16 rows x 32 bf16), 6-7 activations (16 pairs x 16 tokens x 2 bf16); all
// 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

void configure_tiles() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = kRows;
  }
  _tile_loadconfig(&c);
}

// 16 weight rows from j at k block kb: straight from the matrix when the block is whole,
// else through `scratch` (16 x 32, zero where past n or k).
inline const uint16_t* weight_block(const uint16_t* w, int64_t n, int64_t k, int64_t j, int64_t kb,
                                    uint16_t* scratch, int64_t& stride) {
  const int64_t q = kb * kK;
  if (j + kRows <= n && q + kK <= k) {
    stride = k * 2;
    return w + j * k + q;
  }
  std::memset(scratch, 0, kRows * kK * sizeof(uint16_t));
  const int64_t rows = std::min<int64_t>(kRows, n - j), cols = std::min<int64_t>(kK, k - q);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(scratch + r * kK, w + (j + r) * k + q, cols * sizeof(uint16_t));
  stride = kK * 2;
  return scratch;
}

// C tiles for weight rows [j, j + 16 NA) and tokens [mb 16, (mb + NB) 16): tile 0 = (A 4, B 6),
// 1 = (4, 7), 2 = (5, 6), 3 = (5, 7).
template <int NA, int NB>
void block(const uint16_t* w, int64_t n, int64_t k, int64_t j, const uint16_t* x, int64_t k_blocks,
           int64_t mb, float (*c)[kRows][kRows], uint16_t (*scratch)[kRows * kK]) {
  _tile_zero(0);
  if constexpr (NB == 2) _tile_zero(1);
  if constexpr (NA == 2) _tile_zero(2);
  if constexpr (NA == 2 && NB == 2) _tile_zero(3);
  const uint16_t* x0 = x + mb * k_blocks * kBlock;
  const uint16_t* x1 = x0 + k_blocks * kBlock;
  for (int64_t kb = 0; kb < k_blocks; ++kb) {
    int64_t s0 = 0, s1 = 0;
    const uint16_t* a0 = weight_block(w, n, k, j, kb, scratch[0], s0);
    _tile_loadd(4, a0, s0);
    if constexpr (NA == 2) {
      const uint16_t* a1 = weight_block(w, n, k, j + kRows, kb, scratch[1], s1);
      _tile_loadd(5, a1, s1);
    }
    _tile_loadd(6, x0 + kb * kBlock, 64);
    if constexpr (NB == 2) _tile_loadd(7, x1 + kb * kBlock, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NB == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (NA == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (NA == 2 && NB == 2) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c[0], 64);
  if constexpr (NB == 2) _tile_stored(1, c[1], 64);
  if constexpr (NA == 2) _tile_stored(2, c[2], 64);
  if constexpr (NA == 2 && NB == 2) _tile_stored(3, c[3], 64);
}

// The epilogue of one C tile: y[token][row] (+)= c[row][token] + bias[row], the same additions as
// the other tables' (sum, then bias, then the residual).
void write_tile(const float (&c)[kRows][kRows], int64_t rows, int64_t tokens, int64_t j, int64_t i,
                const float* bias, float* y, int64_t ldy, bool accumulate) {
  for (int64_t t = 0; t < tokens; ++t) {
    float* out = y + (i + t) * ldy + j;
    for (int64_t r = 0; r < rows; ++r) {
      float s = c[r][t];
      if (bias != nullptr) s += bias[j + r];
      out[r] = accumulate ? out[r] + s : s;
    }
  }
}

}  // namespace

int64_t amx_packed_bf16_size(int64_t m, int64_t k) {
  return (m + kRows - 1) / kRows * ((k + kK - 1) / kK) * kBlock;
}

void amx_pack_bf16_rows(const float* x, int64_t m, int64_t k, int64_t i0, int64_t i1,
                        uint16_t* out) {
  const int64_t k_blocks = (k + kK - 1) / kK;
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t t = i % kRows;
    uint16_t* blocks = out + (i / kRows) * k_blocks * kBlock + 2 * t;
    const float* row = x + i * k;
    for (int64_t kb = 0; kb < k_blocks; ++kb)
      for (int r = 0; r < kRows; ++r)
        for (int e = 0; e < 2; ++e) {
          const int64_t q = kb * kK + 2 * r + e;
          blocks[kb * kBlock + r * kK + e] = q < k ? f32_to_bf16(row[q]) : 0;
        }
  }
  if (i1 == m && m % kRows != 0) {  // the last block's rows past m
    uint16_t* blocks = out + (m / kRows) * k_blocks * kBlock;
    for (int64_t kb = 0; kb < k_blocks; ++kb)
      for (int r = 0; r < kRows; ++r)
        for (int64_t t = m % kRows; t < kRows; ++t) {
          blocks[kb * kBlock + r * kK + 2 * t] = 0;
          blocks[kb * kBlock + r * kK + 2 * t + 1] = 0;
        }
  }
}

void amx_matmul_cols_bf16(const uint16_t* x, int64_t m, int64_t k, const WeightMatrix& w,
                          int64_t n_begin, int64_t n_end, const float* bias, float* y, int64_t ldy,
                          bool accumulate) {
  TF_CHECK(n_begin % kRows == 0 || n_begin >= n_end);
  const uint16_t* wd = static_cast<const uint16_t*>(w.data);
  const int64_t n = w.n, k_blocks = (k + kK - 1) / kK, m_blocks = (m + kRows - 1) / kRows;
  alignas(64) float c[4][kRows][kRows];
  alignas(64) uint16_t scratch[2][kRows * kK];
  configure_tiles();
  for (int64_t j = n_begin; j < n_end; j += 2 * kRows) {
    const bool two_a = n_end - j > kRows;
    for (int64_t mb = 0; mb < m_blocks; mb += 2) {
      const bool two_b = m_blocks - mb >= 2;
      if (two_a && two_b)
        block<2, 2>(wd, n, k, j, x, k_blocks, mb, c, scratch);
      else if (two_a)
        block<2, 1>(wd, n, k, j, x, k_blocks, mb, c, scratch);
      else if (two_b)
        block<1, 2>(wd, n, k, j, x, k_blocks, mb, c, scratch);
      else
        block<1, 1>(wd, n, k, j, x, k_blocks, mb, c, scratch);
      for (int a = 0; a < (two_a ? 2 : 1); ++a) {
        const int64_t j0 = j + a * kRows;
        const int64_t rows = std::min<int64_t>(kRows, n_end - j0);
        for (int b = 0; b < (two_b ? 2 : 1); ++b) {
          const int64_t i = (mb + b) * kRows;
          write_tile(c[a * 2 + b], rows, std::min<int64_t>(kRows, m - i), j0, i, bias, y, ldy,
                     accumulate);
        }
      }
    }
  }
  _tile_release();
}

}  // namespace tf::kernels
