#pragma once
// Proposers for speculative decoding (issue 27). Prompt lookup (vLLM's "ngram", llama.cpp's
// lookup decoding): the longest suffix of the sequence, from max_n tokens down to min_n, that
// occurred earlier in the sequence (prompt and output alike) proposes the tokens that followed
// its most recent earlier occurrence. Pure: the engine asks it once per step for each sequence
// that speculates.

#include <cstdint>
#include <span>
#include <vector>

namespace tf {

struct NgramConfig {
  int32_t min_n = 1;          // the shortest suffix that may match
  int32_t max_n = 4;          // the longest suffix tried (the first, longest, match wins)
  int32_t num_tokens = 4;     // the most tokens proposed
  int64_t max_window = 4096;  // how far back matches are searched (0: the whole sequence)
};

// Up to config.num_tokens tokens that followed the most recent earlier occurrence of the
// sequence's longest matching suffix; empty when no suffix of min_n tokens or more recurs.
// Throws Error for a config that cannot propose (min_n < 1, max_n < min_n, num_tokens < 1).
std::vector<int32_t> ngram_propose(std::span<const int32_t> tokens, const NgramConfig& config);

}  // namespace tf
