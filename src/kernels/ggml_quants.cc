#include "kernels/ggml_quants.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace tf::kernels {
namespace {

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// The non-linear 4-bit values of IQ4_NL and IQ4_XS.
constexpr int8_t kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                               1,    13,   25,  38,  53,  69,  89,  113};

void q8_0(const uint8_t* b, float* y) {
  const float d = half(b);
  const auto* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int i = 0; i < 32; ++i) y[i] = d * q[i];
}

void q4_0(const uint8_t* b, float* y) {
  const float d = half(b);
  const uint8_t* q = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * ((q[j] & 0xF) - 8);
    y[j + 16] = d * ((q[j] >> 4) - 8);
  }
}

void q4_1(const uint8_t* b, float* y) {
  const float d = half(b), m = half(b + 2);
  const uint8_t* q = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * (q[j] & 0xF) + m;
    y[j + 16] = d * (q[j] >> 4) + m;
  }
}

// Q5_0 / Q5_1: value j's fifth bit is bit j of qh (j < 16 low nibbles, 16.. high ones).
void q5(const uint8_t* b, float* y, bool with_min) {
  const float d = half(b), m = with_min ? half(b + 2) : 0.0f;
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

void q4_k(const uint8_t* b, float* y) {
  const float d = half(b), dmin = half(b + 2);
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
  const float d = half(b), dmin = half(b + 2);
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
  const float d = half(b + 208);
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
  const float d = half(b + 80), dmin = half(b + 82);
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
  const float d = half(b + 108);
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
  const float d = half(b);
  const uint8_t* q = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * kIq4nl[q[j] & 0xF];
    y[j + 16] = d * kIq4nl[q[j] >> 4];
  }
}

void iq4_xs(const uint8_t* b, float* y) {
  const float d = half(b);
  uint16_t scales_h;
  std::memcpy(&scales_h, b + 2, 2);
  const uint8_t* scales_l = b + 4;
  const uint8_t* q = b + 8;
  for (int ib = 0; ib < 8; ++ib) {
    const int ls =
        ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * (ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * kIq4nl[q[j] & 0xF];
      y[j + 16] = dl * kIq4nl[q[j] >> 4];
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
      default:
        break;
    }
  }
}

}  // namespace tf::kernels
