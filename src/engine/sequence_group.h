#pragma once
// The sequences of one request and what ties them together (vLLM's SequenceGroup).
//
// n > 1 (or best_of): one sequence per sample, each with its own seeded sampler. The first
// computes the prompt; when its logits are ready the others fork from it (sharing every block)
// and sample their first token from the same row.
//
// Beam search: the live beams. In a step in which every beam has its logits, one selection over
// all of them (Hugging Face's, shared with the standalone beam_search) picks the next beams,
// each a fork of its parent extended by one token; the parents leave. A fork shares blocks and
// the scheduler copies a shared block only when a sequence first writes into it, so a parent
// with one child costs no copy and one with k children k - 1 copies.
//
// The group speaks to the scheduler only (fork, remove), never to the block pool or the KV memory.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/sequence.h"
#include "sampling/beam_search.h"

namespace tf {

struct EngineRequest;
class Scheduler;
class Tokenizer;

// Beam search state: per live beam its running sum and its logits row this step (-1: none yet);
// the hypotheses finished so far (after the search: the ones to return, best first).
struct BeamState {
  std::vector<double> sums;
  std::vector<int64_t> rows;
  std::vector<BeamHypothesis> finished;
};

class SequenceGroup {
 public:
  // Makes the request's sequences, none of them scheduled: its samples, or its first beam (the
  // prompt). The request must hold its spec and seed. decoder_start >= 0: an encoder-decoder's
  // sequences, whose prompt is the encoder's input and whose tokens start from decoder_start.
  void create_sequences(EngineRequest& request, const Tokenizer* tokenizer,
                        const std::vector<int32_t>& eos_ids, int32_t decoder_start = -1);

  bool beam_search() const { return beam_search_; }
  // The sequence that computes the prompt: the one to schedule first.
  Sequence& first() { return *seqs_.at(0); }
  const std::vector<std::unique_ptr<Sequence>>& sequences() const { return seqs_; }
  // Every sequence ended: sampled its last token, was cancelled, or the beam search ended.
  bool done() const { return unfinished_ == 0; }
  // A finished sequence still holds a row of a padded static batch.
  bool padding() const;
  // Counts one sample as ended; true when it was the last.
  bool finish_sample();
  // Takes every sequence out of the scheduler, freeing its blocks; the group is done.
  void remove_all(Scheduler& sched);

  // n > 1: once the first sample's prompt is computed (it is `ready`), the others fork from it
  // and run. Returns them, to sample their first token from ready's logits row before ready
  // itself does (its sampler changes the row); empty every other time.
  std::vector<Sequence*> start_siblings(const Sequence& ready, Scheduler& sched);

  // Beam search: the beam's logits are row `row` of this step's.
  void set_beam_row(const Sequence& beam, int64_t row);
  // Called once per step. When every live beam has its row (logits: the step's rows of vocab
  // floats), selects the next beams and forks them, or ends the search (done(), with its
  // hypotheses in beams().finished). Returns the tokens selected: 0 when a beam is still being
  // recomputed after a preemption (the others then recompute their last token, so that every
  // beam has logits in the same step).
  int64_t step_beams(const float* logits, int64_t vocab, std::span<const int32_t> eos_ids,
                     Scheduler& sched);
  const BeamState& beams() const { return beams_; }

 private:
  EngineRequest* request_ = nullptr;
  bool beam_search_ = false;
  std::vector<std::unique_ptr<Sequence>> seqs_;
  int32_t unfinished_ = 0;
  bool siblings_started_ = false;
  BeamState beams_;
};

}  // namespace tf
