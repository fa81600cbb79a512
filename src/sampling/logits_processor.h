#pragma once
// Steps 1-6 of the processor pipeline (sampling_params.h has the order): they rewrite one row of
// logits in place, touching only the tokens a rule names (the history's distinct tokens, the
// biased ids), never sweeping the vocabulary more than once.

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "sampling/sampling_params.h"

namespace tf {

// What one sequence has seen: its prompt and what it generated so far.
class TokenHistory {
 public:
  explicit TokenHistory(std::span<const int32_t> prompt = {});
  void append(int32_t token);

  const std::vector<int32_t>& prompt() const { return prompt_; }
  const std::vector<int32_t>& output() const { return output_; }
  // Occurrences of each token in the output.
  const std::unordered_map<int32_t, int32_t>& output_counts() const { return output_counts_; }
  // Every distinct token of prompt and output.
  const std::unordered_map<int32_t, int32_t>& seen() const { return seen_; }

 private:
  std::vector<int32_t> prompt_, output_;
  std::unordered_map<int32_t, int32_t> output_counts_, seen_;
};

// Applies steps 1-6 to `logits` (vocab entries). eos_ids are the ids that end a sequence.
void apply_logits_processors(const SamplingParams& params, const TokenHistory& history,
                             std::span<const int32_t> eos_ids, std::span<float> logits);

}  // namespace tf
