// The scheduler and the KV cache manager alone, driven by a fake model (issue 19): each step
// "computes" the scheduled chunks (writes each token id into its slot of a fake KV memory, after
// making the block copies the schedule asks for), hands the step to Scheduler::update, and
// appends one new token to every sequence update returns, as the engine's step does, without any
// forward pass. After every step each running sequence must read its own tokens back from its
// block table, the pool's invariants must hold and every block's refcount must equal the tables
// that hold it. Chunked prefill, preemption by recompute, prefix hits, forks with copy-on-write,
// and removal at every phase leaving no block behind.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <memory>
#include <random>
#include <vector>

#include "engine/engine_request.h"

namespace tf {
namespace {

constexpr int kBlock = 4;

struct Harness {
  // groups: the cache groups (issue 51); empty: one full-attention group.
  explicit Harness(int64_t blocks, bool prefix = false, int64_t budget = 64,
                   std::vector<CacheGroupSpec> groups = {})
      : pool(blocks, kBlock, std::max<int>(1, static_cast<int>(groups.size()))),
        kv(pool, prefix,
           groups.empty() ? std::vector<CacheGroupSpec>{{CacheKind::kFullAttention, 0}} : groups),
        sched(config(budget), kv),
        memory(blocks) {
    for (auto& b : memory) b.fill(-1);
  }
  static SchedulerConfig config(int64_t budget) {
    SchedulerConfig c;
    c.max_num_batched_tokens = budget;
    c.max_num_seqs = 64;
    return c;
  }
  Sequence* own(std::unique_ptr<Sequence> seq) {
    seqs.push_back(std::move(seq));
    live.push_back(seqs.back().get());
    return seqs.back().get();
  }
  // A request of one sequence with a prompt of n tokens (token i is base + i).
  Sequence* add(int n, int32_t base = 10) {
    reqs.push_back(std::make_unique<EngineRequest>());
    auto seq = std::make_unique<Sequence>();
    seq->request = reqs.back().get();
    for (int i = 0; i < n; ++i) seq->tokens.push_back(base + i);
    seq->prompt_len = n;
    sched.add(seq.get());
    return own(std::move(seq));
  }
  // A fork of parent, running: parent's computed tokens and a new token of its own (as a sample
  // of n > 1 or a beam continues the same logits another way).
  Sequence* fork(Sequence* parent) {
    auto seq = std::make_unique<Sequence>();
    seq->request = parent->request;
    seq->tokens.assign(parent->tokens.begin(), parent->tokens.begin() + parent->num_computed);
    seq->tokens.push_back(next_token++);
    seq->prompt_len = std::min(parent->prompt_len, parent->num_computed);
    sched.fork(*parent, *seq);
    return own(std::move(seq));
  }
  void remove(Sequence* s) {
    sched.remove(s);
    live.erase(std::remove(live.begin(), live.end(), s), live.end());
  }
  // The fake forward pass: the copies first, then every chunk's tokens into their slots. A
  // sequence removed since schedule() (only tests do that) is left out.
  void forward(const SchedulerOutput& out) {
    for (const BlockCopy& c : out.block_copies) {
      EXPECT_NE(c.src, c.dst);
      memory[c.dst] = memory[c.src];
    }
    for (const auto& c : out.chunks) {
      if (c.seq->status == SequenceStatus::kFinished) continue;
      EXPECT_EQ(c.start, c.seq->num_computed);
      for (int g = 0; g < kv.num_groups(); ++g) {
        const auto& table = c.seq->table(static_cast<size_t>(g));
        ASSERT_GE(static_cast<int64_t>(table.size()) * kBlock, c.start + c.count);
        for (int64_t p = c.start; p < c.start + c.count; ++p) {
          ASSERT_NE(table[p / kBlock], KvCacheManager::kReleased)
              << "a write into a released block";
          memory[table[p / kBlock]][p % kBlock] = c.seq->tokens[p];
        }
      }
    }
  }
  // One step: schedule, forward, update; a sequence whose chunk reached its end gets a token.
  SchedulerOutput step() {
    SchedulerOutput out = sched.schedule();
    forward(out);
    last_ready = sched.update(out);
    for (const ReadySequence& r : last_ready) {
      if (r.seq->num_tokens() < max_tokens) r.seq->tokens.push_back(next_token++);
    }
    check();
    return out;
  }
  // Every live sequence reads its computed tokens back; blocks are held by exactly the tables
  // that list them.
  void check() {
    pool.check_invariants();
    std::vector<int32_t> refs(pool.num_blocks(), 0);
    for (const Sequence* s : live) {
      for (size_t g = 0; g < static_cast<size_t>(kv.num_groups()); ++g) {
        if (g > s->group_tables.size()) continue;  // never scheduled
        const auto& table = s->table(g);
        for (int32_t b : table)
          if (b != KvCacheManager::kReleased) ++refs[b];
        const int64_t window = kv.groups()[g].window;
        for (int64_t p = 0; p < s->num_computed; ++p) {
          const int32_t b = table[p / kBlock];
          if (b == KvCacheManager::kReleased) {
            // Only behind the window of the next query (and its chunk of 16 keys).
            ASSERT_GT(window, 0) << "a released block in a full-attention group";
            ASSERT_LT(p, s->num_computed - window) << "a released block inside the window";
            continue;
          }
          ASSERT_EQ(pool.group(b), static_cast<int>(g));
          ASSERT_EQ(memory[b][p % kBlock], s->tokens[p])
              << "group " << g << " position " << p << " of a sequence of " << s->num_tokens();
        }
      }
    }
    for (int32_t b = 0; b < pool.num_blocks(); ++b)
      ASSERT_EQ(pool.refcount(b), refs[b]) << "block " << b;
  }
  void remove_all_and_check_empty() {
    while (!live.empty()) remove(live.back());
    pool.check_invariants();
    EXPECT_EQ(pool.num_used(), 0);
    EXPECT_EQ(pool.num_available(), pool.num_blocks());
    EXPECT_TRUE(sched.idle());
  }
  KvBlockPool pool;
  KvCacheManager kv;
  Scheduler sched;
  std::vector<std::array<int32_t, kBlock>> memory;  // the token whose K/V each slot holds
  int32_t next_token = 1000;
  int64_t max_tokens = 1 << 30;  // a sequence this long gets no more tokens (it idles)
  std::vector<ReadySequence> last_ready;
  std::vector<std::unique_ptr<EngineRequest>> reqs;
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<Sequence*> live;  // not removed
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
  h.remove(a);
  const SchedulerOutput out = h.step();
  EXPECT_EQ(scheduled(out, b), 9);
  h.remove(b);
  EXPECT_EQ(h.pool.num_used(), 0);
}

TEST(SchedulerAlone, APrefixHitStartsAfterTheCachedBlocks) {
  Harness h(32, /*prefix=*/true);
  Sequence* a = h.add(13);
  h.step();
  h.remove(a);  // its three full blocks stay cached, unreferenced
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
  for (Sequence* s : {b, c, d}) h.remove(s);
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
    h.remove(victim);
    h.remove(a);
    EXPECT_EQ(h.pool.num_used(), 0);
    EXPECT_TRUE(h.sched.idle());
  }
}

TEST(SchedulerAlone, UpdateReturnsExactlyTheSequencesThatFinishedTheirChunk) {
  Harness h(64, false, /*budget=*/6);
  Sequence* a = h.add(3);
  Sequence* b = h.add(13);
  auto ready = [&] {
    std::vector<std::pair<const Sequence*, int64_t>> got;
    for (const ReadySequence& r : h.last_ready) got.emplace_back(r.seq, r.row);
    return got;
  };
  using Got = std::vector<std::pair<const Sequence*, int64_t>>;
  h.step();  // a's prompt (3), b's first chunk (3)
  EXPECT_EQ(ready(), (Got{{a, 0}}));
  h.step();  // a decodes; b's chunk of 5 leaves 5 to compute
  EXPECT_EQ(ready(), (Got{{a, 0}}));
  EXPECT_EQ(b->num_computed, 8);
  h.step();  // b's last 5: both reach their ends
  EXPECT_EQ(ready(), (Got{{a, 0}, {b, 1}}));
  EXPECT_EQ(b->num_tokens(), 14);
  // A sequence removed between schedule and update is not returned (nor advanced).
  const SchedulerOutput out = h.sched.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  h.remove(a);
  h.forward(out);
  EXPECT_EQ(h.sched.update(out).size(), 1u);
  EXPECT_EQ(b->num_computed, 14);
  EXPECT_EQ(a->num_computed, 0);
  h.check();
  h.remove_all_and_check_empty();
}

TEST(SchedulerAlone, AForkSharesBlocksAndTheFirstWriterCopiesTheSharedPartialOne) {
  Harness h(16);
  Sequence* a = h.add(10);
  h.step();  // 10 computed in blocks of 4, 4, 2; a has its 11th token
  const std::vector<int32_t> parent = a->block_table;
  Sequence* b = h.fork(a);
  EXPECT_EQ(b->block_table, parent);
  EXPECT_EQ(b->num_computed, 10);
  EXPECT_EQ(b->status, SequenceStatus::kRunning);
  for (int32_t blk : parent) EXPECT_EQ(h.pool.refcount(blk), 2);
  EXPECT_EQ(h.pool.num_used(), 3);
  // Both write position 10 (block 2): a, scheduled first, gets a copy; b writes in place.
  const SchedulerOutput out = h.step();
  EXPECT_EQ(scheduled(out, a), 1);
  EXPECT_EQ(scheduled(out, b), 1);
  ASSERT_EQ(out.block_copies.size(), 1u);
  EXPECT_EQ(out.block_copies[0].src, parent[2]);
  EXPECT_EQ(out.block_copies[0].dst, a->block_table[2]);
  EXPECT_EQ(b->block_table, parent);
  EXPECT_EQ(h.pool.refcount(parent[0]), 2);
  EXPECT_EQ(h.pool.refcount(parent[2]), 1);
  EXPECT_EQ(h.pool.num_used(), 4);
  EXPECT_TRUE(h.step().block_copies.empty()) << "each writes its own block from now on";
  EXPECT_EQ(h.sched.block_copies(), 1);
  h.remove_all_and_check_empty();
}

TEST(SchedulerAlone, WithoutRoomForACopyTheNewestSharerIsPreemptedAndNoCopyIsMade) {
  Harness h(3);
  Sequence* a = h.add(10);  // all three blocks
  h.step();
  Sequence* b = h.fork(a);
  const std::vector<int32_t> table = a->block_table;
  // a needs a copy of block 2 and no block is free: b (the newest) is preempted, which leaves
  // block 2 to a alone, written in place.
  const SchedulerOutput out = h.step();
  EXPECT_TRUE(out.block_copies.empty());
  EXPECT_EQ(out.preempted, std::vector<Sequence*>{b});
  EXPECT_EQ(scheduled(out, a), 1);
  EXPECT_EQ(a->block_table, table);
  EXPECT_EQ(b->status, SequenceStatus::kWaiting);
  EXPECT_TRUE(b->block_table.empty());
  for (int32_t blk : table) EXPECT_EQ(h.pool.refcount(blk), 1);
  // When a ends, b recomputes its 11 tokens (the parent's 10 and its own).
  h.remove(a);
  EXPECT_EQ(scheduled(h.step(), b), 11);
  h.remove_all_and_check_empty();
}

TEST(SchedulerAlone, AForkedSequencePreemptedGivesBackOnlyItsReferences) {
  Harness h(5);
  Sequence* a = h.add(10);
  h.step();
  Sequence* b = h.fork(a);
  Sequence* c = h.fork(a);
  EXPECT_EQ(h.step().block_copies.size(), 2u);  // a and b copy block 2, c keeps it
  EXPECT_EQ(h.pool.num_used(), 5);
  h.step();  // position 11: the last of block 2, each its own
  // Position 12 needs a fourth block each: c, then b (the newest) are preempted for a's.
  const SchedulerOutput out = h.step();
  EXPECT_EQ(out.preempted, (std::vector<Sequence*>{c, b}));
  EXPECT_EQ(scheduled(out, a), 1);
  EXPECT_EQ(h.pool.refcount(a->block_table[0]), 1) << "the shared blocks are a's alone again";
  EXPECT_EQ(h.pool.num_used(), 4);
  h.remove(a);
  // b and c recompute from the start (13 tokens each, 4 blocks): one at a time in 5 blocks.
  EXPECT_EQ(scheduled(h.step(), b), 13);
  EXPECT_EQ(c->status, SequenceStatus::kWaiting);
  h.remove(b);
  EXPECT_EQ(scheduled(h.step(), c), 13);
  h.remove_all_and_check_empty();
}

TEST(SchedulerAlone, APrefixHitAfterAForkFindsTheSharedBlocks) {
  Harness h(32, /*prefix=*/true);
  Sequence* a = h.add(10);
  h.step();  // blocks 0 and 1 are full: cached
  Sequence* b = h.fork(a);
  EXPECT_EQ(b->block_hashes, a->block_hashes);
  Sequence* c = h.add(10);  // a's prompt again
  const SchedulerOutput out = h.step();
  EXPECT_EQ(out.chunks.back().seq, c);
  EXPECT_EQ(out.chunks.back().start, 8);
  EXPECT_EQ(c->block_table[0], a->block_table[0]);
  EXPECT_EQ(c->block_table[1], a->block_table[1]);
  EXPECT_EQ(h.pool.refcount(a->block_table[0]), 3);
  EXPECT_EQ(out.block_copies.size(), 1u) << "a's write into block 2, shared with b";
  h.remove_all_and_check_empty();
  EXPECT_EQ(h.pool.num_cached(), 2);
}

// Cancel (Scheduler::remove) at every phase of a forked sequence's life; what is left runs on
// with every invariant, and no block stays behind.
TEST(SchedulerAlone, RemovalAtEveryPhaseOfAForkLeavesNoBlockBehind) {
  enum Phase { kWaiting, kMidPrefill, kDecoding, kJustForked, kPendingCopy, kParentOfAFork };
  for (int phase = kWaiting; phase <= kParentOfAFork; ++phase) {
    SCOPED_TRACE(phase);
    Harness h(12, false, /*budget=*/6);
    h.add(8);
    Sequence* target = h.add(10, 50);
    if (phase == kWaiting) {
      EXPECT_EQ(target->status, SequenceStatus::kWaiting);
      h.remove(target);
    } else {
      h.step(), h.step();  // a's prompt in two chunks; target's first chunk of 4
      if (phase == kMidPrefill) {
        EXPECT_EQ(target->num_computed, 4);
        h.remove(target);
      } else {
        while (target->num_computed < target->prompt_len) h.step();
        if (phase == kDecoding) {
          h.remove(target);
        } else {
          Sequence* child = h.fork(target);
          if (phase == kJustForked) {
            h.remove(child);
          } else if (phase == kParentOfAFork) {
            h.remove(target);  // as a beam that no next beam continues: the child keeps it all
            h.step();
            EXPECT_EQ(h.pool.refcount(child->block_table[0]), 1);
          } else {
            // Cancelled after schedule() recorded its copy, before the forward pass: the
            // copy lands in a free block (harmless); the child writes in place.
            const SchedulerOutput out = h.sched.schedule();
            ASSERT_EQ(out.block_copies.size(), 1u);
            EXPECT_EQ(out.block_copies[0].dst, target->block_table[2]);
            h.remove(target);
            h.forward(out);
            h.sched.update(out);
            h.check();
          }
        }
      }
    }
    for (int i = 0; i < 4; ++i) h.step();
    h.remove_all_and_check_empty();
  }
}

// Random adds, steps, forks (some replacing their parent, as beams do), sequences going back to
// recompute tokens (as a beam waiting for a preempted one does with its last) and removals, in
// small pools so that preemption is frequent; the harness checks every step.
// Random adds, forks, rollbacks (without sliding groups: a rollback past a window's released
// blocks is what the engine never does), removals and steps; every invariant after each step.
void random_events(std::vector<CacheGroupSpec> groups, int64_t* copies_out,
                   int64_t* preemptions_out, int64_t* releases_out) {
  std::mt19937 rng(7);
  int64_t copies = 0, preemptions = 0, releases = 0;
  const bool sliding = std::any_of(groups.begin(), groups.end(), [](const CacheGroupSpec& g) {
    return g.kind == CacheKind::kSlidingWindow;
  });
  for (int trial = 0; trial < 40; ++trial) {
    SCOPED_TRACE(trial);
    const int64_t blocks = (16 + rng() % 16) * std::max<int64_t>(1, groups.size());
    Harness h(blocks, /*prefix=*/rng() % 2, /*budget=*/1 + rng() % 24, groups);
    h.max_tokens = 40;
    for (int event = 0; event < 200; ++event) {
      const int kind = rng() % 12;
      std::vector<Sequence*> running;
      for (Sequence* s : h.live) {
        if (s->status == SequenceStatus::kRunning && s->num_computed > 0) running.push_back(s);
      }
      Sequence* pick = running.empty() ? nullptr : running[rng() % running.size()];
      if (kind < 2 && h.live.size() < 12) {
        h.add(1 + rng() % 20, static_cast<int32_t>(rng() % 3) * 100);  // shared prefixes
      } else if (kind < 3 && pick && h.live.size() < 12) {
        h.fork(pick);
        if (rng() % 2) h.remove(pick);
      } else if (kind < 4 && pick && !sliding) {
        pick->num_computed -=
            1 + static_cast<int64_t>(rng() % std::min<int64_t>(pick->num_computed, 6));
      } else if (kind < 5 && !h.live.empty()) {
        h.remove(h.live[rng() % h.live.size()]);
      } else {
        const SchedulerOutput out = h.step();
        if (testing::Test::HasFatalFailure()) return;
        for (const BlockCopy& c : out.block_copies) {
          const bool owned = std::any_of(out.chunks.begin(), out.chunks.end(), [&](const auto& ch) {
            const auto& t = ch.seq->table(static_cast<size_t>(c.group));
            return std::find(t.begin(), t.end(), c.dst) != t.end();
          });
          EXPECT_TRUE(owned) << "a copy into a block no scheduled sequence holds";
        }
        if (testing::Test::HasFailure()) return;
      }
    }
    copies += h.sched.block_copies();
    preemptions += h.sched.preemptions();
    releases += h.kv.window_releases();
    h.remove_all_and_check_empty();
  }
  *copies_out = copies;
  *preemptions_out = preemptions;
  *releases_out = releases;
}

TEST(SchedulerAlone, RandomForksPreemptionsAndRemovalsKeepEveryInvariant) {
  int64_t copies = 0, preemptions = 0, releases = 0;
  random_events({}, &copies, &preemptions, &releases);
  EXPECT_GT(copies, 100) << "the events must exercise copy-on-write";
  EXPECT_GT(preemptions, 20) << "and preemption";
}

TEST(SchedulerGroups, RandomEventsOverAFullAndASlidingGroupKeepEveryInvariant) {
  // Issue 51: Gemma 2's layout over one pool; every step takes both groups' blocks or none.
  int64_t copies = 0, preemptions = 0, releases = 0;
  random_events({{CacheKind::kFullAttention, 0}, {CacheKind::kSlidingWindow, 6}}, &copies,
                &preemptions, &releases);
  EXPECT_GT(copies, 100) << "the events must exercise copy-on-write";
  EXPECT_GT(preemptions, 20) << "and preemption";
  EXPECT_GT(releases, 100) << "and releases behind the window";
}

}  // namespace
}  // namespace tf
