#pragma once
// Beam search with Hugging Face generate() semantics: each step scores every (beam, token) by the
// beam's running sum of log-probabilities, keeps the best 2*num_beams candidates, retires those
// that end in EOS as finished hypotheses (scored sum / generated_length^length_penalty) and
// continues with the best num_beams others. Each beam owns its KV blocks; a beam that continues
// another's prefix gets a copy of them (the engine issue replaces the copy by shared blocks).

#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"
#include "sampling/sampling_params.h"

namespace tf {

class ThreadPool;

struct BeamHypothesis {
  std::vector<int32_t> tokens;  // generated tokens, EOS included when it ended the hypothesis
  double sum_logprob = 0.0;
  double score = 0.0;  // sum_logprob / generated_length^length_penalty
  bool finished_by_eos = false;
};

// Returns params.num_return_sequences hypotheses, best first. Uses blocks [0, 2 * num_beams *
// blocks_per_sequence) of `kv`, which must be large enough (throws otherwise).
std::vector<BeamHypothesis> beam_search(Model& model, KvCache& kv, ThreadPool& pool,
                                        std::span<const int32_t> prompt,
                                        const SamplingParams& params,
                                        std::span<const int32_t> eos_ids);

// Blocks beam_search needs for this prompt and params.
int64_t beam_search_blocks(int64_t prompt_len, const SamplingParams& params, int block_size);

}  // namespace tf
