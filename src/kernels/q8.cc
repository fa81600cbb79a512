#include "kernels/q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/error.h"

namespace tf::kernels {

const QuantizedRows& prepare_activations(int64_t m, int64_t k, QuantizedBuffer& buf) {
  TF_CHECK(k % 64 == 0);
  const int64_t chunks = k / 64;
  buf.q.resize(static_cast<size_t>(m * k));
  buf.scale.resize(static_cast<size_t>(m * chunks * 16));
  buf.corr.resize(static_cast<size_t>(m * chunks * 16));
  buf.sums.resize(static_cast<size_t>(m * k / 32));
  buf.rows = {m, k, buf.q.data(), buf.scale.data(), buf.corr.data(), buf.sums.data()};
  return buf.rows;
}

#if defined(__SSE2__)
// SSE2 (every x86-64 CPU), the same operations as the scalar form below lane by lane, so the
// quants are the same bits: |x| by clearing the sign, the maximum with the running one second
// (maxps returns its second operand for a NaN, as std::max keeps its first), x * (1 / d) plus
// +-0.5 with x's sign, truncated, clamped to +-127.
float quantize_q8_block32(const float* xb, int8_t* qb) {
  const __m128 sign = _mm_set1_ps(-0.0f);
  __m128 v[8];
  __m128 mx = _mm_setzero_ps();
  for (int t = 0; t < 8; ++t) {
    v[t] = _mm_loadu_ps(xb + 4 * t);
    mx = _mm_max_ps(_mm_andnot_ps(sign, v[t]), mx);
  }
  mx = _mm_max_ps(mx, _mm_shuffle_ps(mx, mx, _MM_SHUFFLE(1, 0, 3, 2)));
  mx = _mm_max_ps(mx, _mm_shuffle_ps(mx, mx, _MM_SHUFFLE(2, 3, 0, 1)));
  const float amax = _mm_cvtss_f32(mx);
  const float d = amax / 127.0f;
  const __m128 inv = _mm_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
  const __m128 half = _mm_set1_ps(0.5f);
  const __m128i lo = _mm_set1_epi16(-127), hi = _mm_set1_epi16(127);
  __m128i r16[4];
  for (int t = 0; t < 4; ++t) {
    __m128i r32[2];
    for (int u = 0; u < 2; ++u) {
      const __m128 q = _mm_mul_ps(v[2 * t + u], inv);
      // q < 0 takes -0.5 (q = -0 takes -0.5 too, which truncates to the same 0)
      r32[u] = _mm_cvttps_epi32(_mm_add_ps(q, _mm_or_ps(_mm_and_ps(q, sign), half)));
    }
    r16[t] = _mm_min_epi16(_mm_max_epi16(_mm_packs_epi32(r32[0], r32[1]), lo), hi);
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm_packs_epi16(r16[0], r16[1]));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm_packs_epi16(r16[2], r16[3]));
  return d;
}
#else
float quantize_q8_block32(const float* xb, int8_t* qb) {
  float amax = 0.0f;
  for (int e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(xb[e]));
  const float d = amax / 127.0f;
  const float inv = d > 0.0f ? 1.0f / d : 0.0f;
  for (int e = 0; e < 32; ++e) {
    const float v = xb[e] * inv;  // |v| <= 127.5 by construction of inv
    const int r = static_cast<int>(v + (v < 0.0f ? -0.5f : 0.5f));
    qb[e] = static_cast<int8_t>(std::clamp(r, -127, 127));
  }
  return d;
}
#endif

void quantize_row(const float* x, int64_t i, int32_t c, QuantizedBuffer& buf) {
  const int64_t k = buf.rows.k, chunks = k / 64;
  for (int64_t b = 0; b < k / 32; ++b) {
    int8_t* qb = buf.q.data() + i * k + b * 32;
    const float d = quantize_q8_block32(x + i * k + b * 32, qb);
    // Block b is lanes 0-7 (even b) or 8-15 (odd b) of chunk b / 2.
    float* sl = buf.scale.data() + (i * chunks + b / 2) * 16 + (b % 2) * 8;
    int32_t* cl = buf.corr.data() + (i * chunks + b / 2) * 16 + (b % 2) * 8;
    int sum = 0;
    for (int l = 0; l < 8; ++l) {
      const int lane = qb[4 * l] + qb[4 * l + 1] + qb[4 * l + 2] + qb[4 * l + 3];
      sl[l] = d;
      cl[l] = -c * lane;
      sum += lane;
    }
    buf.sums[i * (k / 32) + b] = d * static_cast<float>(sum);
  }
}

const BlockQ8Rows& prepare_block_activations(int64_t m, int64_t k, BlockQ8Buffer& buf, bool tiles) {
  TF_CHECK(k % 32 == 0);
  const int64_t m_tiles = (m + 15) / 16;
  buf.tq.resize(tiles ? static_cast<size_t>(m_tiles * 16 * k) : 0);
  buf.td.resize(tiles ? static_cast<size_t>(m_tiles * 16 * k / 32) : 0);
  buf.ts.resize(buf.td.size());
  if (tiles && m % 16 != 0) {  // the last tile's rows past m: zero quants and scales
    const int64_t last = (m_tiles - 1) * 16 * k;
    std::memset(buf.tq.data() + last, 0, static_cast<size_t>(16 * k));
    std::memset(buf.td.data() + last / 32, 0, static_cast<size_t>(16 * k / 32) * sizeof(float));
    std::memset(buf.ts.data() + last / 32, 0, static_cast<size_t>(16 * k / 32) * sizeof(float));
  }
  buf.q.resize(static_cast<size_t>(m * k));
  buf.d.resize(static_cast<size_t>(m * k / 32));
  buf.s16.resize(static_cast<size_t>(m * k / 16));
  buf.s32.resize(static_cast<size_t>(m * k / 32));
  buf.q32.resize(static_cast<size_t>(m * k / 32));
  buf.q16.resize(static_cast<size_t>(m * k / 32));
  buf.rows = {m,
              k,
              buf.q.data(),
              buf.d.data(),
              buf.s16.data(),
              buf.s32.data(),
              buf.q32.data(),
              buf.q16.data(),
              tiles ? buf.tq.data() : nullptr,
              tiles ? buf.td.data() : nullptr,
              tiles ? buf.ts.data() : nullptr};
  return buf.rows;
}

namespace {

// The sums of a block's two halves of 16 quants.
inline void half_sums(const int8_t* qb, int sums[2]) {
#if defined(__SSE2__)
  // The quants biased to unsigned (x ^ 0x80 = x + 128), each 8 bytes summed by psadbw.
  const __m128i bias = _mm_set1_epi8(static_cast<char>(0x80)), zero = _mm_setzero_si128();
  for (int h = 0; h < 2; ++h) {
    const __m128i s = _mm_sad_epu8(
        _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qb + 16 * h)), bias), zero);
    sums[h] = _mm_cvtsi128_si32(s) + _mm_extract_epi16(s, 4) - 16 * 128;
  }
#else
  sums[0] = sums[1] = 0;
  for (int e = 0; e < 32; ++e) sums[e / 16] += qb[e];
#endif
}

}  // namespace

void quantize_block_row(const float* x, int64_t i, BlockQ8Buffer& buf) {
  const int64_t k = buf.rows.k;
  for (int64_t b = 0; b < k / 32; ++b) {
    int8_t* qb = buf.q.data() + i * k + b * 32;
    const float d = quantize_q8_block32(x + i * k + b * 32, qb);
    buf.d[i * (k / 32) + b] = d;
    int sums[2];
    half_sums(qb, sums);
    buf.s16[i * (k / 16) + 2 * b] = d * static_cast<float>(sums[0]);
    buf.s16[i * (k / 16) + 2 * b + 1] = d * static_cast<float>(sums[1]);
    buf.s32[i * (k / 32) + b] = d * static_cast<float>(sums[0] + sums[1]);
    buf.q32[i * (k / 32) + b] = sums[0] + sums[1];
    buf.q16[i * (k / 32) + b] = sums[0];
    if (buf.rows.tq != nullptr) {  // tile i / 16, block b, row i % 16
      const int64_t at = ((i / 16) * (k / 32) + b) * 16 + i % 16;
      std::memcpy(buf.tq.data() + at * 32, qb, 32);
      buf.td[at] = d;
      buf.ts[at] = static_cast<float>(sums[0] + sums[1]);
    }
  }
}

const QuantizedRows& quantize_activations(const float* x, int64_t m, int64_t k, int32_t c,
                                          QuantizedBuffer& buf) {
  prepare_activations(m, k, buf);
  for (int64_t i = 0; i < m; ++i) quantize_row(x, i, c, buf);
  return buf.rows;
}

}  // namespace tf::kernels
