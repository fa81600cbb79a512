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

// 16 floats rounded to bf16 as f32_to_bf16 does (to nearest even; a NaN stays a NaN, made
// quiet), each in the high half of its lane. (vcvtne2ps2bf16 would flush denormals.)
inline __m512i bf16_high_halves(__m512i bits) {
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
  return _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(bits, _mm512_set1_epi32(0x400000)));
}

void pack_bf16_rows(const float* x, int64_t m, int64_t k, int64_t i0, int64_t i1, uint16_t* out) {
  const int64_t k_blocks = (k + kK - 1) / kK;
  // Word w of a block's 16 pairs is the high half of value w: word 2w + 1 of the two vectors.
  alignas(64) uint16_t pick[32];
  for (int w = 0; w < 32; ++w) pick[w] = static_cast<uint16_t>(2 * w + 1);
  const __m512i pick_high = _mm512_load_si512(pick);
  // Pair r of a token's block goes to dword r * 16 (r * 32 values) of the block.
  const __m512i pair_at =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(16));
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t t = i % kRows;
    uint16_t* blocks = out + (i / kRows) * k_blocks * kBlock + 2 * t;
    const float* row = x + i * k;
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      const int64_t q = kb * kK, left = k - q;  // values past k are zero
      const __mmask16 lo = left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
      const __mmask16 hi = left >= kK   ? 0xFFFF
                           : left <= 16 ? 0
                                        : static_cast<__mmask16>((1u << (left - 16)) - 1);
      const __m512i a = bf16_high_halves(_mm512_maskz_loadu_epi32(lo, row + q));
      const __m512i b = bf16_high_halves(_mm512_maskz_loadu_epi32(hi, row + q + 16));
      _mm512_i32scatter_epi32(blocks + kb * kBlock, pair_at,
                              _mm512_permutex2var_epi16(a, pick_high, b), 4);
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

// ---- int8 tiles (the panel types) ----------------------------------------------------------

// int8: tiles 0, 1 int32 products (16 tokens x 16 weight rows), 2, 4 tokens (16 x 32 int8), 3, 5
// weights (8 quads x 16 rows x 4 int8).
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

// 16 unsigned bytes (a Q4_K sub-block's scale or minimum for 16 rows) as floats.
inline __m512 k4_factor(const uint8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// Tokens from which the panel types take the tiles (TileKernels::panel_tokens): below it, the
// VNNI panel kernel (the same integers and f32 steps) is faster, a tile product of few tokens
// leaving most of it idle.
constexpr int64_t kPanelTileTokens = 12;

template <WeightType T>
void panel_tiles(const BlockQ8Rows& x, const WeightMatrix& w, int64_t n_begin, int64_t n_end,
                 const float* bias, float* y, int64_t ldy, bool accumulate) {
  constexpr int64_t kB = T == WeightType::kQ4Panels ? 16 : 32;  // bytes of a row's block
  constexpr int64_t kTileBytes = kRows * kK;                    // one block of a panel: 512
  // Q4_K: unsigned nibbles (tdpbsud) and a minimum per sub-block, subtracted through the tokens'
  // quant sums.
  constexpr bool kK4 = T == WeightType::kQ4_KPanels;
  const int64_t m = x.m, k = x.k, kb = k / kK, m_tiles = (m + kRows - 1) / kRows;
  thread_local std::vector<int8_t> unpacked_buffer;
  thread_local PanelPadding pad;
  thread_local std::vector<float> dw_buffer, dm_buffer;
  const int64_t chunk = token_chunk(kRows * k);
  unpacked_buffer.resize(static_cast<size_t>(kb * kTileBytes));
  dw_buffer.resize(static_cast<size_t>(kb * kRows));
  if (kK4) dm_buffer.resize(static_cast<size_t>(kb * kRows));
  int8_t* unpacked = unpacked_buffer.data();
  float* dw = dw_buffer.data();
  float* dm = dm_buffer.data();
  alignas(64) int32_t c[2][kRows][kRows];  // [token][weight row]
  alignas(64) float sums[kRows][kRows];
  configure_int8_tiles();  // 0, 1: products; 2, 4: tokens (16 x 32); 3, 5: weights (8 x 64)
  const __m512i low = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
  for (int64_t t0 = 0; t0 < m_tiles; t0 += chunk) {
    const int64_t t1 = std::min(m_tiles, t0 + chunk);
    // The chunk's tokens per tile and block (BlockQ8Rows::tq, td, ts: laid out once per call).
    const int8_t* xq_chunk = x.tq + t0 * kb * kTileBytes;
    const float* xd_chunk = x.td + t0 * kb * kRows;
    const float* xsum_chunk = x.ts + t0 * kb * kRows;
    for (int64_t j = n_begin; j < n_end; j += kRows) {
      const int64_t rows = std::min<int64_t>(kRows, n_end - j);
      // A short last panel padded to 16 rows, as the VNNI kernel reads it (Q4_K: its factors
      // inside the panel).
      const WholePanel panel = whole_panel(w, j / kRows, pad);
      const uint8_t* pd = panel.data;
      const void* ps = panel.scales;
      const int8_t* wt = reinterpret_cast<const int8_t*>(pd);  // Q8_0: the panel's own bytes
      if constexpr (kK4) {
        // Per sub-block b: d sc and dmin m of the 16 rows (as the VNNI kernel computes them), and
        // its nibbles unpacked: the low ones of each 64 values are sub-block 2j, the high 2j + 1.
        for (int64_t sb = 0; sb < kb / 8; ++sb) {
          const uint8_t* q = pd + sb * 148 * kRows;
          const uint8_t* ds = q + 128 * kRows;
          const __m512 d =
              _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ds)));
          const __m512 dmin =
              _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ds + 32)));
          for (int s = 0; s < 8; ++s) {
            const int64_t b = sb * 8 + s;
            _mm512_storeu_ps(dw + b * kRows, _mm512_mul_ps(d, k4_factor(ds + 64 + 16 * s)));
            _mm512_storeu_ps(dm + b * kRows, _mm512_mul_ps(dmin, k4_factor(ds + 192 + 16 * s)));
          }
          for (int jj = 0; jj < 4; ++jj)
            for (int u = 0; u < 8; ++u) {
              const __m512i v = _mm512_loadu_si512(q + jj * 512 + 64 * u);
              int8_t* o = unpacked + (sb * 8 + 2 * jj) * kTileBytes;
              _mm512_storeu_si512(o + 64 * u, _mm512_and_si512(v, low));
              _mm512_storeu_si512(o + kTileBytes + 64 * u,
                                  _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
            }
        }
        wt = unpacked;
      } else {
        for (int64_t b = 0; b < kb; ++b)  // the rows' scales per block (int8: the same for each)
          _mm512_storeu_ps(
              dw + b * kRows,
              T == WeightType::kI8Panels
                  ? _mm512_loadu_ps(ps)
                  : _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                        static_cast<const uint16_t*>(ps) + b * kRows))));
      }
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
        // Block b's products into c[b % 2] on tiles of their own per parity, consumed one block
        // late: the vector loads of a block's products then wait for a tile store issued a
        // block earlier (a tile store does not forward to loads). No lambdas here: an
        // accumulator array captured by reference lived on the stack.
        __m512 acc[kRows];
        for (int t = 0; t < kRows; ++t) acc[t] = _mm512_setzero_ps();
        _tile_loadd(2, xa, kK);
        _tile_loadd(3, wt, 64);
        _tile_zero(0);
        if constexpr (kK4)
          _tile_dpbsud(0, 2, 3);
        else
          _tile_dpbssd(0, 2, 3);
        _tile_stored(0, c[0], 64);
        for (int64_t b = 1; b <= kb; ++b) {
          if (b < kb) {
            if (b % 2 == 0) {
              _tile_loadd(2, xa + b * kTileBytes, kK);
              _tile_loadd(3, wt + b * kTileBytes, 64);
              _tile_zero(0);
              if constexpr (kK4)
                _tile_dpbsud(0, 2, 3);
              else
                _tile_dpbssd(0, 2, 3);
              _tile_stored(0, c[0], 64);
            } else {
              _tile_loadd(4, xa + b * kTileBytes, kK);
              _tile_loadd(5, wt + b * kTileBytes, 64);
              _tile_zero(1);
              if constexpr (kK4)
                _tile_dpbsud(1, 4, 5);
              else
                _tile_dpbssd(1, 4, 5);
              _tile_stored(1, c[1], 64);
            }
          }
          const int64_t pb = b - 1;  // the block consumed now
          const int32_t(*cp)[kRows] = c[pb % 2];
          const float* xb = xsp + pb * kRows;
          const __m512 d = _mm512_loadu_ps(dw + pb * kRows);
          for (int t = 0; t < kRows; ++t) {
            const __m512 p = _mm512_cvtepi32_ps(_mm512_load_si512(cp[t]));
            const __m512 dx = _mm512_set1_ps(xb[t]);
            acc[t] = _mm512_fmadd_ps(p, _mm512_mul_ps(dx, d), acc[t]);
            if constexpr (kK4)
              acc[t] = _mm512_fnmadd_ps(
                  _mm512_set1_ps(xsum_chunk[(mt - t0) * kb * kRows + pb * kRows + t]),
                  _mm512_mul_ps(dx, _mm512_loadu_ps(dm + pb * kRows)), acc[t]);
          }
        }
        for (int t = 0; t < kRows; ++t) _mm512_store_ps(sums[t], acc[t]);
        write_sums([&](int64_t r, int64_t t) { return sums[t][r]; }, rows, tokens, j, i, bias, y,
                   ldy, accumulate);
      }
    }
  }
  _tile_release();
}

// ---- the table's entry points ----------------------------------------------------------------

bool takes(WeightType t, int64_t) {
  // bf16 by the tiles' own layout; q4 / Q4_0, Q8_0, int8 and Q4_K as panels
  // (amx_matmul_cols_panels; the other panel types: their VNNI kernels).
  return t == WeightType::kBF16 || t == WeightType::kQ4Panels || t == WeightType::kQ8_0Panels ||
         t == WeightType::kI8Panels || t == WeightType::kQ4_KPanels;
}

int64_t packed_bytes(WeightType t, int64_t m, int64_t k) {
  TF_CHECK(t == WeightType::kBF16);
  return (m + kRows - 1) / kRows * ((k + kK - 1) / kK) * kBlock * 2;
}

void pack_rows(WeightType t, const float* x, int64_t m, int64_t k, int64_t i0, int64_t i1,
               uint8_t* out) {
  TF_CHECK(t == WeightType::kBF16);
  pack_bf16_rows(x, m, k, i0, i1, reinterpret_cast<uint16_t*>(out));
}

void matmul_cols(const uint8_t* x, int64_t m, int64_t k, const WeightMatrix& w, int64_t n_begin,
                 int64_t n_end, const float* bias, float* y, int64_t ldy, bool accumulate) {
  TF_CHECK(w.type == WeightType::kBF16);
  bf16_cols(reinterpret_cast<const uint16_t*>(x), m, k, w, n_begin, n_end, bias, y, ldy,
            accumulate);
}

}  // namespace

void amx_matmul_cols_panels(const BlockQ8Rows& x, const WeightMatrix& w, int64_t n_begin,
                            int64_t n_end, const float* bias, float* y, int64_t ldy,
                            bool accumulate) {
  // Without the tiles' activation layout (fewer than kPanelTileTokens tokens), and the panel types
  // the tiles do not take (Q5_K, Q6_K, IQ4: Q6_K's scales per 16 values would need a tile product
  // and its epilogue per 16): VNNI.
  if (x.tq == nullptr || !takes(w.type, w.k))
    return kAvx512Bf16Kernels.matmul_cols_panels(x, w, n_begin, n_end, bias, y, ldy, accumulate);
  if (n_begin >= n_end) return;
  TF_CHECK(n_begin % kRows == 0 && (n_end % kRows == 0 || n_end == w.n));
  TF_CHECK(x.k == w.k && w.k % kK == 0);
  if (w.type == WeightType::kQ4Panels)
    return panel_tiles<WeightType::kQ4Panels>(x, w, n_begin, n_end, bias, y, ldy, accumulate);
  if (w.type == WeightType::kI8Panels)
    return panel_tiles<WeightType::kI8Panels>(x, w, n_begin, n_end, bias, y, ldy, accumulate);
  if (w.type == WeightType::kQ4_KPanels)
    return panel_tiles<WeightType::kQ4_KPanels>(x, w, n_begin, n_end, bias, y, ldy, accumulate);
  TF_CHECK(w.type == WeightType::kQ8_0Panels);
  panel_tiles<WeightType::kQ8_0Panels>(x, w, n_begin, n_end, bias, y, ldy, accumulate);
}

const TileKernels& amx_tile_kernels() {
  static const TileKernels t{&takes,       &packed_bytes, &pack_rows,
                             &matmul_cols, kRows,         kPanelTileTokens};
  return t;
}

}  // namespace tf::kernels
