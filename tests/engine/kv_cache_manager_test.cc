// The KV cache manager alone, over a small pool: a fork shares every block of the parent's
// computed tokens, and a shared block is copied only when a sequence is about to write into it
// (copy-on-write), by whichever sharer writes first; the last one writes in place.
#include "engine/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace tf {
namespace {

constexpr int kBlock = 4;

// A sequence of n tokens (base, base + 1, ...) with none computed.
Sequence make_sequence(int n, int32_t base = 10) {
  Sequence s;
  for (int i = 0; i < n; ++i) s.tokens.push_back(base + i);
  s.prompt_len = n;
  return s;
}

// What the engine does for a sequence: slots for its remaining tokens, then "computes" them.
std::vector<BlockCopy> compute(KvCacheManager& kv, Sequence& s) {
  std::vector<BlockCopy> copies;
  EXPECT_TRUE(kv.allocate_slots(s, s.num_tokens(), copies));
  s.num_computed = s.num_tokens();
  kv.cache_full_blocks(s, 0);
  return copies;
}

// A child that continues parent's computed tokens with one token of its own.
Sequence child_of(const Sequence& parent, int32_t token) {
  Sequence c;
  c.tokens.assign(parent.tokens.begin(), parent.tokens.begin() + parent.num_computed);
  c.tokens.push_back(token);
  c.prompt_len = parent.prompt_len;
  return c;
}

TEST(KvCacheManagerAlone, AForkSharesEveryBlockIncludingThePartialLastOne) {
  KvBlockPool pool(16, kBlock);
  KvCacheManager kv(pool, /*prefix_caching=*/true);
  Sequence a = make_sequence(10);  // blocks of 4, 4 and 2 tokens
  EXPECT_TRUE(compute(kv, a).empty());
  ASSERT_EQ(a.block_table.size(), 3u);
  ASSERT_EQ(a.block_hashes.size(), 2u);
  Sequence b = child_of(a, 500);
  kv.fork(a, b);
  EXPECT_EQ(b.block_table, a.block_table);
  EXPECT_EQ(b.block_hashes, a.block_hashes);
  EXPECT_EQ(b.num_computed, 10);
  for (int32_t blk : a.block_table) EXPECT_EQ(pool.refcount(blk), 2);
  EXPECT_EQ(pool.num_used(), 3) << "a fork allocates nothing";
  pool.check_invariants();
  kv.free(b);
  for (int32_t blk : a.block_table) EXPECT_EQ(pool.refcount(blk), 1);
  kv.free(a);
  EXPECT_EQ(pool.num_used(), 0);
}

TEST(KvCacheManagerAlone, TheFirstWriterIntoASharedBlockCopiesItTheLastWritesInPlace) {
  KvBlockPool pool(16, kBlock);
  KvCacheManager kv(pool, false);
  Sequence a = make_sequence(10);
  compute(kv, a);
  const std::vector<int32_t> parent_table = a.block_table;
  a.tokens.push_back(600);  // a's next token, at position 10 (block 2, shared below)
  Sequence b = child_of(a, 500), c = child_of(a, 501);
  kv.fork(a, b);
  kv.fork(a, c);
  EXPECT_EQ(pool.refcount(parent_table[2]), 3);

  // b writes position 10 first: block 2 becomes its own copy; blocks 0 and 1 stay shared.
  std::vector<BlockCopy> copies = compute(kv, b);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, parent_table[2]);
  EXPECT_EQ(copies[0].dst, b.block_table[2]);
  EXPECT_NE(b.block_table[2], parent_table[2]);
  EXPECT_EQ(b.block_table[0], parent_table[0]);
  EXPECT_EQ(pool.refcount(parent_table[2]), 2);
  EXPECT_EQ(pool.refcount(b.block_table[2]), 1);
  EXPECT_EQ(pool.refcount(parent_table[0]), 3);
  // c copies too; a, the last sharer, writes into the block in place.
  copies = compute(kv, c);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, parent_table[2]);
  EXPECT_TRUE(compute(kv, a).empty());
  EXPECT_EQ(a.block_table, parent_table);
  EXPECT_EQ(pool.refcount(parent_table[2]), 1);
  EXPECT_EQ(pool.num_used(), 5);  // 3 + one copy each for b and c
  pool.check_invariants();
  for (Sequence* s : {&a, &b, &c}) kv.free(*s);
  EXPECT_EQ(pool.num_used(), 0);
}

TEST(KvCacheManagerAlone, AForkAtABlockBoundaryNeverCopies) {
  KvBlockPool pool(16, kBlock);
  KvCacheManager kv(pool, false);
  Sequence a = make_sequence(8);  // two full blocks
  compute(kv, a);
  a.tokens.push_back(600);
  Sequence b = child_of(a, 500);
  kv.fork(a, b);
  EXPECT_TRUE(compute(kv, b).empty());
  EXPECT_TRUE(compute(kv, a).empty());
  EXPECT_NE(a.block_table[2], b.block_table[2]);  // each its own fresh third block
  EXPECT_EQ(pool.num_used(), 4);
  kv.free(a);
  kv.free(b);
  EXPECT_EQ(pool.num_used(), 0);
}

TEST(KvCacheManagerAlone, RecomputingAnEarlierTokenCopiesEveryWrittenSharedBlock) {
  // A beam that waits for a preempted sibling computes its last token again: its write can fall
  // into a full block it shares. Going back 5 tokens from 10 writes blocks 1 and 2 (both shared).
  KvBlockPool pool(16, kBlock);
  KvCacheManager kv(pool, false);
  Sequence a = make_sequence(10);
  compute(kv, a);
  Sequence b = child_of(a, 500);
  kv.fork(a, b);
  const std::vector<int32_t> shared = a.block_table;
  a.num_computed = 5;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocate_slots(a, a.num_tokens(), copies));
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].src, shared[1]);
  EXPECT_EQ(copies[1].src, shared[2]);
  EXPECT_EQ(a.block_table[0], shared[0]) << "block 0 is only read";
  EXPECT_EQ(b.block_table, shared);
  for (int i : {1, 2}) EXPECT_EQ(pool.refcount(shared[i]), 1);
  EXPECT_EQ(pool.refcount(shared[0]), 2);
  kv.free(a);
  kv.free(b);
  pool.check_invariants();
  EXPECT_EQ(pool.num_used(), 0);
}

TEST(KvCacheManagerAlone, ACopyWithoutRoomFailsAndChangesNothing) {
  KvBlockPool pool(3, kBlock);
  KvCacheManager kv(pool, false);
  Sequence a = make_sequence(10);  // all three blocks
  compute(kv, a);
  a.tokens.push_back(600);
  Sequence b = child_of(a, 500);
  kv.fork(a, b);
  const std::vector<int32_t> table = a.block_table;
  std::vector<BlockCopy> copies;
  EXPECT_FALSE(kv.allocate_slots(a, a.num_tokens(), copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(a.block_table, table);
  EXPECT_EQ(pool.refcount(table[2]), 2);
  EXPECT_EQ(pool.num_used(), 3);
  // Once the other sharer is gone, the block is a's alone: written in place, no block needed.
  kv.free(b);
  EXPECT_TRUE(kv.allocate_slots(a, a.num_tokens(), copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(a.block_table, table);
  kv.free(a);
  pool.check_invariants();
}

// A block of the prefix cache keeps the tokens its hash names. A sequence that went back to
// recompute its own hashed tokens rewrites them in place (as a beam waiting for another does);
// one that holds a cached block alone but may write other tokens into it (a fork taken while its
// parent was going back) copies it, and the cached block stays findable.
TEST(KvCacheManagerAlone, ACachedBlockIsRewrittenInPlaceOnlyWithTheTokensItsHashNames) {
  KvBlockPool pool(16, kBlock);
  KvCacheManager kv(pool, /*prefix_caching=*/true);
  Sequence a = make_sequence(8);
  compute(kv, a);
  ASSERT_TRUE(pool.cached(a.block_table[1]));
  a.num_computed = 7;  // going back one token, into its own full, cached block
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocate_slots(a, a.num_tokens(), copies));
  EXPECT_TRUE(copies.empty());

  a.num_computed = 5;
  Sequence b = child_of(a, 500);  // position 5 differs from a's, in cached block 1
  kv.fork(a, b);
  EXPECT_EQ(b.block_hashes.size(), 1u);
  const int32_t cached_block = a.block_table[1];
  kv.free(a);
  ASSERT_EQ(pool.refcount(cached_block), 1);
  copies = compute(kv, b);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, cached_block);
  EXPECT_NE(b.block_table[1], cached_block);
  Sequence c = make_sequence(9);  // a's 8 tokens and one more: both blocks found
  EXPECT_EQ(kv.match_prefix(c, 0), 8);
  EXPECT_EQ(c.block_table[1], cached_block);
  kv.free(b);
  kv.free(c);
  pool.check_invariants();
  EXPECT_EQ(pool.num_used(), 0);
}

// Speculative decoding's rollback (Engine::sample): proposals get slots and K/V like any token;
// after verification the sequence keeps its accepted ones and the drawn token, truncate()
// releases the blocks past them, and the prefix cache registers blocks only from the verified
// tokens, so a later request finds the accepted prefix and never a rejected proposal.
TEST(KvCacheManagerAlone, RollingBackRejectedProposalsFreesTheirBlocksAndCachesNone) {
  KvBlockPool pool(16, kBlock);
  KvCacheManager kv(pool, /*prefix_caching=*/true);
  Sequence a = make_sequence(6);  // a prompt of 6, then its last token sampled: 7 tokens
  compute(kv, a);
  a.tokens.push_back(100);
  // Proposes 101..105 and verifies them: every proposal rejected, 888 drawn at position 7.
  auto verify = [&](std::vector<int32_t> proposals, size_t accepted, int32_t drawn) {
    const int64_t len = a.num_tokens();
    a.tokens.insert(a.tokens.end(), proposals.begin(), proposals.end());
    std::vector<BlockCopy> copies;
    ASSERT_TRUE(kv.allocate_slots(a, a.num_tokens(), copies));
    EXPECT_TRUE(copies.empty());
    a.num_computed = a.num_tokens();  // the verification pass wrote every row
    pool.check_invariants();
    a.tokens.resize(static_cast<size_t>(len) + accepted);  // the accepted, then the drawn
    a.tokens.push_back(drawn);
    a.num_computed = len + static_cast<int64_t>(accepted);
    kv.truncate(a);
    kv.cache_full_blocks(a, 0);
    pool.check_invariants();
    EXPECT_EQ(static_cast<int64_t>(a.block_table.size()), kv.blocks_for(a.num_tokens()));
    EXPECT_EQ(pool.num_used(), kv.blocks_for(a.num_tokens())) << "the rest went back";
  };
  verify({101, 102, 103, 104, 105}, 0, 888);  // tokens: 6 + 100 888 (8)
  EXPECT_EQ(a.block_hashes.size(), 1u) << "block 1 is not full of verified K/V yet";
  verify({201, 202, 203}, 2, 999);  // 888 computed now; 201 and 202 held: 11 tokens
  EXPECT_EQ(a.block_hashes.size(), 2u);
  EXPECT_EQ(a.num_tokens(), 11);
  // The cache has the verified tokens, never the rejected proposal 101 at position 7.
  Sequence verified = make_sequence(6);
  verified.tokens.insert(verified.tokens.end(), {100, 888, 1});
  EXPECT_EQ(kv.match_prefix(verified, 0), 8);
  Sequence rejected = make_sequence(6);
  rejected.tokens.insert(rejected.tokens.end(), {100, 101, 1});
  EXPECT_EQ(kv.match_prefix(rejected, 0), 4);
  kv.free(a);
  kv.free(verified);
  kv.free(rejected);
  pool.check_invariants();
  EXPECT_EQ(pool.num_used(), 0);
}

}  // namespace
}  // namespace tf

namespace tf {
namespace {

// Every layer sliding (window 20, blocks of 4): as a sequence advances, the blocks wholly before
// the 16-key chunk that holds the first key its next query can attend go back to the pool; the
// table keeps its length (positions stay), forks and free skip the released entries.
TEST(KvCacheManagerWindow, BlocksBehindTheWindowGoBackToThePool) {
  KvBlockPool pool(32, kBlock);
  KvCacheManager kv(pool, /*prefix_caching=*/true, /*window=*/20);
  Sequence a = make_sequence(40);
  compute(kv, a);  // 10 blocks
  kv.release_outside_window(a);
  // A query at position >= 39 (a padding row recomputes 39) attends from 40 - 20 = 20 on; the
  // chunk of 16 keys holding it starts at 16, in block 4: blocks 0-3 go.
  ASSERT_EQ(a.block_table.size(), 10u);
  for (int b = 0; b < 4; ++b) EXPECT_EQ(a.block_table[b], KvCacheManager::kReleased) << b;
  for (int b = 4; b < 10; ++b) EXPECT_NE(a.block_table[b], KvCacheManager::kReleased) << b;
  EXPECT_EQ(kv.window_releases(), 4);
  EXPECT_EQ(pool.num_available(), 32 - 6);
  pool.check_invariants();
  // Growing by a chunk releases the next four; the released ones are not released twice.
  for (int i = 0; i < 16; ++i) a.tokens.push_back(100 + i);
  compute(kv, a);
  kv.release_outside_window(a);
  EXPECT_EQ(kv.window_releases(), 8);
  EXPECT_EQ(a.block_table[7], KvCacheManager::kReleased);
  EXPECT_NE(a.block_table[8], KvCacheManager::kReleased);
  // A fork shares only what is still held.
  Sequence c = child_of(a, 7);
  kv.fork(a, c);
  EXPECT_EQ(c.block_table, a.block_table);
  for (int b = 8; b < 14; ++b) EXPECT_EQ(pool.refcount(a.block_table[b]), 2);
  kv.free(c);
  kv.free(a);
  EXPECT_EQ(pool.num_available(), 32);
  pool.check_invariants();
  // Released blocks stay in the prefix cache until reused: the same prompt finds its first
  // blocks again.
  Sequence again = make_sequence(40);
  EXPECT_EQ(kv.match_prefix(again, 0), 36);
  kv.free(again);
}

TEST(KvCacheManagerWindow, NothingIsReleasedWithoutAWindowOrBeforeItFills) {
  KvBlockPool pool(32, kBlock);
  KvCacheManager plain(pool, true);
  Sequence a = make_sequence(60);
  compute(plain, a);
  plain.release_outside_window(a);
  EXPECT_EQ(plain.window_releases(), 0);
  plain.free(a);
  KvCacheManager wide(pool, true, /*window=*/100);
  Sequence b = make_sequence(60);
  compute(wide, b);
  wide.release_outside_window(b);
  EXPECT_EQ(wide.window_releases(), 0);
  wide.free(b);
  pool.check_invariants();
}

// Cache groups (issue 51): a full-attention group beside a sliding-window one over one pool, as
// Gemma 2's global and local layers.
std::vector<CacheGroupSpec> full_and_sliding(int64_t window) {
  return {{CacheKind::kFullAttention, 0}, {CacheKind::kSlidingWindow, window}};
}

int released(const std::vector<int32_t>& table) {
  return static_cast<int>(std::count(table.begin(), table.end(), KvCacheManager::kReleased));
}

TEST(KvCacheManagerGroups, EachGroupHasItsTableAndOnlyTheSlidingOneReleases) {
  KvBlockPool pool(64, kBlock, 2);
  KvCacheManager kv(pool, true, full_and_sliding(20));
  Sequence a = make_sequence(40);
  compute(kv, a);
  ASSERT_EQ(a.group_tables.size(), 1u);
  EXPECT_EQ(a.block_table.size(), 10u);
  EXPECT_EQ(a.table(1).size(), 10u);
  EXPECT_EQ(pool.num_used(0), 10);
  EXPECT_EQ(pool.num_used(1), 10);
  for (int b = 0; b < 10; ++b) {
    EXPECT_EQ(pool.group(a.block_table[b]), 0);
    EXPECT_EQ(pool.group(a.table(1)[b]), 1);
    EXPECT_NE(a.block_table[b], a.table(1)[b]) << "each group's K/V in blocks of its own";
  }
  kv.release_outside_window(a);
  // As with one group: positions from 16 on stay (the chunk of 16 keys holding 40 - 20 = 20).
  EXPECT_EQ(released(a.block_table), 0) << "the full-attention group keeps every block";
  EXPECT_EQ(released(a.table(1)), 4);
  EXPECT_EQ(pool.num_used(0), 10);
  EXPECT_EQ(pool.num_used(1), 6);
  EXPECT_EQ(kv.window_releases(), 4);
  pool.check_invariants();
  kv.free(a);
  EXPECT_EQ(pool.num_used(0) + pool.num_used(1), 0);
  pool.check_invariants();
}

TEST(KvCacheManagerGroups, AStepTakesTheBlocksOfEveryGroupOrNone) {
  KvBlockPool pool(15, kBlock, 2);  // 15 blocks: 8 + 8 do not fit
  KvCacheManager kv(pool, true, full_and_sliding(100));
  Sequence a = make_sequence(32);
  std::vector<BlockCopy> copies;
  EXPECT_FALSE(kv.allocate_slots(a, 32, copies));
  EXPECT_TRUE(a.holds_no_blocks());
  EXPECT_EQ(pool.num_available(), 15);
  EXPECT_TRUE(kv.allocate_slots(a, 28, copies));  // 7 + 7
  EXPECT_EQ(pool.num_available(), 1);
  pool.check_invariants();
  kv.free(a);
  // What a sequence can hold at most: every block in the full group, about a window in the
  // sliding one.
  EXPECT_EQ(kv.blocks_needed(400, 16), 100 + std::min<int64_t>(100, (100 + 16 + 16) / kBlock + 2));
  EXPECT_EQ(kv.blocks_to_grow(8, 4), 2);
}

TEST(KvCacheManagerGroups, APrefixHitNeedsEveryFullBlockButOnlyTheWindowsSlidingOnes) {
  KvBlockPool pool(64, kBlock, 2);
  KvCacheManager kv(pool, true, full_and_sliding(8));
  Sequence a = make_sequence(41);
  compute(kv, a);
  kv.release_outside_window(a);
  ASSERT_GT(released(a.table(1)), 0);
  kv.free(a);
  // Every block is still cached (released ones too): all ten full blocks are found, and the
  // sliding table retains only the blocks of the next query's window.
  Sequence b = make_sequence(41);
  EXPECT_EQ(kv.match_prefix(b, 0), 40);
  EXPECT_EQ(b.block_table.size(), 10u);
  EXPECT_EQ(released(b.block_table), 0);
  ASSERT_EQ(b.table(1).size(), 10u);
  // The query at 40 attends from 40 - 8 = 32: the chunk of 16 from 32, blocks 8 and 9.
  EXPECT_EQ(released(b.table(1)), 8);
  EXPECT_NE(b.table(1)[8], KvCacheManager::kReleased);
  EXPECT_EQ(pool.num_used(1), 2) << "only the window's blocks are retained";
  pool.check_invariants();
  // The rest of the prompt is computed and the next steps run as for any sequence.
  compute(kv, b);
  kv.release_outside_window(b);
  pool.check_invariants();
  kv.free(b);

  // With a sliding block inside the window evicted (another group-1 allocation took it), the
  // hit stops before the window that needs it, even though the full group has every block.
  Sequence c = make_sequence(41);
  EXPECT_EQ(kv.match_prefix(c, 0), 40);
  const int32_t evicted = c.table(1)[9];
  kv.free(c);
  std::vector<int32_t> taken;
  while (pool.cached(evicted)) ASSERT_TRUE(pool.allocate(1, taken, 1));
  for (int32_t t : taken) pool.release(t);
  Sequence d = make_sequence(41);
  const int64_t hit = kv.match_prefix(d, 0);
  EXPECT_LT(hit, 40);
  // Whatever it found, its window's blocks are all there and the full group's all are.
  const int64_t blocks = hit / kBlock;
  EXPECT_EQ(static_cast<int64_t>(d.table(1).size()), blocks);
  for (int64_t b = 0; b < blocks; ++b) EXPECT_NE(d.block_table[b], KvCacheManager::kReleased);
  for (int64_t b = (std::max<int64_t>(hit - 8, 0) / 16 * 16) / kBlock; b < blocks; ++b)
    EXPECT_NE(d.table(1)[b], KvCacheManager::kReleased) << b;
  kv.free(d);
  pool.check_invariants();
}

TEST(KvCacheManagerGroups, ProposalsKeepTheBlocksARollbackWritesAgain) {
  KvBlockPool pool(64, kBlock, 2);
  KvCacheManager kv(pool, true, full_and_sliding(8));
  Sequence a = make_sequence(40);
  a.num_drafts = 12;  // the last 12 tokens are proposals
  compute(kv, a);
  kv.release_outside_window(a);
  // Released behind 40 - 12 - 8 = 20 (the chunk from 16): blocks 0-3, not those a rollback to
  // 28 computed tokens reads again.
  EXPECT_EQ(released(a.table(1)), 4);
  a.num_drafts = 0;
  a.num_computed = 28;
  a.tokens.resize(29);
  kv.truncate(a);
  EXPECT_EQ(a.table(1).size(), 8u);
  EXPECT_EQ(a.block_table.size(), 8u);
  pool.check_invariants();
  // A fork shares what each group still holds.
  Sequence c = child_of(a, 5);
  kv.fork(a, c);
  const std::vector<int32_t> computed1(a.table(1).begin(), a.table(1).begin() + 7);
  const std::vector<int32_t> computed0(a.block_table.begin(), a.block_table.begin() + 7);
  EXPECT_EQ(c.table(1), computed1) << "the blocks of its 28 computed tokens";
  EXPECT_EQ(c.block_table, computed0);
  kv.free(c);
  kv.free(a);
  EXPECT_EQ(pool.num_used(0) + pool.num_used(1), 0);
  pool.check_invariants();
}

}  // namespace
}  // namespace tf

namespace tf {
namespace {

TEST(KvCacheManagerGroups, ARecurrentGroupHoldsOneStateBlockCopiedOnTheFirstWriteAfterAFork) {
  KvBlockPool pool(8, kBlock);
  KvCacheManager kv(pool, true, std::vector<CacheGroupSpec>{{CacheKind::kRecurrent, 0}});
  EXPECT_TRUE(kv.recurrent());
  Sequence a = make_sequence(30);
  EXPECT_EQ(kv.match_prefix(a, 0), 0) << "a recurrent state is never found in a prefix cache";
  compute(kv, a);
  ASSERT_EQ(a.block_table.size(), 1u) << "one state block, whatever the length";
  EXPECT_EQ(kv.blocks_needed(100000, 16), 1);
  EXPECT_EQ(kv.blocks_to_grow(30, 8), 0);
  EXPECT_EQ(pool.num_cached(), 0);
  // Growing writes the same block in place.
  for (int i = 0; i < 20; ++i) a.tokens.push_back(7);
  EXPECT_TRUE(compute(kv, a).empty());
  EXPECT_EQ(a.block_table.size(), 1u);
  // A fork shares the state; the first writer copies it (tagged with its group), the last
  // writes in place.
  Sequence b = child_of(a, 9);
  kv.fork(a, b);
  EXPECT_EQ(b.block_table, a.block_table);
  EXPECT_EQ(pool.refcount(a.block_table[0]), 2);
  a.tokens.push_back(8);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocate_slots(a, a.num_tokens(), copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, b.block_table[0]);
  EXPECT_EQ(copies[0].dst, a.block_table[0]);
  EXPECT_EQ(copies[0].group, 0);
  copies.clear();
  ASSERT_TRUE(kv.allocate_slots(b, b.num_tokens(), copies));
  EXPECT_TRUE(copies.empty());
  // Dropping proposals cannot shrink a state: truncate leaves it.
  kv.truncate(b);
  EXPECT_EQ(b.block_table.size(), 1u);
  kv.free(a);
  kv.free(b);
  EXPECT_EQ(pool.num_used(), 0);
  pool.check_invariants();
}

}  // namespace
}  // namespace tf

namespace tf {
namespace {

TEST(KvCacheManagerGroups, CrossAttentionBlocksHoldTheEncoderAndAreWrittenOnce) {
  KvBlockPool pool(32, kBlock, 2);
  KvCacheManager kv(
      pool, true,
      std::vector<CacheGroupSpec>{{CacheKind::kFullAttention, 0}, {CacheKind::kCrossAttention, 0}});
  EXPECT_TRUE(kv.cross_attention());
  Sequence a = make_sequence(1, 0);  // the decoder's start token
  a.encoder_tokens.assign(10, 7);    // an encoder input of 10: 3 blocks of 4
  EXPECT_EQ(kv.match_prefix(a, 0), 0) << "a decoder's K/V depend on the encoder's input too";
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocate_slots(a, 1, copies));
  EXPECT_EQ(a.block_table.size(), 1u);
  EXPECT_EQ(a.table(1).size(), 3u);
  EXPECT_EQ(kv.blocks_needed(9, 16, 10), 3 + 3);
  a.num_computed = 1;
  a.cross_ready = true;
  kv.cache_full_blocks(a, 0);
  EXPECT_EQ(pool.num_cached(), 0);
  // Forks share the encoder's K/V and never copy them: nothing writes there again.
  Sequence b = child_of(a, 9);
  kv.fork(a, b);
  EXPECT_TRUE(b.cross_ready);
  EXPECT_EQ(b.table(1), a.table(1));
  EXPECT_EQ(b.encoder_tokens, a.encoder_tokens);
  for (int i = 0; i < 8; ++i) a.tokens.push_back(3);
  ASSERT_TRUE(kv.allocate_slots(a, a.num_tokens(), copies));
  ASSERT_TRUE(kv.allocate_slots(b, b.num_tokens(), copies));
  for (const BlockCopy& c : copies) EXPECT_EQ(c.group, 0) << "only the decoder's blocks copy";
  EXPECT_EQ(pool.refcount(a.table(1)[0]), 2);
  // Freed (a preemption): the encoder's K/V go with the blocks, to be computed again.
  kv.free(a);
  EXPECT_FALSE(a.cross_ready);
  kv.free(b);
  EXPECT_EQ(pool.num_used(), 0);
  pool.check_invariants();
}

}  // namespace
}  // namespace tf
