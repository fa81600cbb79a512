// AMX tile kernels (see amx.h). Built with -mamx-tile -mamx-bf16 -mamx-int8 and the AVX-512
// flags; reached only through the AMX kernel table, which dispatch lists only on a CPU with AMX
// whose kernel granted the tile state.

#include "kernels/amx.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/lane_fold.h"
#include "kernels/q8.h"

namespace tf::kernels {
namespace {

constexpr int kRows = 16;    // tile rows: weight rows (A), k pairs (B), weight rows (C)
constexpr int kK = 32;       // bf16 values of k per tile row
constexpr int kBlock = 512;  // uint16 per packed activation block (16 tokens x 32 values)

// A palette 1 configuration.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// ldtilecfg through asm with the configuration as a memory operand: GCC 12's _tile_loadconfig
// does not tell the optimizer that it reads the structure, and the int8 configuration's stores
// were dropped as dead (a zero configuration: SIGILL at the first tile load).
inline void load_tile_config(const TileConfig& c) {
  asm volatile("ldtilecfg %0" : : "m"(c));
}

// bf16: tiles 0-3 accumulators (16 weight rows x 16 tokens of f32), 4-5 weights (16 rows x 32
// bf16), 6-7 activations (16 pairs x 16 tokens x 2 bf16); all 16 rows of 64 bytes.
void configure_bf16_tiles() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = kRows;
  }
  load_tile_config(c);
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

// y[t][j + r] from the f32 sums s(r, t) (sum, then bias, then the residual, as every table).
template <class Sum>
inline void write_sums(Sum s, int64_t rows, int64_t tokens, int64_t j, int64_t i, const float* bias,
                       float* y, int64_t ldy, bool accumulate) {
  for (int64_t t = 0; t < tokens; ++t) {
    float* out = y + (i + t) * ldy + j;
    for (int64_t r = 0; r < rows; ++r) {
      float v = s(r, t);
      if (bias != nullptr) v += bias[j + r];
      out[r] = accumulate ? out[r] + v : v;
    }
  }
}

void pack_bf16_rows(const float* x, int64_t m, int64_t k, int64_t i0, int64_t i1, uint16_t* out) {
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

// 16-token blocks per pass over the weights: the passes' packed activations (`block_bytes` per
// 16 tokens) stay in L2 while every weight row of the range goes over them. Unchunked, a 512 x
// 2048 prompt's 2 MiB of bf16 activations came from L3 once per 32 weight rows, and the L3's
// bandwidth bound the tiles. Results do not depend on it (each output's steps are the same).
inline int64_t token_chunk(int64_t block_bytes) {
  constexpr int64_t kL2Share = 512 << 10;
  return std::max<int64_t>(2, kL2Share / block_bytes / 2 * 2);
}

void bf16_cols(const uint16_t* x, int64_t m, int64_t k, const WeightMatrix& w, int64_t n_begin,
               int64_t n_end, const float* bias, float* y, int64_t ldy, bool accumulate) {
  TF_CHECK(n_begin % kRows == 0 || n_begin >= n_end);
  const uint16_t* wd = static_cast<const uint16_t*>(w.data);
  const int64_t n = w.n, k_blocks = (k + kK - 1) / kK, m_blocks = (m + kRows - 1) / kRows;
  alignas(64) float c[4][kRows][kRows];
  alignas(64) uint16_t scratch[2][kRows * kK];
  configure_bf16_tiles();
  const int64_t chunk = token_chunk(k_blocks * kBlock * 2);
  for (int64_t m0 = 0; m0 < m_blocks; m0 += chunk) {
    const int64_t m1 = std::min(m_blocks, m0 + chunk);
    for (int64_t j = n_begin; j < n_end; j += 2 * kRows) {
      const bool two_a = n_end - j > kRows;
      for (int64_t mb = m0; mb < m1; mb += 2) {
        const bool two_b = m1 - mb >= 2;
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
            const float(&sums)[kRows][kRows] = c[a * 2 + b];  // [weight row][token]
            write_sums([&](int64_t r, int64_t t) { return sums[r][t]; }, rows,
                       std::min<int64_t>(kRows, m - i), j0, i, bias, y, ldy, accumulate);
          }
        }
      }
    }
  }
  _tile_release();
}

// ---- Q8_0 weights ---------------------------------------------------------------------------

constexpr int64_t kQBlock = 512;    // bytes per packed activation block (16 tokens x 32 quants)
constexpr int64_t kQ8_0Bytes = 34;  // one Q8_0 block: f16 scale, 32 quants

int64_t q8_quant_bytes(int64_t m, int64_t k) {
  return (m + kRows - 1) / kRows * (k / kK) * kQBlock;
}

void pack_q8_rows(const float* x, int64_t m, int64_t k, int64_t i0, int64_t i1, uint8_t* out) {
  const int64_t k_blocks = k / kK;
  int8_t* quants = reinterpret_cast<int8_t*>(out);
  float* scales = reinterpret_cast<float*>(out + q8_quant_bytes(m, k));
  alignas(64) int8_t q[kK];
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t mb = i / kRows, t = i % kRows;
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      const float d = quantize_q8_block32(x + i * k + kb * kK, q);
      int8_t* block = quants + (mb * k_blocks + kb) * kQBlock + 4 * t;
      for (int r = 0; r < 8; ++r) std::memcpy(block + r * 64, q + 4 * r, 4);
      scales[(mb * k_blocks + kb) * kRows + t] = d;
    }
  }
  if (i1 == m && m % kRows != 0) {  // the last block's tokens past m: zero quants and scales
    const int64_t mb = m / kRows;
    for (int64_t kb = 0; kb < k_blocks; ++kb)
      for (int64_t t = m % kRows; t < kRows; ++t) {
        int8_t* block = quants + (mb * k_blocks + kb) * kQBlock + 4 * t;
        for (int r = 0; r < 8; ++r) std::memset(block + r * 64, 0, 4);
        scales[(mb * k_blocks + kb) * kRows + t] = 0.0f;
      }
  }
}

// Weight rows [j, j + rows) of Q8_0 weights: each block's 16 x 32 quants
// as a tile source and the rows' scales per block.
struct Q8Rows {
  const int8_t* base;  // quants of block 0 of row j
  int64_t stride;      // bytes from one row's block to the next row's

  Q8Rows(const WeightMatrix& w, int64_t j, int64_t rows, float* dw /*[k_blocks][16]*/) {
    const int64_t k_blocks = w.k / kK;
    const uint8_t* d = static_cast<const uint8_t*>(w.data);
    stride = k_blocks * kQ8_0Bytes;
    base = reinterpret_cast<const int8_t*>(d + j * stride + 2);
    // The 16 rows' f16 scales of each block by one gather (4 bytes: the scale and the block's
    // first two quants, all inside the block), widened by F16C: the same values as f16_to_f32.
    const __m512i index =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(static_cast<int>(stride)));
    const __mmask16 valid = static_cast<__mmask16>((1u << rows) - 1);
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      const __m512i h = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, index,
                                                    d + j * stride + kb * kQ8_0Bytes, 1);
      _mm512_storeu_ps(dw + kb * kRows, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
    }
  }
};

// int8: tiles 0, 1 int32 products (16 weight rows x 16 tokens), 2, 4 weights (16 rows x 32
// int8), 3, 5 activations (8 quads x 16 tokens x 4 int8).
void configure_int8_tiles() {
  TileConfig c;
  for (int t : {0, 1}) {
    c.colsb[t] = 64;
    c.rows[t] = kRows;
  }
  for (int t : {2, 4}) {
    c.colsb[t] = 32;
    c.rows[t] = kRows;
  }
  for (int t : {3, 5}) {
    c.colsb[t] = 64;
    c.rows[t] = 8;
  }
  load_tile_config(c);
}

// One block of 32 of 16 weight rows: their quants as a tile source (through `scratch`, zero-padded,
// for the matrix's last rows).
inline const int8_t* weight_quants(const Q8Rows& src, int64_t rows, int64_t kb, int8_t* scratch,
                                   int64_t& stride) {
  const int8_t* a = src.base + kb * kQ8_0Bytes;
  stride = src.stride;
  if (rows == kRows) return a;
  std::memset(scratch, 0, kRows * kK);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(scratch + r * kK, a + r * src.stride, kK);
  stride = kK;
  return scratch;
}

// Exact int32 lane sums within each half of a 16-lane vector: lane_fold.h's levels 2-4.
typedef int32_t v16i __attribute__((vector_size(64)));
inline v16i fold_quads(v16i a, v16i b) {
  return fold<16, 2>(a, b);
}
inline v16i fold_pairs(v16i a, v16i b) {
  return fold<16, 3>(a, b);
}
inline v16i fold_lanes(v16i a, v16i b) {
  return fold<16, 4>(a, b);
}

// One token (m = 1, decode), 16 weight rows at a time with AVX-512 VNNI instead of tiles (a tile
// product of one token leaves 15/16 of the unit idle and costs a tile store and reload per
// block: 0.7-0.85x the VNNI decode). Each block's dot product is exact in int32 (vpdpbusd on
// the weights made unsigned, w + 128, less 128 x the block's activation sum), so the f32 part,
// fma(float(product), dx * dw, sum) block after block, is the tiles' own arithmetic: the same
// bits as the token's row in any batch.
// Matrices at least this large are read one row at a time (q8_gemv's streaming form): past the
// caches, 16 rows side by side are 16 memory streams, read at ~0.8 of the VNNI kernel's rate
// (1.1B shape: the streaming form 1.09x the other); in cache, the streaming form's extra pass
// and gathers cost 0.75x (110M shape).
constexpr int64_t kStreamingBytes = int64_t{4} << 20;

void q8_gemv(const uint8_t* x, int64_t k, const WeightMatrix& w, int64_t n_begin, int64_t n_end,
             const float* bias, float* y, bool accumulate) {
  const int64_t k_blocks = k / kK;
  const int8_t* xq = reinterpret_cast<const int8_t*>(x);
  const float* xd = reinterpret_cast<const float*>(x + q8_quant_bytes(1, k));
  thread_local std::vector<int8_t> row_buffer;
  thread_local std::vector<int32_t> corr_buffer;
  thread_local std::vector<float> dw_buffer;
  row_buffer.resize(static_cast<size_t>(k));
  corr_buffer.resize(static_cast<size_t>(k_blocks));
  dw_buffer.resize(static_cast<size_t>(kRows * ((k_blocks + 15) / 16 * 16)));
  int8_t* row = row_buffer.data();
  int32_t* corr = corr_buffer.data();
  float* dw = dw_buffer.data();
  for (int64_t kb = 0; kb < k_blocks; ++kb) {  // the token's quants back in order
    int32_t sum = 0;
    for (int r = 0; r < 8; ++r) {
      std::memcpy(row + kb * kK + 4 * r, xq + kb * kQBlock + r * 64, 4);
      for (int e = 0; e < 4; ++e) sum += row[kb * kK + 4 * r + e];
    }
    corr[kb] = 128 * sum;
  }
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  if (w.n * k_blocks * kQ8_0Bytes >= kStreamingBytes) {
    // Per row, in address order (one sequential stream), each block's exact product and scale,
    // stored [row][block]; then the f32 steps block after block with the 16 rows' values
    // gathered from that buffer: the same steps as below.
    const int64_t kbp = (k_blocks + 15) / 16 * 16;
    thread_local std::vector<int32_t> prod_buffer;
    prod_buffer.resize(static_cast<size_t>(kRows * kbp));
    int32_t* prod = prod_buffer.data();
    const uint8_t* wbytes = static_cast<const uint8_t*>(w.data);
    const int64_t row_bytes = k_blocks * kQ8_0Bytes;
    const __m512i block_index =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(kQ8_0Bytes));
    const __m512i row_index =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(static_cast<int>(kbp)));
    for (int64_t j = n_begin; j < n_end; j += kRows) {
      const int64_t rows = std::min<int64_t>(kRows, n_end - j);
      for (int64_t r = 0; r < kRows; ++r) {
        if (r >= rows) {
          std::memset(prod + r * kbp, 0, kbp * sizeof(int32_t));
          std::memset(dw + r * kbp, 0, kbp * sizeof(float));
          continue;
        }
        const uint8_t* wr = wbytes + (j + r) * row_bytes;
        for (int64_t b0 = 0; b0 < k_blocks; b0 += 16) {
          v16i d[8];
          for (int p = 0; p < 8; ++p) {
            const int64_t b = b0 + 2 * p;
            if (b >= k_blocks) {
              d[p] = v16i{};
              continue;
            }
            // blocks b and b + 1 (an odd last block alone, the upper half zero)
            const bool two = b + 1 < k_blocks;
            const __m256i lo =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + b * kQ8_0Bytes + 2));
            const __m256i hi = two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                                         wr + (b + 1) * kQ8_0Bytes + 2))
                                   : _mm256_setzero_si256();
            __m512i wv =
                _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), flip);
            __m512i xv = _mm512_castsi256_si512(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * kK)));
            if (two)
              xv = _mm512_inserti64x4(
                  xv, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + (b + 1) * kK)), 1);
            else
              wv = _mm512_zextsi256_si512(_mm512_castsi512_si256(wv));
            d[p] = reinterpret_cast<v16i>(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv));
          }
          const v16i sums = fold_lanes(fold_pairs(fold_quads(d[0], d[1]), fold_quads(d[2], d[3])),
                                       fold_pairs(fold_quads(d[4], d[5]), fold_quads(d[6], d[7])));
          const int64_t nb = std::min<int64_t>(16, k_blocks - b0);
          const __mmask16 valid = static_cast<__mmask16>((1u << nb) - 1);
          const __m512i c = _mm512_maskz_loadu_epi32(valid, corr + b0);
          _mm512_storeu_si512(prod + r * kbp + b0,
                              _mm512_sub_epi32(reinterpret_cast<__m512i>(sums), c));
          const __m512i h = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, block_index,
                                                        wr + b0 * kQ8_0Bytes, 1);
          _mm512_storeu_ps(dw + r * kbp + b0, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
        }
      }
      __m512 acc = _mm512_setzero_ps();
      for (int64_t kb = 0; kb < k_blocks; ++kb) {
        const __m512i p = _mm512_i32gather_epi32(row_index, prod + kb, 4);
        const __m512 s = _mm512_i32gather_ps(row_index, dw + kb, 4);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),
                              _mm512_mul_ps(_mm512_set1_ps(xd[kb * kRows]), s), acc);
      }
      alignas(64) float sums[kRows];
      _mm512_store_ps(sums, acc);
      write_sums([&](int64_t r, int64_t) { return sums[r]; }, rows, 1, j, 0, bias, y, 0,
                 accumulate);
    }
    return;
  }
  for (int64_t j = n_begin; j < n_end; j += kRows) {
    const int64_t rows = std::min<int64_t>(kRows, n_end - j);
    const Q8Rows src(w, j, rows, dw);
    const int8_t* rp[kRows];  // rows past the matrix repeat its last (their scales are zero)
    for (int r = 0; r < kRows; ++r) rp[r] = src.base + std::min<int64_t>(r, rows - 1) * src.stride;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      const __m512i xv = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + kb * kK)));
      const int64_t off = kb * kQ8_0Bytes;
      v16i d[8];
      for (int p = 0; p < 8; ++p) {
        __m512i wv = _mm512_inserti64x4(
            _mm512_castsi256_si512(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp[2 * p] + off))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp[2 * p + 1] + off)), 1);
        wv = _mm512_xor_si512(wv, flip);
        d[p] = reinterpret_cast<v16i>(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv));
      }
      const v16i s = fold_lanes(fold_pairs(fold_quads(d[0], d[1]), fold_quads(d[2], d[3])),
                                fold_pairs(fold_quads(d[4], d[5]), fold_quads(d[6], d[7]))) -
                     corr[kb];
      acc = _mm512_fmadd_ps(
          _mm512_cvtepi32_ps(reinterpret_cast<__m512i>(s)),
          _mm512_mul_ps(_mm512_set1_ps(xd[kb * kRows]), _mm512_loadu_ps(dw + kb * kRows)), acc);
    }
    alignas(64) float sums[kRows];
    _mm512_store_ps(sums, acc);
    write_sums([&](int64_t r, int64_t) { return sums[r]; }, rows, 1, j, 0, bias, y, 0, accumulate);
  }
}

// Per block: the int32 products of the tile, times (weight scale x activation scale), added to
// f32 sums, block after block; one vector of 16 tokens per weight row. (One token: q8_gemv,
// the same arithmetic.)
void q8_cols(const uint8_t* x, int64_t m, int64_t k, const WeightMatrix& w, int64_t n_begin,
             int64_t n_end, const float* bias, float* y, int64_t ldy, bool accumulate) {
  TF_CHECK(n_begin % kRows == 0 || n_begin >= n_end);
  if (m == 1) return q8_gemv(x, k, w, n_begin, n_end, bias, y, accumulate);
  const int64_t k_blocks = k / kK, m_blocks = (m + kRows - 1) / kRows;
  const int8_t* xq = reinterpret_cast<const int8_t*>(x);
  const float* xd = reinterpret_cast<const float*>(x + q8_quant_bytes(m, k));
  thread_local std::vector<float> dw_buffer;
  dw_buffer.resize(static_cast<size_t>(k_blocks * kRows));
  float* dw = dw_buffer.data();
  alignas(64) int32_t c[2][kRows][kRows];
  alignas(64) int8_t scratch[kRows * kK];
  alignas(64) float sums[kRows][kRows];
  configure_int8_tiles();
  constexpr int64_t c_stride = 64;
  // Block kb's products into c[kb % 2], on tiles of their own per parity (0 / 2 / 3 and
  // 1 / 4 / 5): the vector loads of block kb - 1's products then wait for a tile store issued one
  // block earlier, not for the one just issued (a tile store does not forward to loads; waiting
  // for it each block cost ~25 % of a decode).
  auto issue = [&](const Q8Rows& src, int64_t rows, const int8_t* xb, int64_t kb) {
    int64_t stride = 0;
    const int8_t* a = weight_quants(src, rows, kb, scratch, stride);
    if (kb % 2 == 0) {
      _tile_loadd(2, a, stride);
      _tile_loadd(3, xb + kb * kQBlock, 64);
      _tile_zero(0);
      _tile_dpbssd(0, 2, 3);
      _tile_stored(0, c[0], c_stride);
    } else {
      _tile_loadd(4, a, stride);
      _tile_loadd(5, xb + kb * kQBlock, 64);
      _tile_zero(1);
      _tile_dpbssd(1, 4, 5);
      _tile_stored(1, c[1], c_stride);
    }
  };
  const int64_t chunk = token_chunk(k_blocks * (kQBlock + kRows * sizeof(float)));
  for (int64_t m0 = 0; m0 < m_blocks; m0 += chunk) {
    const int64_t m1 = std::min(m_blocks, m0 + chunk);
    for (int64_t j = n_begin; j < n_end; j += kRows) {
      const int64_t rows = std::min<int64_t>(kRows, n_end - j);
      const Q8Rows src(w, j, rows, dw);
      for (int64_t mb = m0; mb < m1; ++mb) {
        __m512 acc[kRows];
        for (int r = 0; r < kRows; ++r) acc[r] = _mm512_setzero_ps();
        const int8_t* xb = xq + mb * k_blocks * kQBlock;
        const float* xs = xd + mb * k_blocks * kRows;
        auto consume = [&](int64_t kb) {
          const __m512 dx = _mm512_loadu_ps(xs + kb * kRows);
          for (int r = 0; r < kRows; ++r) {
            const __m512 p = _mm512_cvtepi32_ps(_mm512_load_si512(c[kb % 2][r]));
            acc[r] =
                _mm512_fmadd_ps(p, _mm512_mul_ps(_mm512_set1_ps(dw[kb * kRows + r]), dx), acc[r]);
          }
        };
        issue(src, rows, xb, 0);
        for (int64_t kb = 1; kb < k_blocks; ++kb) {
          issue(src, rows, xb, kb);
          consume(kb - 1);
        }
        consume(k_blocks - 1);
        for (int r = 0; r < kRows; ++r) _mm512_store_ps(sums[r], acc[r]);
        const int64_t i = mb * kRows;
        write_sums([&](int64_t r, int64_t t) { return sums[r][t]; }, rows,
                   std::min<int64_t>(kRows, m - i), j, i, bias, y, ldy, accumulate);
      }
    }
  }
  _tile_release();
}

// ---- the panel types ------------------------------------------------------------------------

// Tokens from which the panel types take the tiles: below it, the VNNI panel kernel (the same
// integers and f32 steps) is faster, a tile product of few tokens leaving most of it idle.
constexpr int64_t kPanelTileTokens = 12;

template <WeightType T>
void panel_tiles(const BlockQ8Rows& x, const WeightMatrix& w, int64_t n_begin, int64_t n_end,
                 const float* bias, float* y, int64_t ldy, bool accumulate) {
  constexpr int64_t kB = T == WeightType::kQ4Panels ? 16 : 32;  // bytes of a row's block
  constexpr int64_t kTileBytes = kRows * kK;                    // one block of a panel: 512
  const int64_t m = x.m, k = x.k, kb = k / kK, m_tiles = (m + kRows - 1) / kRows;
  const int64_t row_bytes = WeightMatrix::row_bytes(T, k);
  thread_local std::vector<int8_t> unpacked_buffer, xpack_buffer;
  thread_local std::vector<uint8_t> pad_data;
  thread_local std::vector<uint32_t> pad_scales;  // f16 [kb][16], or i8-panels' 16 floats
  thread_local std::vector<float> dw_buffer, xs_buffer;
  const int64_t chunk = token_chunk(kRows * k);
  unpacked_buffer.resize(static_cast<size_t>(kb * kTileBytes));
  dw_buffer.resize(static_cast<size_t>(kb * kRows));
  if (x.tq == nullptr) {
    xpack_buffer.resize(static_cast<size_t>(std::min(chunk, m_tiles) * kb * kTileBytes));
    xs_buffer.resize(static_cast<size_t>(std::min(chunk, m_tiles) * kb * kRows));
  }
  int8_t* unpacked = unpacked_buffer.data();
  int8_t* xpack = xpack_buffer.data();
  float* dw = dw_buffer.data();
  float* xs = xs_buffer.data();
  alignas(64) int32_t c[2][kRows][kRows];  // [token][weight row]
  alignas(64) float sums[kRows][kRows];
  configure_int8_tiles();  // 0, 1: products; 2, 4: tokens (16 x 32); 3, 5: weights (8 x 64)
  const __m512i low = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
  for (int64_t t0 = 0; t0 < m_tiles; t0 += chunk) {
    const int64_t t1 = std::min(m_tiles, t0 + chunk);
    // The chunk's tokens per tile and block, 16 x 32 quants in a row (a tile read with the rows'
    // stride k would take 16 lines of few cache sets when k is a power of two), and their scales
    // [tile][block][token]; tokens past m zero. matmul lays them out so once per call
    // (BlockQ8Rows::tq); else here, per chunk.
    if (x.tq == nullptr)
      for (int64_t mt = t0; mt < t1; ++mt) {
        const int64_t i = mt * kRows, tokens = std::min<int64_t>(kRows, m - i);
        int8_t* xp = xpack + (mt - t0) * kb * kTileBytes;
        float* xsp = xs + (mt - t0) * kb * kRows;
        for (int64_t b = 0; b < kb; ++b)
          for (int64_t t = 0; t < kRows; ++t) {
            if (t < tokens) {
              std::memcpy(xp + b * kTileBytes + t * kK, x.q + (i + t) * k + b * kK, kK);
              xsp[b * kRows + t] = x.d[(i + t) * kb + b];
            } else {
              std::memset(xp + b * kTileBytes + t * kK, 0, kK);
              xsp[b * kRows + t] = 0.0f;
            }
          }
      }
    const int8_t* xq_chunk = x.tq != nullptr ? x.tq + t0 * kb * kTileBytes : xpack;
    const float* xd_chunk = x.td != nullptr ? x.td + t0 * kb * kRows : xs;
    for (int64_t j = n_begin; j < n_end; j += kRows) {
      const int64_t rows = std::min<int64_t>(kRows, n_end - j);
      const uint8_t* pd = static_cast<const uint8_t*>(w.data) + j * row_bytes;
      const void* ps = T == WeightType::kI8Panels
                           ? static_cast<const void*>(static_cast<const float*>(w.scales) + j)
                           : static_cast<const uint16_t*>(w.scales) + j * kb;
      if (w.n - j < kRows) {  // a short last panel, padded to 16 rows as the VNNI kernel does
        pad_data.resize(static_cast<size_t>(kb * kRows * kB));
        pad_scales.resize(static_cast<size_t>(kb * kRows));
        pad_panel(w, j / kRows, pad_data.data(), pad_scales.data());
        pd = pad_data.data();
        ps = pad_scales.data();
      }
      for (int64_t b = 0; b < kb; ++b)  // the rows' scales per block (int8: the same for each)
        _mm512_storeu_ps(dw + b * kRows,
                         T == WeightType::kI8Panels
                             ? _mm512_loadu_ps(ps)
                             : _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                                   static_cast<const uint16_t*>(ps) + b * kRows))));
      const int8_t* wt = reinterpret_cast<const int8_t*>(pd);  // Q8_0: the panel's own bytes
      if constexpr (T == WeightType::kQ4Panels) {
        for (int64_t b = 0; b < kb; ++b)
          for (int u = 0; u < 4; ++u) {
            const __m512i v = _mm512_loadu_si512(pd + b * kRows * kB + 64 * u);
            int8_t* o = unpacked + b * kTileBytes;
            _mm512_storeu_si512(o + 64 * u, _mm512_sub_epi8(_mm512_and_si512(v, low), eight));
            _mm512_storeu_si512(
                o + 64 * (u + 4),
                _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), low), eight));
          }
        wt = unpacked;
      }
      for (int64_t mt = t0; mt < t1; ++mt) {
        const int64_t i = mt * kRows, tokens = std::min<int64_t>(kRows, m - i);
        const int8_t* xa = xq_chunk + (mt - t0) * kb * kTileBytes;
        const float* xsp = xd_chunk + (mt - t0) * kb * kRows;
        // Block b's products into c[b % 2] on tiles of their own per parity (as q8_cols).
        auto issue = [&](int64_t b) {
          if (b % 2 == 0) {
            _tile_loadd(2, xa + b * kTileBytes, kK);
            _tile_loadd(3, wt + b * kTileBytes, 64);
            _tile_zero(0);
            _tile_dpbssd(0, 2, 3);
            _tile_stored(0, c[0], 64);
          } else {
            _tile_loadd(4, xa + b * kTileBytes, kK);
            _tile_loadd(5, wt + b * kTileBytes, 64);
            _tile_zero(1);
            _tile_dpbssd(1, 4, 5);
            _tile_stored(1, c[1], 64);
          }
        };
        __m512 acc[kRows];
        for (int t = 0; t < kRows; ++t) acc[t] = _mm512_setzero_ps();
        auto consume = [&](int64_t b) {
          const __m512 d = _mm512_loadu_ps(dw + b * kRows);
          for (int t = 0; t < kRows; ++t) {
            const __m512 p = _mm512_cvtepi32_ps(_mm512_load_si512(c[b % 2][t]));
            acc[t] =
                _mm512_fmadd_ps(p, _mm512_mul_ps(_mm512_set1_ps(xsp[b * kRows + t]), d), acc[t]);
          }
        };
        issue(0);
        for (int64_t b = 1; b < kb; ++b) {
          issue(b);
          consume(b - 1);
        }
        consume(kb - 1);
        for (int t = 0; t < kRows; ++t) _mm512_store_ps(sums[t], acc[t]);
        write_sums([&](int64_t r, int64_t t) { return sums[t][r]; }, rows, tokens, j, i, bias, y,
                   ldy, accumulate);
      }
    }
  }
  _tile_release();
}

// ---- the table's entry points ----------------------------------------------------------------

bool takes(WeightType t, int64_t k) {
  if (t == WeightType::kBF16) return true;
  // Not tokenflow's int8 (a scale per row): its VNNI kernel decodes one token ~1.2x faster than
  // q8_gemv does, and every m must take one path. (Its prefill on the tiles was 2.2x.)
  return t == WeightType::kQ8_0 && k % kK == 0;
}

int64_t packed_bytes(WeightType t, int64_t m, int64_t k) {
  const int64_t m_blocks = (m + kRows - 1) / kRows;
  if (t == WeightType::kBF16) return m_blocks * ((k + kK - 1) / kK) * kBlock * 2;
  return q8_quant_bytes(m, k) + m_blocks * (k / kK) * kRows * static_cast<int64_t>(sizeof(float));
}

void pack_rows(WeightType t, const float* x, int64_t m, int64_t k, int64_t i0, int64_t i1,
               uint8_t* out) {
  if (t == WeightType::kBF16)
    pack_bf16_rows(x, m, k, i0, i1, reinterpret_cast<uint16_t*>(out));
  else
    pack_q8_rows(x, m, k, i0, i1, out);
}

void matmul_cols(const uint8_t* x, int64_t m, int64_t k, const WeightMatrix& w, int64_t n_begin,
                 int64_t n_end, const float* bias, float* y, int64_t ldy, bool accumulate) {
  switch (w.type) {
    case WeightType::kBF16:
      return bf16_cols(reinterpret_cast<const uint16_t*>(x), m, k, w, n_begin, n_end, bias, y, ldy,
                       accumulate);
    case WeightType::kQ8_0:
      return q8_cols(x, m, k, w, n_begin, n_end, bias, y, ldy, accumulate);
    default:
      TF_CHECK(!"amx tiles: bf16 or Q8_0 weights expected");
  }
}

}  // namespace

void amx_matmul_cols_panels(const BlockQ8Rows& x, const WeightMatrix& w, int64_t n_begin,
                            int64_t n_end, const float* bias, float* y, int64_t ldy,
                            bool accumulate) {
  if (x.m < kPanelTileTokens)
    return kAvx512Bf16Kernels.matmul_cols_panels(x, w, n_begin, n_end, bias, y, ldy, accumulate);
  if (n_begin >= n_end) return;
  TF_CHECK(n_begin % kRows == 0 && (n_end % kRows == 0 || n_end == w.n));
  TF_CHECK(x.k == w.k && w.k % kK == 0);
  if (w.type == WeightType::kQ4Panels)
    return panel_tiles<WeightType::kQ4Panels>(x, w, n_begin, n_end, bias, y, ldy, accumulate);
  if (w.type == WeightType::kI8Panels)
    return panel_tiles<WeightType::kI8Panels>(x, w, n_begin, n_end, bias, y, ldy, accumulate);
  TF_CHECK(w.type == WeightType::kQ8_0Panels);
  panel_tiles<WeightType::kQ8_0Panels>(x, w, n_begin, n_end, bias, y, ldy, accumulate);
}

const TileKernels& amx_tile_kernels() {
  static const TileKernels t{&takes, &packed_bytes, &pack_rows, &matmul_cols, kRows};
  return t;
}

}  // namespace tf::kernels
