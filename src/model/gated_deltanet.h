#pragma once
// Gated DeltaNet (Yang, Kautz and Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with Delta
// Rule", 2024), the linear-attention layers of Qwen3-Next and Qwen3.5: per token, projections to
// q, k, v (through a causal depthwise convolution of a few taps and SiLU), an output gate z and
// the per-head decay g and write strength beta; q and k L2-normalized; per value head a state
// S [dk, dv] that decays and takes a delta-rule write,
//   S_t = e^{g_t} S_{t-1} + k_t (beta_t (v_t - (e^{g_t} S_{t-1})^T k_t))^T,   o_t = S_t^T q_t,
// each head's output RMS-normalized, gated by SiLU(z) and projected out.
//
// A sequence's convolution window and states live in its recurrent cache block (KvCache::state),
// zeroed when it starts at position 0, so a chunked prefill and every decode step continue where
// the last stopped. Runs of tokens of one sequence go through the chunkwise form (the paper's
// Section 3, chunks of kChunk: the chunk's writes found by one triangular solve, its outputs
// and state update as small matrix products); decode steps through the recurrent one. Both are
// the same sums, in another order.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/weight_store.h"

namespace tf {

class GatedDeltaNet {
 public:
  static constexpr int64_t kChunk = 64;

  // Scratch shared by a model's layers (grown, never shrunk).
  struct Scratch {
    std::vector<float> proj, ba, mixed, z, beta, g, out;
    std::vector<int64_t> starts;
  };

  // The layer's weights under prefix ("model.layers.N.linear_attn."): Qwen3-Next's in_proj_qkvz
  // and in_proj_ba (grouped per key head), or Qwen3.5's in_proj_qkv, in_proj_z, in_proj_b,
  // in_proj_a (config.split_linear_proj).
  GatedDeltaNet(const ModelConfig& config, WeightStore& w, const std::string& prefix);

  // x[t] += the layer's output for the normed rows xb[t] of every token of the batch; layer:
  // the cache layer whose recurrent state it reads and writes. chunked: whether runs of a
  // sequence's tokens take the chunkwise form (false: token by token throughout; tests compare
  // the two).
  void forward(std::span<const SequenceChunk> batch, const float* xb, int64_t T, KvCache& kv,
               int64_t layer, float* x, Scratch& s, ThreadPool& pool, bool chunked = true) const;

 private:
  // The delta rule over the tokens [first, end) of one sequence for value head h, from and into
  // its state S [dk, dv]; outputs into s.out.
  void recurrent(int64_t first, int64_t end, int64_t h, float* S, Scratch& s) const;
  void chunkwise(int64_t first, int64_t end, int64_t h, float* S, Scratch& s) const;

  int64_t nk_, nv_, dk_, dv_, kernel_, channels_;
  float eps_;
  bool split_;
  kernels::WeightMatrix qkvz_, ba_;        // Qwen3-Next
  kernels::WeightMatrix qkv_, z_, b_, a_;  // Qwen3.5
  kernels::WeightMatrix out_;
  std::vector<float> conv_;             // [channels, kernel]: tap kernel - 1 is the current input
  std::vector<float> a_neg_, dt_bias_;  // -exp(A_log), dt_bias per value head
  const float* norm_ = nullptr;         // [dv]
};

}  // namespace tf
