#pragma once
// The blocks of the paged KV cache as a resource: reference counts, a free queue in LRU order,
// the prefix cache's map from block hash to block, and which cache group (CacheLayout) each
// block in use serves: every group draws from this one pool. A block whose last user released it
// stays in the cache (and can be revived by a later request with the same prefix) until the
// allocator needs it back, oldest first. Not thread-safe: the engine thread owns it.

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace tf {

class KvBlockPool {
 public:
  KvBlockPool(int64_t num_blocks, int block_size, int num_groups = 1);

  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int block_size() const { return block_size_; }
  // Blocks allocate() can hand out now: free ones plus cached ones nobody references.
  int64_t num_available() const { return free_count_; }
  int64_t num_used() const { return num_blocks() - free_count_; }
  int64_t num_cached() const { return static_cast<int64_t>(cached_.size()); }
  int64_t evictions() const { return evictions_; }
  int num_groups() const { return static_cast<int>(used_by_group_.size()); }
  // Blocks some sequence of the group references.
  int64_t num_used(int group) const { return used_by_group_.at(static_cast<size_t>(group)); }
  // The secret that keys the block-hash chains of this pool (see root_hash).
  uint64_t hash_key() const { return hash_key_; }

  // Appends n blocks with refcount 1 to out, for the group's use, evicting unreferenced cached
  // blocks oldest first. Takes nothing and returns false when fewer than n are available.
  bool allocate(int64_t n, std::vector<int32_t>& out, int group = 0);
  // One more user of a block (e.g. a cached prefix block found for a new request).
  void retain(int32_t block);
  // One user fewer; at zero the block joins the end of the free queue, keeping its cache entry.
  void release(int32_t block);
  int32_t refcount(int32_t block) const { return blocks_.at(block).ref; }
  int group(int32_t block) const { return blocks_.at(block).group; }
  bool cached(int32_t block) const { return blocks_.at(block).cached; }

  // The block holding the tokens identified by hash, if it is still cached.
  std::optional<int32_t> find_cached(uint64_t hash) const;
  // Records that a full block holds the tokens identified by hash.
  void mark_cached(int32_t block, uint64_t hash);

  // Throws if an internal invariant is broken (free list, counts, cache map). For tests.
  void check_invariants() const;

 private:
  struct Block {
    int32_t ref = 0;
    bool cached = false;
    uint64_t hash = 0;
    int32_t prev = -1, next = -1;  // free queue links
    bool in_free = false;
    int group = 0;  // whose K/V it holds (set when allocated; a cached block keeps it)
  };
  void push_free(int32_t b);
  void unlink_free(int32_t b);

  int block_size_;
  std::vector<Block> blocks_;
  int32_t head_ = -1, tail_ = -1;  // free queue: allocate from head, release to tail
  int64_t free_count_ = 0;
  int64_t evictions_ = 0;
  std::vector<int64_t> used_by_group_;
  uint64_t hash_key_;
  std::unordered_map<uint64_t, int32_t> cached_;
};

// Hash of a full block: its parent's hash and its token ids (the chain makes equal blocks at
// different prefixes different). The chain starts at root_hash(salt, key): `salt` separates
// tenants; `key` is the pool's secret (random per process), without which nobody can compute a
// chain value, so no prompt can be crafted to collide with another's blocks (the mixing steps
// are invertible: an unkeyed chain could be steered).
uint64_t block_hash(uint64_t parent, const int32_t* tokens, int block_size);
uint64_t root_hash(uint64_t salt, uint64_t key);

}  // namespace tf
