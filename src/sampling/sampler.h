#pragma once
// Step 7 of the pipeline (truncation) and the draw itself, plus log-probabilities. The draw takes
// its uniform number from a counter-based generator keyed by (seed, sequence, step), so a
// request's tokens depend on nothing but its own seed: not on batch mates, threads or order.

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "sampling/sampling_params.h"

namespace tf {

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;           // of the chosen token (when logprobs were asked for)
  std::vector<TokenLogprob> top;  // the most likely alternatives, best first
};

// A uniform number in [0, 1) for draw `step` of sequence `stream` of a request seeded `seed`.
double sample_uniform(uint64_t seed, uint64_t stream, uint64_t step);

// A fresh seed for requests that did not give one.
uint64_t random_seed();

// Index of the largest value; the lowest index wins ties.
int32_t argmax(std::span<const float> logits);

// The log-probability of `token` under log_softmax(logits) and the top_k most likely tokens
// (best first, ties to the lower id), as sampling reports them; with rank, the token's rank (1:
// the most likely). Prompt logprobs use it on the model's raw logits.
SampleResult logprobs_of(std::span<const float> logits, int32_t token, int32_t top_k,
                         int32_t* rank = nullptr);

class Sampler {
 public:
  // logits are processed (steps 1-6). Greedy when params.greedy(); else truncates and draws
  // with `uniform`. Fills logprobs when params.logprobs is set. Scratch grows once to the vocab.
  SampleResult sample(const SamplingParams& params, std::span<const float> logits, double uniform);

  // The final distribution after truncation: (token, probability) pairs summing to 1, in the
  // order the draw walks them; empty when every logit is -inf. Exposed for tests against the
  // reference.
  std::vector<std::pair<int32_t, double>> distribution(const SamplingParams& params,
                                                       std::span<const float> logits);

 private:
  void truncate(const SamplingParams& params, std::span<const float> logits);
  std::vector<std::pair<float, int32_t>> cand_;  // (logit, token), best first after truncate()
  std::vector<double> probs_;
};

}  // namespace tf
