#include "engine/kv_cache_manager.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/attention.h"

namespace tf {

int64_t KvCacheManager::match_prefix(Sequence& seq, uint64_t salt) {
  TF_CHECK(seq.num_computed == 0 && seq.block_table.empty());
  if (!prefix_caching_) return 0;
  const int bs = pool_.block_size();
  const int64_t lookable =
      (seq.num_tokens() - 1) / bs;  // full blocks, leaving >= 1 token to compute
  queries_ += seq.prompt_len;
  uint64_t parent = root_hash(salt, pool_.hash_key());
  for (int64_t b = 0; b < lookable; ++b) {
    const uint64_t h = block_hash(parent, seq.tokens.data() + b * bs, bs);
    const auto block = pool_.find_cached(h);
    if (!block) break;
    pool_.retain(*block);
    seq.block_table.push_back(*block);
    seq.block_hashes.push_back(h);
    parent = h;
  }
  seq.num_computed = static_cast<int64_t>(seq.block_table.size()) * bs;
  hits_ += std::min<int64_t>(seq.num_computed, seq.prompt_len);
  return seq.num_computed;
}

bool KvCacheManager::must_copy(const Sequence& seq, int64_t b) const {
  const int32_t block = seq.block_table[b];
  // A block in the prefix cache must keep the tokens its hash names: only a sequence whose own
  // hash chain covers it (so it rewrites the same tokens) may write into it.
  return pool_.refcount(block) > 1 ||
         (pool_.cached(block) && b >= static_cast<int64_t>(seq.block_hashes.size()));
}

bool KvCacheManager::allocate_slots(Sequence& seq, int64_t num_tokens,
                                    std::vector<BlockCopy>& copies) {
  auto& table = seq.block_table;
  const int64_t have = static_cast<int64_t>(table.size());
  const int64_t fresh = std::max<int64_t>(blocks_for(num_tokens) - have, 0);
  // Existing blocks the new tokens go into: the partial last one, or more after a sequence went
  // back to recompute tokens.
  const int64_t first_written = seq.num_computed / pool_.block_size();
  const int64_t end_written = std::min(blocks_for(num_tokens), have);
  int64_t to_copy = 0;
  for (int64_t b = first_written; b < end_written; ++b) to_copy += must_copy(seq, b);
  if (fresh + to_copy > pool_.num_available()) return false;
  pool_.allocate(fresh, table);
  for (int64_t b = first_written; b < end_written && to_copy > 0; ++b) {
    if (!must_copy(seq, b)) continue;
    const int32_t src = table[b];
    std::vector<int32_t> dst;
    pool_.allocate(1, dst);
    copies.push_back({src, dst[0]});
    table[b] = dst[0];
    pool_.release(src);  // the others' (or, unreferenced, the prefix cache's) from now on
    --to_copy;
  }
  return true;
}

void KvCacheManager::fork(const Sequence& parent, Sequence& child) {
  const int64_t n = parent.num_computed;
  const int64_t blocks = blocks_for(n);
  TF_CHECK(child.block_table.empty() && child.num_computed == 0);
  TF_CHECK(static_cast<int64_t>(parent.block_table.size()) >= blocks);
  TF_CHECK(child.num_tokens() >= n &&
           std::equal(parent.tokens.begin(), parent.tokens.begin() + n, child.tokens.begin()));
  for (int64_t b = 0; b < blocks; ++b) {
    if (parent.block_table[b] != kReleased) pool_.retain(parent.block_table[b]);
    child.block_table.push_back(parent.block_table[b]);
  }
  const int64_t full = std::min<int64_t>(n / pool_.block_size(), parent.block_hashes.size());
  child.block_hashes.assign(parent.block_hashes.begin(), parent.block_hashes.begin() + full);
  child.num_computed = n;
}

void KvCacheManager::cache_full_blocks(Sequence& seq, uint64_t salt) {
  if (!prefix_caching_) return;
  const int bs = pool_.block_size();
  // Proposals (speculative decoding) are not the sequence's tokens yet: their blocks wait.
  const int64_t full = std::min(seq.num_computed, seq.num_tokens() - seq.num_drafts) / bs;
  uint64_t parent =
      seq.block_hashes.empty() ? root_hash(salt, pool_.hash_key()) : seq.block_hashes.back();
  for (int64_t b = static_cast<int64_t>(seq.block_hashes.size()); b < full; ++b) {
    const uint64_t h = block_hash(parent, seq.tokens.data() + b * bs, bs);
    pool_.mark_cached(seq.block_table[b], h);
    seq.block_hashes.push_back(h);
    parent = h;
  }
}

void KvCacheManager::release_outside_window(Sequence& seq) {
  if (window_ <= 0) return;
  // The attention kernel reads keys in chunks of 16 positions from the chunk holding the first
  // key a query attends: n_ctx - window for a query with n_ctx keys, and n_ctx >= num_computed
  // (a padding row recomputes position num_computed - 1).
  const int64_t first_key = seq.num_computed - window_;
  if (first_key <= 0) return;
  const int64_t keep_from = first_key / kernels::kAttentionKeyChunk * kernels::kAttentionKeyChunk;
  const int64_t n = std::min<int64_t>(keep_from / pool_.block_size(),
                                      static_cast<int64_t>(seq.block_table.size()));
  for (int64_t b = n - 1; b >= 0 && seq.block_table[b] != kReleased; --b) {
    pool_.release(seq.block_table[b]);
    seq.block_table[b] = kReleased;
    ++window_releases_;
  }
}

void KvCacheManager::truncate(Sequence& seq) {
  const int64_t keep = blocks_for(seq.num_tokens());
  while (static_cast<int64_t>(seq.block_table.size()) > keep) {
    if (seq.block_table.back() != kReleased) pool_.release(seq.block_table.back());
    seq.block_table.pop_back();
  }
  const int64_t full = seq.num_computed / pool_.block_size();
  if (static_cast<int64_t>(seq.block_hashes.size()) > full) seq.block_hashes.resize(full);
}

void KvCacheManager::free(Sequence& seq) {
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it)
    if (*it != kReleased) pool_.release(*it);
  seq.block_table.clear();
  seq.block_hashes.clear();
  seq.num_computed = 0;
}

}  // namespace tf
