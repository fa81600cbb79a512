#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/isa.h"

namespace tf::kernels {

void rms_norm(const float* x, const float* w, float eps, int64_t n, float* y) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
}

void layer_norm(const float* x, const float* w, const float* b, float eps, int64_t n, float* y) {
  double mean = 0.0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<double>(n);
  double var = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = x[i] - mean;
    var += d * d;
  }
  var /= static_cast<double>(n);
  const double inv = 1.0 / std::sqrt(var + eps);
  for (int64_t i = 0; i < n; ++i) {
    y[i] = static_cast<float>((x[i] - mean) * inv) * w[i] + (b ? b[i] : 0.0f);
  }
}

void rope(float* x, int n_heads, int head_dim, int64_t pos, const float* inv_freq, RopeStyle style,
          int rot_dim, float scale) {
  const int half = (rot_dim > 0 ? rot_dim : head_dim) / 2;
  for (int i = 0; i < half; ++i) {
    // Angles in double: positions reach 10^5 and f32 would lose the low bits of pos * freq.
    const double angle = static_cast<double>(pos) * inv_freq[i];
    const float c = static_cast<float>(std::cos(angle)) * scale;
    const float s = static_cast<float>(std::sin(angle)) * scale;
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + static_cast<int64_t>(h) * head_dim;
      const int a = style == RopeStyle::kHalf ? i : 2 * i;
      const int b = style == RopeStyle::kHalf ? i + half : 2 * i + 1;
      const float x0 = v[a];
      const float x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  isa().silu_mul(gate, up, n);
}

void gelu_tanh(float* x, int64_t n) {
  isa().gelu_tanh(x, n);
}

void gelu_erf(float* x, int64_t n) {
  isa().gelu_erf(x, n);
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float mx = *std::max_element(x, x + n);
  if (mx == -std::numeric_limits<float>::infinity()) {
    std::fill(x, x + n, 1.0f / static_cast<float>(n));
    return;
  }
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace tf::kernels
