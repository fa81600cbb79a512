#pragma once
// Beam search with Hugging Face generate() semantics: each step scores every (beam, token) by the
// beam's running sum of log-probabilities, keeps the best 2*num_beams candidates, retires those
// that end in EOS as finished hypotheses (scored sum / generated_length^length_penalty) and
// continues with the best num_beams others. This standalone search (the engine's reference) gives
// each beam its own KV blocks and copies a parent's to its children; the engine instead shares
// them and copies a block only on its first write (engine/sequence_group.h).

#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"
#include "sampling/logits_processor.h"
#include "sampling/sampling_params.h"

namespace tf {

class ThreadPool;

struct BeamHypothesis {
  std::vector<int32_t> tokens;  // generated tokens, EOS included when it ended the hypothesis
  double sum_logprob = 0.0;
  double score = 0.0;  // sum_logprob / generated_length^length_penalty
  bool finished_by_eos = false;
};

// One candidate continuation: beam `beam` extended by `token`, with the new running sum.
struct BeamCandidate {
  double score;
  int beam;
  int32_t token;
};

// Appends every (beam, token) candidate of one beam's raw logits: log-softmax, the processors
// (over that beam's history), plus the beam's running sum. Masked tokens are skipped.
void add_beam_candidates(std::vector<float>& logits, const SamplingParams& params,
                         const TokenHistory& history, std::span<const int32_t> eos_ids,
                         double running_sum, int beam, std::vector<BeamCandidate>& out);

// One step of Hugging Face's beam selection over all candidates: keeps the best 2*num_beams,
// retires those ending in EOS (only from the top num_beams) into `finished` (kept to the best
// num_beams), and returns up to num_beams continuing candidates, best first. beam_tokens[b] are
// beam b's generated tokens so far.
std::vector<BeamCandidate> select_beams(std::vector<BeamCandidate>& cands,
                                        const SamplingParams& params,
                                        std::span<const int32_t> eos_ids,
                                        const std::vector<std::vector<int32_t>>& beam_tokens,
                                        std::vector<BeamHypothesis>& finished);

// Whether the search is over after a step that produced `next` beams of `generated` tokens.
bool beams_done(const std::vector<BeamHypothesis>& finished, const std::vector<BeamCandidate>& next,
                size_t generated, const SamplingParams& params);

// Finished hypotheses plus the running beams as hypotheses, best first, num_return_sequences of
// them (the reference's finalize).
std::vector<BeamHypothesis> finalize_beams(std::vector<BeamHypothesis> finished,
                                           const std::vector<std::vector<int32_t>>& running_tokens,
                                           const std::vector<double>& running_sums,
                                           const SamplingParams& params);

// Returns params.num_return_sequences hypotheses, best first. Uses blocks [0, 2 * num_beams *
// blocks_per_sequence) of `kv`, which must be large enough (throws otherwise).
std::vector<BeamHypothesis> beam_search(Model& model, KvCache& kv, ThreadPool& pool,
                                        std::span<const int32_t> prompt,
                                        const SamplingParams& params,
                                        std::span<const int32_t> eos_ids);

// Blocks beam_search needs for this prompt and params.
int64_t beam_search_blocks(int64_t prompt_len, const SamplingParams& params, int block_size);

}  // namespace tf
