#include "kernels/ggml_quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace tf::kernels {

// Q4_K / Q5_K: sub-block j's 6-bit scale and min in 12 bytes (j < 4: the low 6 bits of bytes j and
// j + 4; else 4 bits from byte j + 4 and the top 2 bits of bytes j - 4 and j).
void scale_min_k4(int j, const uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

namespace {

void q8_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const auto* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int i = 0; i < 32; ++i) y[i] = d * q[i];
}

void q4_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const uint8_t* q = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * ((q[j] & 0xF) - 8);
    y[j + 16] = d * ((q[j] >> 4) - 8);
  }
}

void q4_1(const uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  const uint8_t* q = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * (q[j] & 0xF) + m;
    y[j + 16] = d * (q[j] >> 4) + m;
  }
}

// Q5_0 / Q5_1: value j's fifth bit is bit j of qh (j < 16 low nibbles, 16.. high ones).
void q5(const uint8_t* b, float* y, bool with_min) {
  const float d = f16_at(b), m = with_min ? f16_at(b + 2) : 0.0f;
  const uint8_t* p = b + (with_min ? 4 : 2);
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  const uint8_t* q = p + 4;
  for (int j = 0; j < 16; ++j) {
    const int lo = (q[j] & 0xF) | (((qh >> j) & 1) << 4);
    const int hi = (q[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    if (with_min) {
      y[j] = d * lo + m;
      y[j + 16] = d * hi + m;
    } else {
      y[j] = d * (lo - 16);
      y[j + 16] = d * (hi - 16);
    }
  }
}

void q4_k(const uint8_t* b, float* y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0; j < 8; j += 2) {  // 64 values: 32 low nibbles, then 32 high ones
    int sc, m;
    scale_min_k4(j, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(j + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    q += 32;
  }
}

void q5_k(const uint8_t* b, float* y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < 8; j += 2) {
    int sc, m;
    scale_min_k4(j, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(j + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * ((q[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * ((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    q += 32;
    u1 <<= 2;
    u2 <<= 2;
  }
}

void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16_at(b + 208);
  for (int n = 0; n < 2; ++n) {  // two halves of 128 values
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * sc[is] * q1;
      y[l + 32] = d * sc[is + 2] * q2;
      y[l + 64] = d * sc[is + 4] * q3;
      y[l + 96] = d * sc[is + 6] * q4;
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

void q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = f16_at(b + 80), dmin = f16_at(b + 82);
  int is = 0;
  for (int n = 0; n < 2; ++n) {  // two halves of 128 values, 32 bytes of 2-bit q each
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half16 = 0; half16 < 2; ++half16) {  // 16 values per scale
        const uint8_t sc = scales[is++];
        const float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l + 16 * half16] >> shift) & 3) - ml;
      }
    }
    q += 32;
  }
}

void q3_k(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const uint8_t* packed = b + 96;
  const float d = f16_at(b + 108);
  // 16 6-bit scales: the low 4 bits from bytes 0-7 (nibbles), the top 2 from bytes 8-11.
  int scales[16];
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? packed[i] & 0xF : packed[i - 8] >> 4;
    const int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
    scales[i] = (low | (high << 4)) - 32;
  }
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < 2; ++n) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half16 = 0; half16 < 2; ++half16) {
        const float dl = d * scales[is++];
        for (int l = 0; l < 16; ++l) {
          const int k = l + 16 * half16;
          *y++ = dl * (((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4));
        }
      }
      m <<= 1;
    }
    q += 32;
  }
}

void iq4_nl(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const uint8_t* q = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * kIq4nlValues[q[j] & 0xF];
    y[j + 16] = d * kIq4nlValues[q[j] >> 4];
  }
}

void mxfp4(const uint8_t* b, float* y) {
  const float d = e8m0_half(b[0]);
  const uint8_t* q = b + 1;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * kMxfp4Values[q[j] & 0xF];
    y[j + 16] = d * kMxfp4Values[q[j] >> 4];
  }
}

void iq4_xs(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  uint16_t scales_h;
  std::memcpy(&scales_h, b + 2, 2);
  const uint8_t* scales_l = b + 4;
  const uint8_t* q = b + 8;
  for (int ib = 0; ib < 8; ++ib) {
    const int ls =
        ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * (ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * kIq4nlValues[q[j] & 0xF];
      y[j + 16] = dl * kIq4nlValues[q[j] >> 4];
    }
    y += 32;
    q += 16;
  }
}

}  // namespace

void dequantize_blocks(WeightType t, const void* data, int64_t n, float* out) {
  TF_CHECK(is_block_type(t));
  const int64_t bs = block_size(t), bb = block_bytes(t);
  if (n % bs != 0)
    fail("{} values are not a whole number of {} blocks of {}", n, weight_type_name(t), bs);
  const auto* b = static_cast<const uint8_t*>(data);
  for (int64_t i = 0; i < n / bs; ++i, b += bb, out += bs) {
    switch (t) {
      case WeightType::kQ8_0:
        q8_0(b, out);
        break;
      case WeightType::kQ4_0:
        q4_0(b, out);
        break;
      case WeightType::kQ4_1:
        q4_1(b, out);
        break;
      case WeightType::kQ5_0:
        q5(b, out, false);
        break;
      case WeightType::kQ5_1:
        q5(b, out, true);
        break;
      case WeightType::kQ2_K:
        q2_k(b, out);
        break;
      case WeightType::kQ3_K:
        q3_k(b, out);
        break;
      case WeightType::kQ4_K:
        q4_k(b, out);
        break;
      case WeightType::kQ5_K:
        q5_k(b, out);
        break;
      case WeightType::kQ6_K:
        q6_k(b, out);
        break;
      case WeightType::kIQ4_NL:
        iq4_nl(b, out);
        break;
      case WeightType::kIQ4_XS:
        iq4_xs(b, out);
        break;
      case WeightType::kMXFP4:
        mxfp4(b, out);
        break;
      default:
        break;
    }
  }
}

}  // namespace tf::kernels

namespace tf::kernels {
namespace {

void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

int nearest(float v, int lo, int hi) {
  const long r = std::lrint(v);
  return static_cast<int>(std::clamp<long>(r, lo, hi));
}

// The value of largest magnitude, with its sign.
float signed_max(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// Symmetric blocks of 32 (Q8_0, Q4_0, Q5_0): d from the signed maximum, q = x / d + offset.
void symmetric32(const float* x, float divisor, int offset, int qmax, uint8_t* d_at, int* q) {
  const float d = signed_max(x, 32) / divisor;
  put_half(d_at, d);
  const float ds = f16_at(d_at);
  const float id = ds != 0.0f ? 1.0f / ds : 0.0f;
  for (int i = 0; i < 32; ++i) q[i] = nearest(x[i] * id + static_cast<float>(offset), 0, qmax);
}

// Blocks of 32 with a minimum (Q4_1, Q5_1): x = d q + m.
void affine32(const float* x, int qmax, uint8_t* dm_at, int* q) {
  float mn = x[0], mx = x[0];
  for (int i = 1; i < 32; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  put_half(dm_at, (mx - mn) / static_cast<float>(qmax));
  put_half(dm_at + 2, mn);
  const float d = f16_at(dm_at), m = f16_at(dm_at + 2);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < 32; ++i) q[i] = nearest((x[i] - m) * id, 0, qmax);
}

void pack_nibbles(const int* q, uint8_t* out) {
  for (int j = 0; j < 16; ++j)
    out[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
}

uint32_t fifth_bits(const int* q) {
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  return qh;
}

// Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scales and minima under f16 d and dmin.
void quantize_k45(const float* x, int qmax, uint8_t* b, bool five) {
  float scale[8], minv[8];
  for (int j = 0; j < 8; ++j) {
    float mn = 0.0f, mx = x[32 * j];
    for (int i = 0; i < 32; ++i) {
      mn = std::min(mn, x[32 * j + i]);
      mx = std::max(mx, x[32 * j + i]);
    }
    mx = std::max(mx, mn);
    scale[j] = (mx - mn) / static_cast<float>(qmax);
    minv[j] = -mn;
  }
  const float max_scale = *std::max_element(scale, scale + 8);
  const float max_min = *std::max_element(minv, minv + 8);
  put_half(b, max_scale / 63.0f);
  put_half(b + 2, max_min / 63.0f);
  const float d = f16_at(b), dmin = f16_at(b + 2);
  int sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = d > 0.0f ? nearest(scale[j] / d, 0, 63) : 0;
    m[j] = dmin > 0.0f ? nearest(minv[j] / dmin, 0, 63) : 0;
  }
  uint8_t* s = b + 4;
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
  int q[256];
  for (int j = 0; j < 8; ++j) {
    const float dl = d * static_cast<float>(sc[j]), ml = dmin * static_cast<float>(m[j]);
    for (int i = 0; i < 32; ++i)
      q[32 * j + i] = dl > 0.0f ? nearest((x[32 * j + i] + ml) / dl, 0, qmax) : 0;
  }
  uint8_t* qh = b + 16;
  uint8_t* qs = b + (five ? 48 : 16);
  if (five) std::memset(qh, 0, 32);
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) {
      const int lo = q[64 * p + l], hi = q[64 * p + 32 + l];
      qs[32 * p + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      if (five)
        qh[l] |=
            static_cast<uint8_t>((((lo >> 4) & 1) << (2 * p)) | (((hi >> 4) & 1) << (2 * p + 1)));
    }
  }
}

// Q6_K: 16 sub-blocks of 16 with int8 scales under f16 d, values q - 32.
void quantize_q6_k(const float* x, uint8_t* b) {
  float scale[16];
  for (int s = 0; s < 16; ++s) scale[s] = signed_max(x + 16 * s, 16) / -32.0f;
  float amax = 0.0f;
  for (float v : scale) amax = std::max(amax, std::fabs(v));
  put_half(b + 208, amax / 127.0f);
  const float d = f16_at(b + 208);
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  int L[256];
  for (int s = 0; s < 16; ++s) {
    sc[s] = static_cast<int8_t>(d > 0.0f ? nearest(scale[s] / d, -127, 127) : 0);
    const float dl = d * static_cast<float>(sc[s]);
    for (int i = 0; i < 16; ++i)
      L[16 * s + i] = dl != 0.0f ? nearest(x[16 * s + i] / dl + 32.0f, 0, 63) : 32;
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int n = 0; n < 2; ++n) {
    const int* y = L + 128 * n;
    for (int l = 0; l < 32; ++l) {
      ql[64 * n + l] = static_cast<uint8_t>((y[l] & 0xF) | ((y[l + 64] & 0xF) << 4));
      ql[64 * n + l + 32] = static_cast<uint8_t>((y[l + 32] & 0xF) | ((y[l + 96] & 0xF) << 4));
      qh[32 * n + l] = static_cast<uint8_t>((y[l] >> 4) | ((y[l + 32] >> 4) << 2) |
                                            ((y[l + 64] >> 4) << 4) | ((y[l + 96] >> 4) << 6));
    }
  }
}

void quantize_iq4_nl(const float* x, uint8_t* b) {
  put_half(b, signed_max(x, 32) / static_cast<float>(kIq4nlValues[0]));
  const float d = f16_at(b);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int q[32];
  for (int i = 0; i < 32; ++i) {
    const float v = x[i] * id;
    int best = 0;
    for (int t = 1; t < 16; ++t) {
      if (std::fabs(v - static_cast<float>(kIq4nlValues[t])) <
          std::fabs(v - static_cast<float>(kIq4nlValues[best])))
        best = t;
    }
    q[i] = best;
  }
  pack_nibbles(q, b + 2);
}

}  // namespace

bool can_quantize_blocks(WeightType t) {
  switch (t) {
    case WeightType::kQ8_0:
    case WeightType::kQ4_0:
    case WeightType::kQ4_1:
    case WeightType::kQ5_0:
    case WeightType::kQ5_1:
    case WeightType::kQ4_K:
    case WeightType::kQ5_K:
    case WeightType::kQ6_K:
    case WeightType::kIQ4_NL:
      return true;
    default:
      return false;
  }
}

void quantize_blocks(WeightType t, const float* x, int64_t n, void* out) {
  if (!can_quantize_blocks(t))
    fail(ErrorKind::kUnsupported,
         "writing {} is not supported (q8_0, q4_0, q4_1, q5_0, q5_1, "
         "q4_k, q5_k, q6_k, iq4_nl are)",
         weight_type_name(t));
  const int64_t bs = block_size(t), bb = block_bytes(t);
  if (n % bs != 0)
    fail("{} values are not a whole number of {} blocks of {}", n, weight_type_name(t), bs);
  auto* b = static_cast<uint8_t*>(out);
  int q[32];
  for (int64_t i = 0; i < n / bs; ++i, b += bb, x += bs) {
    switch (t) {
      case WeightType::kQ8_0: {
        const float d = std::fabs(signed_max(x, 32)) / 127.0f;
        put_half(b, d);
        const float ds = f16_at(b);
        const float id = ds != 0.0f ? 1.0f / ds : 0.0f;
        for (int j = 0; j < 32; ++j)
          reinterpret_cast<int8_t*>(b + 2)[j] = static_cast<int8_t>(nearest(x[j] * id, -127, 127));
      } break;
      case WeightType::kQ4_0:
        symmetric32(x, -8.0f, 8, 15, b, q);
        pack_nibbles(q, b + 2);
        break;
      case WeightType::kQ5_0: {
        symmetric32(x, -16.0f, 16, 31, b, q);
        const uint32_t qh = fifth_bits(q);
        std::memcpy(b + 2, &qh, 4);
        pack_nibbles(q, b + 6);
        break;
      }
      case WeightType::kQ4_1:
        affine32(x, 15, b, q);
        pack_nibbles(q, b + 4);
        break;
      case WeightType::kQ5_1: {
        affine32(x, 31, b, q);
        const uint32_t qh = fifth_bits(q);
        std::memcpy(b + 4, &qh, 4);
        pack_nibbles(q, b + 8);
        break;
      }
      case WeightType::kQ4_K:
        quantize_k45(x, 15, b, false);
        break;
      case WeightType::kQ5_K:
        quantize_k45(x, 31, b, true);
        break;
      case WeightType::kQ6_K:
        quantize_q6_k(x, b);
        break;
      case WeightType::kIQ4_NL:
        quantize_iq4_nl(x, b);
        break;
      default:
        break;
    }
  }
}

}  // namespace tf::kernels
