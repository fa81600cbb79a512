#pragma once
// Picks the next token from a row of logits: greedy, or temperature sampling truncated by top-k
// and top-p, with a per-request seeded generator so the same seed gives the same tokens.

#include <cstdint>
#include <optional>
#include <vector>

namespace tf {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  std::optional<uint64_t> seed;

  // Throws an Error naming the parameter when a value is out of range.
  void validate() const;
};

// A small counter-free generator (xoshiro256**) seeded through splitmix64: the sequence depends
// only on the seed, on every platform and standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  float uniform();  // [0, 1) with 24 random bits

 private:
  uint64_t s_[4];
};

// Index of the largest value; the lowest index wins ties.
int32_t argmax(const float* logits, int64_t n);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // May reorder nothing in logits; uses internal scratch that grows once to the vocab size.
  int32_t sample(const float* logits, int64_t n);

 private:
  SamplingParams params_;
  Rng rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

}  // namespace tf
