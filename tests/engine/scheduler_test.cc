// The scheduler and the KV cache manager alone, driven by a fake model (issue 19): each step
// "computes" the scheduled chunks and appends one token to every sequence whose chunk reached
// its end, as the engine's step does, without any forward pass. Chunked prefill, preemption by
// recompute, prefix hits, and removal at every phase leaving no block behind.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/engine_request.h"

namespace tf {
namespace {

constexpr int kBlock = 4;

struct Harness {
  explicit Harness(int64_t blocks, bool prefix = false, int64_t budget = 64)
      : pool(blocks, kBlock), kv(pool, prefix), sched(config(budget), kv) {}
  static SchedulerConfig config(int64_t budget) {
    SchedulerConfig c;
    c.max_num_batched_tokens = budget;
    c.max_num_seqs = 64;
    return c;
  }
  // A request of one sequence with a prompt of n tokens (token i is base + i).
  Sequence* add(int n, int32_t base = 10) {
    reqs.push_back(std::make_unique<EngineRequest>());
    auto seq = std::make_unique<Sequence>();
    seq->request = reqs.back().get();
    for (int i = 0; i < n; ++i) seq->tokens.push_back(base + i);
    seq->prompt_len = n;
    sched.add(seq.get());
    seqs.push_back(std::move(seq));
    return seqs.back().get();
  }
  // One step of the fake model: what was scheduled is computed; a sequence whose chunk reached
  // its last token gets a new token (a decode) and its full blocks cached.
  SchedulerOutput step() {
    SchedulerOutput out = sched.schedule();
    for (const auto& c : out.chunks) {
      EXPECT_EQ(c.start, c.seq->num_computed);
      c.seq->num_computed += c.count;
      kv.cache_full_blocks(*c.seq, 0);
      if (c.seq->num_computed == c.seq->num_tokens()) c.seq->tokens.push_back(1);
    }
    return out;
  }
  KvBlockPool pool;
  KvCacheManager kv;
  Scheduler sched;
  std::vector<std::unique_ptr<EngineRequest>> reqs;
  std::vector<std::unique_ptr<Sequence>> seqs;
};

int64_t scheduled(const SchedulerOutput& out, const Sequence* s) {
  for (const auto& c : out.chunks)
    if (c.seq == s) return c.count;
  return 0;
}

TEST(SchedulerAlone, ChunkedPrefillSplitsALongPromptAndDecodesGoFirst) {
  Harness h(64, false, /*budget=*/6);
  Sequence* a = h.add(3);
  EXPECT_EQ(scheduled(h.step(), a), 3);  // a's prompt, whole
  Sequence* b = h.add(13);
  // a decodes (1 token) first every step; b's prompt takes what the budget leaves: 5, 5, 3.
  for (int64_t want : {5, 5, 3}) {
    const SchedulerOutput out = h.step();
    EXPECT_EQ(scheduled(out, a), 1);
    EXPECT_EQ(scheduled(out, b), want);
  }
  EXPECT_EQ(b->num_tokens(), 14);  // its last chunk produced a token
  EXPECT_EQ(scheduled(h.step(), b), 1);
}

TEST(SchedulerAlone, PreemptionFreesTheNewestWhichIsRecomputedLater) {
  // 5 blocks of 4: two 8-token prompts take 4; the first decode that needs a fifth block for
  // each leaves one of them without room.
  Harness h(5);
  Sequence* a = h.add(8);
  Sequence* b = h.add(8, 100);
  h.step();  // both prompts: 4 blocks
  EXPECT_EQ(h.pool.num_used(), 4);
  h.step();  // a's token 9 takes block 5; b's needs a sixth: b (the newest) is preempted
  EXPECT_EQ(a->status, SequenceStatus::kRunning);
  EXPECT_EQ(b->status, SequenceStatus::kWaiting);
  EXPECT_TRUE(b->block_table.empty());
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_EQ(b->preemptions, 1);
  EXPECT_EQ(h.sched.preemptions(), 1);
  // When a ends, b is recomputed from the start: its 9 tokens (prompt + the one it had).
  h.sched.remove(a);
  const SchedulerOutput out = h.step();
  EXPECT_EQ(scheduled(out, b), 9);
  h.sched.remove(b);
  EXPECT_EQ(h.pool.num_used(), 0);
}

TEST(SchedulerAlone, APrefixHitStartsAfterTheCachedBlocks) {
  Harness h(32, /*prefix=*/true);
  Sequence* a = h.add(13);
  h.step();
  h.sched.remove(a);  // its three full blocks stay cached, unreferenced
  EXPECT_EQ(h.pool.num_used(), 0);
  EXPECT_EQ(h.pool.num_cached(), 3);
  Sequence* b = h.add(13);  // the same prompt: 12 tokens found, 1 left to compute
  const SchedulerOutput out = h.step();
  EXPECT_EQ(scheduled(out, b), 1);
  EXPECT_EQ(out.chunks.at(0).start, 12);
  Sequence* c = h.add(12);  // a whole-block prompt: the last block is computed, not matched
  EXPECT_EQ(h.step().chunks.back().start, 8);
  Sequence* d = h.add(13, 99);  // another prompt: nothing to find
  EXPECT_EQ(h.step().chunks.back().start, 0);
  for (Sequence* s : {b, c, d}) h.sched.remove(s);
  EXPECT_EQ(h.pool.num_used(), 0);
}

TEST(SchedulerAlone, RemovalAtEveryPhaseLeavesNoBlockBehind) {
  for (int phase = 0; phase < 4; ++phase) {
    SCOPED_TRACE(phase);
    Harness h(6, false, /*budget=*/4);
    Sequence* a = h.add(8);
    Sequence* victim = h.add(8, 50);
    if (phase >= 1) h.step();            // a's first chunk; victim waits
    if (phase >= 2) h.step(), h.step();  // a decoding, victim's prefill under way
    if (phase >= 3) {
      for (int i = 0; i < 8 && victim->preemptions == 0; ++i) h.step();  // until it is preempted
      EXPECT_EQ(victim->preemptions, 1);
    }
    h.sched.remove(victim);
    h.sched.remove(a);
    EXPECT_EQ(h.pool.num_used(), 0);
    EXPECT_TRUE(h.sched.idle());
  }
}

}  // namespace
}  // namespace tf
