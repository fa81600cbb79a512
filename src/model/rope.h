#pragma once
// Rotary position embeddings with every scaling in use: the kinds of transformers' `rope_scaling`
// (v4) / `rope_parameters` (v5) and of GGUF's `{arch}.rope.scaling.*`: default, linear, dynamic
// (NTK-aware), yarn (with its attention factor), llama3 (Llama 3.1's low/high frequency factors)
// and longrope (Phi-3's short/long factors), with partial rotary dimensions.
//
// Kinds whose frequencies depend on the sequence's length (dynamic, longrope) take it from the
// token's own position (pos + 1), so a token's rotation never depends on its batch or on how its
// prompt was chunked: transformers computes them from the longest position of its forward call,
// which is the same for decode steps and for prompts up to the original context.

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace tf {

struct RopeParams {
  enum class Kind { kDefault, kLinear, kDynamic, kYarn, kLlama3, kLongRope };
  Kind kind = Kind::kDefault;
  double theta = 10000.0;
  int64_t rot_dim = 0;  // dimensions rotated per head (head_dim * partial_rotary_factor); 0: all
  double factor = 1.0;
  // The context the model was trained with before scaling (yarn, llama3, longrope), and for
  // dynamic the length beyond which the base grows.
  int64_t original_max_pos = 0;
  double attention_factor = 0.0;              // yarn / longrope; 0: derived from the factor
  double beta_fast = 32.0, beta_slow = 1.0;   // yarn
  bool truncate = true;                       // yarn: integer correction range
  double mscale = 0.0, mscale_all_dim = 0.0;  // yarn (DeepSeek form of the attention factor)
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  std::vector<double> short_factor, long_factor;         // longrope, rot_dim / 2 each
  // Per-frequency divisors applied after the kind (GGUF's `rope_freqs.weight`, which llama.cpp's
  // converter writes for Llama 3.1's scaling); empty: none.
  std::vector<double> freq_factors;
};

const char* rope_kind_name(RopeParams::Kind kind);

// YaRN's attention factor of a scale s: 0.1 m ln s + 1 above 1, else 1 (the paper's sqrt(1/t)).
double yarn_mscale(double s, double m = 1.0);

// Throws an Error naming `source` when a field is out of range for the kind.
void validate_rope(const RopeParams& p, int64_t head_dim, const std::string& source);

// The precomputed frequencies of one RopeParams for heads of head_dim.
class Rope {
 public:
  Rope() = default;
  Rope(const RopeParams& p, int64_t head_dim, kernels::RopeStyle style);

  // Rotates n_heads heads (of head_dim) at position pos in place.
  void apply(float* x, int n_heads, int64_t pos) const;
  // As apply, for a token of an input of len tokens seen whole (an encoder's): the kinds whose
  // frequencies depend on the length take len, not pos + 1.
  void apply_in(float* x, int n_heads, int64_t pos, int64_t len) const;

  int64_t rot_dim() const { return rot_dim_; }
  // The frequencies at position pos (rot_dim / 2) and the factor on cos and sin.
  const float* inv_freq(int64_t pos, std::vector<float>& scratch) const;
  float scale() const { return scale_; }

 private:
  RopeParams p_;
  int64_t head_dim_ = 0, rot_dim_ = 0;
  kernels::RopeStyle style_ = kernels::RopeStyle::kHalf;
  std::vector<float> inv_freq_;       // every kind but dynamic; longrope: the short factors
  std::vector<float> long_inv_freq_;  // longrope beyond the original context
  float scale_ = 1.0f;
};

}  // namespace tf
