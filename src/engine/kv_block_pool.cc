#include "engine/kv_block_pool.h"

#include <algorithm>
#include <random>

#include "core/error.h"
#include "core/hash.h"

namespace tf {

namespace {

uint64_t random_key() {
  std::random_device rd;  // the kernel's getrandom
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

uint64_t root_hash(uint64_t salt, uint64_t key) {
  return mix64(mix64(key ^ 0x6a09e667f3bcc909ull) ^ salt);
}

uint64_t block_hash(uint64_t parent, const int32_t* tokens, int block_size) {
  uint64_t h = mix64(parent + 0x9e3779b97f4a7c15ull);
  for (int i = 0; i < block_size; ++i)
    h = mix64(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) + 0x9e37 * (i + 1)));
  return h;
}

KvBlockPool::KvBlockPool(int64_t num_blocks, int block_size, int num_groups)
    : block_size_(block_size),
      used_by_group_(static_cast<size_t>(std::max(num_groups, 1)), 0),
      hash_key_(random_key()) {
  if (num_blocks <= 0) fail("the KV block pool needs at least one block");
  blocks_.resize(static_cast<size_t>(num_blocks));
  for (int32_t b = 0; b < num_blocks; ++b) push_free(b);
}

void KvBlockPool::push_free(int32_t b) {
  Block& blk = blocks_[b];
  blk.in_free = true;
  blk.prev = tail_;
  blk.next = -1;
  if (tail_ >= 0) blocks_[tail_].next = b;
  tail_ = b;
  if (head_ < 0) head_ = b;
  ++free_count_;
}

void KvBlockPool::unlink_free(int32_t b) {
  Block& blk = blocks_[b];
  if (blk.prev >= 0)
    blocks_[blk.prev].next = blk.next;
  else
    head_ = blk.next;
  if (blk.next >= 0)
    blocks_[blk.next].prev = blk.prev;
  else
    tail_ = blk.prev;
  blk.prev = blk.next = -1;
  blk.in_free = false;
  --free_count_;
}

bool KvBlockPool::allocate(int64_t n, std::vector<int32_t>& out, int group) {
  if (group < 0 || group >= num_groups())
    fail(ErrorKind::kInternal, "KV block group {} of {}", group, num_groups());
  if (n > free_count_) return false;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = head_;
    unlink_free(b);
    Block& blk = blocks_[b];
    if (blk.cached) {  // evict: the block is reused for other tokens
      cached_.erase(blk.hash);
      blk.cached = false;
      ++evictions_;
    }
    blk.ref = 1;
    blk.group = group;
    ++used_by_group_[static_cast<size_t>(group)];
    out.push_back(b);
  }
  return true;
}

void KvBlockPool::retain(int32_t block) {
  Block& blk = blocks_.at(block);
  if (blk.in_free) {
    unlink_free(block);
    ++used_by_group_[static_cast<size_t>(blk.group)];
  }
  ++blk.ref;
}

void KvBlockPool::release(int32_t block) {
  Block& blk = blocks_.at(block);
  if (blk.ref <= 0)
    fail(ErrorKind::kInternal, "KV block {} released more often than retained", block);
  if (--blk.ref == 0) {
    push_free(block);
    --used_by_group_[static_cast<size_t>(blk.group)];
  }
}

std::optional<int32_t> KvBlockPool::find_cached(uint64_t hash) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

void KvBlockPool::mark_cached(int32_t block, uint64_t hash) {
  Block& blk = blocks_.at(block);
  if (blk.cached) return;
  if (cached_.count(hash)) return;  // another block already holds these tokens; keep that one
  blk.cached = true;
  blk.hash = hash;
  cached_[hash] = block;
}

void KvBlockPool::check_invariants() const {
  int64_t n = 0;
  int32_t prev = -1;
  for (int32_t b = head_; b >= 0; b = blocks_[b].next) {
    const Block& blk = blocks_[b];
    TF_CHECK(blk.in_free && blk.ref == 0 && blk.prev == prev);
    prev = b;
    ++n;
    TF_CHECK(n <= num_blocks());
  }
  TF_CHECK(prev == tail_);
  TF_CHECK(n == free_count_);
  int64_t cached = 0;
  std::vector<int64_t> used(used_by_group_.size(), 0);
  for (int32_t b = 0; b < num_blocks(); ++b) {
    const Block& blk = blocks_[b];
    TF_CHECK(blk.ref >= 0);
    TF_CHECK(blk.group >= 0 && blk.group < num_groups());
    if (blk.ref > 0) ++used[static_cast<size_t>(blk.group)];
    TF_CHECK(blk.in_free == (blk.ref == 0));
    if (blk.cached) {
      ++cached;
      auto it = cached_.find(blk.hash);
      TF_CHECK(it != cached_.end() && it->second == b);
    }
  }
  TF_CHECK(cached == static_cast<int64_t>(cached_.size()));
  TF_CHECK(used == used_by_group_);
}

}  // namespace tf
