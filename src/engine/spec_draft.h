#pragma once
// The draft-model proposer of speculative decoding (issue 27): a second, smaller or more coarsely
// quantized model with the target's vocabulary proposes k tokens per step for each sequence that
// speculates, by k forward passes of its own over those sequences side by side. It keeps its
// own paged KV cache: a shadow of each sequence (its tokens and block table over the draft's
// pool) that catches up on the tokens it has not seen (the prompt, first) and is cut back to
// what the target accepted (keep()). The engine verifies the proposals with the target.

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/thread_pool.h"
#include "engine/kv_block_pool.h"
#include "engine/kv_cache_manager.h"
#include "engine/sequence.h"
#include "model/model.h"

namespace tf {

class DraftProposer {
 public:
  // kv_blocks of block_size tokens; the model must outlive the proposer.
  DraftProposer(Model& model, int64_t kv_blocks, int block_size, kernels::KvType kv_type);

  struct Job {
    Sequence* seq;  // the target's sequence: its tokens are real (no proposals appended yet)
    int64_t k;      // proposals wanted (>= 1)
    std::vector<int32_t> drafts;  // out: up to k tokens (none: the draft could not propose)
    std::vector<float> q;  // out: the distribution of each proposal (k rows of the vocabulary);
                           // empty when they are point masses (greedy sequences)
  };
  // Catches every job's shadow up on its sequence's tokens (at most max_catch_up of them this
  // step: a longer backlog proposes nothing until it caught up) and draws k proposals from the
  // draft with each sequence's sampling parameters (SequenceSampler::draft).
  void propose(std::vector<Job>& jobs, ThreadPool& pool, int64_t max_catch_up);
  // After verification: the shadow's K/V stay valid for the sequence's first `valid` tokens.
  void keep(const Sequence& seq, int64_t valid);
  // The sequence ended: its shadow's blocks go back to the draft's pool.
  void release(const Sequence& seq);
  void release_all();

  const Model& model() const { return model_; }
  int64_t blocks_used() const { return pool_.num_used(); }

 private:
  struct Shadow {
    Sequence seq;        // tokens, num_computed and block table over the draft's pool
    uint64_t owner = 0;  // the target sequence's request (arrival order) and index
  };
  Shadow& shadow_of(const Sequence& seq);
  static uint64_t owner_of(const Sequence& seq);

  Model& model_;
  KvCache kv_;
  KvBlockPool pool_;
  KvCacheManager manager_;
  std::unordered_map<const Sequence*, Shadow> shadows_;
  std::vector<SequenceChunk> batch_;
  std::vector<float> logits_;
};

}  // namespace tf
