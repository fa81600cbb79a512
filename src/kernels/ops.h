#pragma once
// Element-wise and row-wise ops of the transformer block. They are cheap next to the matmuls and
// run single-threaded over one row at a time; the model parallelizes over rows where it pays.

#include <cstdint>

namespace tf::kernels {

// y = x / sqrt(mean(x²) + eps) * w
void rms_norm(const float* x, const float* w, float eps, int64_t n, float* y);
// y = (x - mean) / sqrt(var + eps) * w + b
void layer_norm(const float* x, const float* w, const float* b, float eps, int64_t n, float* y);

enum class RopeStyle {
  kHalf,         // Hugging Face / GPT-NeoX: rotates (x[i], x[i + d/2])
  kInterleaved,  // Meta's original, llama2.c, GGUF: rotates (x[2i], x[2i + 1])
};

// Rotates the first rot_dim dimensions (0: all) of each of n_heads heads of size head_dim at
// position pos, cos and sin multiplied by scale (YaRN's and LongRoPE's attention factor). inv_freq
// has rot_dim/2 entries; style pairs (i, i + rot_dim/2) or (2i, 2i + 1).
void rope(float* x, int n_heads, int head_dim, int64_t pos, const float* inv_freq, RopeStyle style,
          int rot_dim = 0, float scale = 1.0f);

// gate[i] = silu(gate[i]) * up[i]
void silu_mul(float* gate, const float* up, int64_t n);
// x[i] = gelu_new(x[i]), the tanh approximation GPT-2 uses
void gelu_tanh(float* x, int64_t n);
// x[i] = gelu(x[i]) = x/2 (1 + erf(x / sqrt 2)), the exact form BERT uses
void gelu_erf(float* x, int64_t n);
// In-place softmax; returns nothing, handles -inf entries.
void softmax(float* x, int64_t n);
// y[i] += x[i]
void add(float* y, const float* x, int64_t n);

}  // namespace tf::kernels
