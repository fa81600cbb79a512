#pragma once
// Decides, every step, which sequences run and how many of their tokens: running sequences
// first (decodes and unfinished prompt chunks, oldest first), then waiting ones (by priority,
// then in fair turns between tenants: start-time fair queueing over sequences, so that a
// request of 8,192 sequences does not hold back one that comes after it; a tenant's turns go
// round between its API requests), under a token budget and a sequence limit, so a long prompt is
// split into chunks and never stalls the decodes of others. When blocks run out, the newest running
// sequence is preempted: its blocks are freed and it waits to be recomputed. update() takes
// what the forward pass computed.

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/sequence.h"

namespace tf {

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 2048;  // tokens per forward pass
  int64_t max_num_seqs = 256;  // sequences per forward pass (TF Serving's max_batch_size)
  bool chunked_prefill = true;
  // Request-level batching, only to measure what continuous batching gains: a new batch is
  // admitted only when the previous one has ended.
  bool static_batching = false;
  // With static batching: finished rows keep computing (their last token, again) until the
  // batch's longest member ends, as the rows of a padded batch tensor do in TF Serving.
  bool pad_finished = false;
};

struct ScheduledChunk {
  Sequence* seq;
  int64_t start;  // first token index (== seq->num_computed when scheduled)
  int64_t count;
};

// The plain record of one step: row i of the forward pass computes chunks[i].
struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  // Copies of shared blocks that scheduled sequences are about to write into, to make in this
  // order before the forward pass (KvCacheManager::allocate_slots).
  std::vector<BlockCopy> block_copies;
  std::vector<Sequence*> preempted;
  int64_t num_tokens = 0;
};

// A sequence whose chunk reached the end of its tokens: its logits row is ready to sample.
struct ReadySequence {
  Sequence* seq;
  int64_t row;  // index into the step's chunks (and logits rows)
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, KvCacheManager& kv) : config_(config), kv_(kv) {}

  // Queues a sequence (new, or preempted and to be recomputed: then at the front).
  void add(Sequence* seq, bool front = false);
  // Removes a sequence wherever it is (finished, cancelled), frees its blocks and marks it
  // finished.
  void remove(Sequence* seq);
  // Static batching with padding: the finished sequence keeps its row (and its blocks) and
  // recomputes its last token every step until the batch ends; then it is removed. A sequence
  // that is not running has no row to keep: it is removed at once.
  void pad(Sequence* seq);
  // Starts child running from where parent is (a sample of n > 1 from the prompt, a beam from
  // its parent beam): it shares parent's blocks (KvCacheManager::fork).
  void fork(const Sequence& parent, Sequence& child);

  SchedulerOutput schedule();
  // Takes what the step computed (vLLM's update_from_output): every scheduled chunk's tokens now
  // have K/V, and the blocks they filled join the prefix cache. Returns the sequences whose
  // chunk reached the end of their tokens, in chunk order; padding rows and sequences removed
  // since schedule() are left out.
  std::vector<ReadySequence> update(const SchedulerOutput& out);

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  int64_t preemptions() const { return preemptions_; }
  int64_t block_copies() const { return block_copies_; }
  bool idle() const { return waiting_.empty() && running_.empty(); }
  // The prefix-cache salt of a sequence's blocks: its request's, keyed apart per LoRA adapter.
  uint64_t salt(const Sequence* seq) const;

 private:
  void preempt(Sequence* victim, SchedulerOutput& out);
  void drop_padding(Sequence* seq);
  void share_turns(uint64_t tenant, int32_t priority);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::deque<Sequence*> waiting_;
  // Fair turns: a sequence's tag is one past the later of its tenant's last tag and the tag of
  // the last sequence admitted (virtual_clock_); the waiting queue is in tag order.
  uint64_t virtual_clock_ = 0;
  std::unordered_map<uint64_t, uint64_t> tenant_tags_;
  std::vector<Sequence*> running_;  // in admission order: the last is the newest
  int64_t preemptions_ = 0;
  int64_t block_copies_ = 0;
};

}  // namespace tf
