#pragma once
// One sequence the engine schedules: its tokens (prompt, then what it generated), how many of
// them have K/V in the cache, its block table, and the sampler that extends it. A request with
// n > 1 owns n sequences (its SequenceGroup); they share the prompt's blocks through a fork.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/sha256.h"
#include "sampling/sequence_sampler.h"

namespace tf {

struct EngineRequest;

enum class SequenceStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  EngineRequest* request = nullptr;
  int32_t index = 0;            // among the request's sequences (the sampler's stream)
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t prompt_len = 0;
  int64_t num_computed = 0;  // tokens whose K/V are in the cache
  // Its blocks in each cache group (CacheLayout): group 0's here, the others' in group_tables.
  std::vector<int32_t> block_table;
  std::vector<std::vector<int32_t>> group_tables;
  std::vector<uint64_t> block_hashes;  // hashes of the leading full blocks (prefix cache)
  // The prefix cache on disk (Engine, --kv-cache-dir): how many leading full blocks were
  // offered to it, the hash of the last of them (a different hash there: the sequence's blocks
  // changed since, look again from the start) and its disk key (the next block's chains from
  // it); and the load its first step waits for (0: none).
  int64_t disk_offered = 0;
  uint64_t disk_offered_hash = 0;
  Sha256Digest disk_offered_key{};
  uint64_t disk_job = 0;
  // An encoder-decoder's: the encoder's input (the request's prompt; tokens are the decoder's),
  // and whether its cross-attention K/V are in its blocks (computed by its first step; freed
  // with its blocks).
  std::vector<int32_t> encoder_tokens;
  bool cross_ready = false;
  std::optional<SequenceSampler> sampler;
  SequenceStatus status = SequenceStatus::kWaiting;
  int64_t preemptions = 0;
  bool padding = false;   // finished, holding its row in a padded static batch (Scheduler::pad)
  bool deferred = false;  // its draw waits for its grammar mask (Engine::resume_deferred)
  uint64_t fair_tag = 0;  // its turn among the waiting of its priority (Scheduler::add)
  // Speculative decoding: the last num_drafts tokens are proposals, computed with the others
  // and verified once their rows are ready (Engine::sample); never cached or emitted before.
  int64_t num_drafts = 0;
  std::vector<float> draft_q;  // a draft model's distributions of them (empty: point masses)
  // Adapting (EngineConfig::spec_min_acceptance): the running acceptance rate of its proposals
  // and the steps it still waits before proposing again.
  double spec_acceptance = 1.0;
  int64_t spec_pause = 0;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  std::vector<int32_t>& table(size_t group) {
    return group == 0 ? block_table : group_tables[group - 1];
  }
  const std::vector<int32_t>& table(size_t group) const {
    return group == 0 ? block_table : group_tables[group - 1];
  }
  // Whether it holds no block in any group.
  bool holds_no_blocks() const {
    if (!block_table.empty()) return false;
    for (const auto& t : group_tables)
      if (!t.empty()) return false;
    return true;
  }
};

}  // namespace tf
