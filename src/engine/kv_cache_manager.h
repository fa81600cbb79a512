#pragma once
// Block tables of sequences over the KvBlockPool: the longest cached prefix of a new sequence,
// slots for the tokens about to be computed, forks that share blocks (copied on first write),
// registering blocks that became full, and freeing.

#include <cstdint>
#include <vector>

#include "engine/kv_block_pool.h"
#include "engine/sequence.h"

namespace tf {

// A block's K/V to copy to another block before the next forward pass writes into it.
struct BlockCopy {
  int32_t src;
  int32_t dst;
};

class KvCacheManager {
 public:
  // window > 0: every layer of the model attends only to its last `window` positions (Mistral,
  // Qwen2 with all layers sliding), so blocks wholly before the window of a sequence's next
  // query are released as it advances (release_outside_window).
  KvCacheManager(KvBlockPool& pool, bool prefix_caching, int64_t window = 0)
      : pool_(pool), prefix_caching_(prefix_caching), window_(window) {}

  // A released block's place in a block table: positions no query will attend again.
  static constexpr int32_t kReleased = -1;

  // For a sequence with nothing computed: retains the cached blocks of its longest cached prefix
  // (never all of its tokens: the last one must be computed for its logits) and sets
  // num_computed. Returns the tokens found. Counts lookups and hits.
  int64_t match_prefix(Sequence& seq, uint64_t salt);
  // Makes the block table cover positions [0, num_tokens) for the tokens from num_computed on,
  // and makes every block they will be written into the sequence's own: a block it shares with
  // another (a fork's), or a cached one whose tokens it may change, is replaced by a fresh one
  // and the copy to make first is appended to `copies` (copy-on-write, as llama.cpp's seq_cp).
  // False (and no change) if the pool cannot supply the blocks.
  bool allocate_slots(Sequence& seq, int64_t num_tokens, std::vector<BlockCopy>& copies);
  // Gives child, which holds no blocks and whose tokens begin with parent's computed ones, every
  // block of those tokens, the partial last one included, and parent's num_computed. Blocks are
  // shared, not copied, so a fork never allocates and cannot fail; whichever sharer writes into
  // a shared block first gets its own copy (allocate_slots).
  void fork(const Sequence& parent, Sequence& child);
  // Registers the blocks that the computed tokens filled.
  void cache_full_blocks(Sequence& seq, uint64_t salt);
  // With a window: releases the blocks of seq that lie wholly before every key its later queries
  // can attend (queries at positions >= num_computed - 1, a padding row's recomputed token
  // included), keeping the attention kernel's chunk of 16 keys that straddles the window's
  // start. Their entries become kReleased (positions stay where they are); each block goes back
  // to the pool (and stays findable in the prefix cache until reused).
  void release_outside_window(Sequence& seq);
  // After rejected proposals were dropped (tokens and num_computed lowered): releases the blocks
  // past the ones its tokens need, and forgets hashes of blocks no longer full of computed ones.
  void truncate(Sequence& seq);
  // Releases every block (last block first, so a sequence's tail is evicted before its head).
  void free(Sequence& seq);
  // Blocks needed to hold num_tokens.
  int64_t blocks_for(int64_t num_tokens) const {
    return (num_tokens + pool_.block_size() - 1) / pool_.block_size();
  }

  int64_t prefix_queries() const { return queries_; }  // prompt tokens looked up
  int64_t prefix_hits() const { return hits_; }        // of those, found in the cache
  bool prefix_caching() const { return prefix_caching_; }
  int64_t window() const { return window_; }
  int64_t window_releases() const { return window_releases_; }  // blocks released so far
  KvBlockPool& pool() { return pool_; }

 private:
  // Whether the sequence must copy block b of its table before writing into it.
  bool must_copy(const Sequence& seq, int64_t b) const;

  KvBlockPool& pool_;
  bool prefix_caching_;
  int64_t window_;
  int64_t queries_ = 0, hits_ = 0, window_releases_ = 0;
};

}  // namespace tf
