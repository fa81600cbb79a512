#include "engine/kv_cache_manager.h"

#include "core/error.h"

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

bool KvCacheManager::allocate_slots(Sequence& seq, int64_t num_tokens) {
  const int64_t need = blocks_for(num_tokens) - static_cast<int64_t>(seq.block_table.size());
  if (need <= 0) return true;
  return pool_.allocate(need, seq.block_table);
}

void KvCacheManager::cache_full_blocks(Sequence& seq, uint64_t salt) {
  if (!prefix_caching_) return;
  const int bs = pool_.block_size();
  const int64_t full = seq.num_computed / bs;
  uint64_t parent =
      seq.block_hashes.empty() ? root_hash(salt, pool_.hash_key()) : seq.block_hashes.back();
  for (int64_t b = static_cast<int64_t>(seq.block_hashes.size()); b < full; ++b) {
    const uint64_t h = block_hash(parent, seq.tokens.data() + b * bs, bs);
    pool_.mark_cached(seq.block_table[b], h);
    seq.block_hashes.push_back(h);
    parent = h;
  }
}

void KvCacheManager::free(Sequence& seq) {
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) pool_.release(*it);
  seq.block_table.clear();
  seq.block_hashes.clear();
  seq.num_computed = 0;
}

}  // namespace tf
