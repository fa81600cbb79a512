#pragma once
// Block tables of sequences over the KvBlockPool, one per cache group of the model's layout
// (CacheLayout): the coordinator of vLLM's hybrid allocator. For every group: the longest cached
// prefix of a new sequence, slots for the tokens about to be computed, forks that share blocks
// (copied on first write), registering blocks that became full, and freeing; for sliding-window
// groups, releasing the blocks behind the window. What a step needs is the sum of what each
// group needs, taken all or nothing.

#include <cstdint>
#include <vector>

#include "engine/kv_block_pool.h"
#include "engine/sequence.h"
#include "model/cache_layout.h"

namespace tf {

// A block's K/V to copy to another block before the next forward pass writes into it.
struct BlockCopy {
  int32_t src;
  int32_t dst;
  int32_t group = 0;  // the cache group both belong to (KvCache::copy_block)
};

// What the manager needs to know of a cache group.
struct CacheGroupSpec {
  CacheKind kind = CacheKind::kFullAttention;
  int64_t window = 0;  // kSlidingWindow: tokens a query attends (itself included)
};

class KvCacheManager {
 public:
  // One group. window > 0: every layer of the model attends only to its last `window`
  // positions (Mistral, Qwen2 with all layers sliding), so blocks wholly before the window of a
  // sequence's next query are released as it advances (release_outside_window).
  KvCacheManager(KvBlockPool& pool, bool prefix_caching, int64_t window = 0);
  // One group per spec (the pool's num_groups() must match).
  KvCacheManager(KvBlockPool& pool, bool prefix_caching, std::vector<CacheGroupSpec> groups);
  static std::vector<CacheGroupSpec> specs_of(const CacheLayout& layout);

  // Whether a cache group keeps a recurrent state (then nothing is prefix-cached, proposals
  // cannot be rolled back, and a sequence holds one block of the group whatever its length).
  bool recurrent() const;
  // Whether a group holds an encoder's cross-attention K/V (an encoder-decoder: nothing is
  // prefix-cached, since a decoder's K/V depend on the encoder's input too).
  bool cross_attention() const;

  // A released block's place in a block table: positions no query will attend again.
  static constexpr int32_t kReleased = -1;

  // For a sequence with nothing computed: retains, in every group, the cached blocks of its
  // longest cached prefix (never all of its tokens: the last one must be computed for its
  // logits) and sets num_computed. A full-attention group needs every block of the prefix
  // cached; a sliding-window group only those its next query's window reaches (the ones before
  // are kReleased in its table). Returns the tokens found. Counts lookups and hits.
  int64_t match_prefix(Sequence& seq, uint64_t salt);
  // Makes every group's block table cover positions [0, num_tokens) for the tokens from
  // num_computed on, and makes every block they will be written into the sequence's own: a block
  // it shares with another (a fork's), or a cached one whose tokens it may change, is replaced by
  // a fresh one and the copy to make first is appended to `copies` (copy-on-write, as llama.cpp's
  // seq_cp). False (and no change) if the pool cannot supply the blocks of all groups.
  bool allocate_slots(Sequence& seq, int64_t num_tokens, std::vector<BlockCopy>& copies);
  // Gives child, which holds no blocks and whose tokens begin with parent's computed ones, every
  // block of those tokens in every group, the partial last one included, and parent's
  // num_computed. Blocks are shared, not copied, so a fork never allocates and cannot fail;
  // whichever sharer writes into a shared block first gets its own copy (allocate_slots).
  void fork(const Sequence& parent, Sequence& child);
  // Registers the blocks that the computed tokens filled (in every group).
  void cache_full_blocks(Sequence& seq, uint64_t salt);
  // In each sliding-window group: releases the blocks of seq that lie wholly before every key
  // its later queries can attend (queries at positions >= num_computed - num_drafts - 1: a
  // padding row's recomputed token, and the first position written again when every proposal
  // is rejected), keeping the attention kernel's chunk of 16 keys that straddles the window's
  // start. Their entries become kReleased (positions stay where they are); each block goes back
  // to the pool (and stays findable in the prefix cache until reused).
  void release_outside_window(Sequence& seq);
  // After rejected proposals were dropped (tokens and num_computed lowered): releases the blocks
  // past the ones its tokens need, and forgets hashes of blocks no longer full of computed ones.
  void truncate(Sequence& seq);
  // Releases every block (last block first, so a sequence's tail is evicted before its head).
  void free(Sequence& seq);
  // The prefix cache's hashes of seq's first n full blocks under salt (what match_prefix looks
  // up), and how many of them lead with their blocks cached in every group that caches.
  std::vector<uint64_t> prefix_hashes(const Sequence& seq, uint64_t salt, int64_t n) const;
  int64_t cached_run(const std::vector<uint64_t>& hashes) const;
  // Blocks taken from the pool for the K/V of one full block of tokens in every group that
  // caches (the disk tier reads into them): one per such group, in group order; empty when the
  // pool has too few available. adopt_cached then registers them under the tokens' hash (a
  // prefix_hashes value) where the group lacks it, or release_taken gives them back unread; either
  // way they are unreferenced after it (cached ones the newest in the LRU order).
  std::vector<int32_t> take_for_caching();
  void adopt_cached(uint64_t hash, const std::vector<int32_t>& blocks);
  void release_taken(const std::vector<int32_t>& blocks);
  // Blocks needed to hold num_tokens, in one group of full attention.
  int64_t blocks_for(int64_t num_tokens) const {
    return (num_tokens + pool_.block_size() - 1) / pool_.block_size();
  }
  // The most blocks a sequence of num_tokens holds at once in all groups together, computed in
  // chunks of at most chunk tokens (a sliding group holds its window plus the chunk; a
  // cross-attention group the encoder's encoder_tokens).
  int64_t blocks_needed(int64_t num_tokens, int64_t chunk, int64_t encoder_tokens = 0) const;
  // The blocks a sequence of len tokens takes to grow by `more` (all groups; an upper bound).
  int64_t blocks_to_grow(int64_t len, int64_t more) const;

  int64_t prefix_queries() const { return queries_; }  // prompt tokens looked up
  int64_t prefix_hits() const { return hits_; }        // of those, found in the cache
  bool prefix_caching() const { return prefix_caching_; }
  int num_groups() const { return static_cast<int>(groups_.size()); }
  const std::vector<CacheGroupSpec>& groups() const { return groups_; }
  // Whether some group releases blocks behind a window.
  bool releases() const;
  int64_t window_releases() const { return window_releases_; }  // blocks released so far
  KvBlockPool& pool() { return pool_; }

 private:
  // Whether the sequence must copy block b of its group-g table before writing into it.
  bool must_copy(const Sequence& seq, size_t g, int64_t b) const;
  // The first block of a sliding group that queries from position `from` on can read.
  int64_t first_kept_block(int64_t from, int64_t window) const;
  // The prefix cache's key of a block of group g whose tokens hash to h.
  static uint64_t group_key(uint64_t h, size_t g);
  void ensure_tables(Sequence& seq) const;

  KvBlockPool& pool_;
  bool prefix_caching_;
  std::vector<CacheGroupSpec> groups_;
  int64_t queries_ = 0, hits_ = 0, window_releases_ = 0;
};

}  // namespace tf
