#include "engine/kv_cache_manager.h"

#include <algorithm>

#include "core/error.h"
#include "core/hash.h"
#include "kernels/attention.h"

namespace tf {

KvCacheManager::KvCacheManager(KvBlockPool& pool, bool prefix_caching, int64_t window)
    : KvCacheManager(pool, prefix_caching,
                     std::vector<CacheGroupSpec>{
                         {window > 0 ? CacheKind::kSlidingWindow : CacheKind::kFullAttention,
                          std::max<int64_t>(window, 0)}}) {}

KvCacheManager::KvCacheManager(KvBlockPool& pool, bool prefix_caching,
                               std::vector<CacheGroupSpec> groups)
    : pool_(pool), prefix_caching_(prefix_caching), groups_(std::move(groups)) {
  if (groups_.empty() || static_cast<int>(groups_.size()) != pool_.num_groups())
    fail(ErrorKind::kInternal, "{} cache groups over a block pool of {}", groups_.size(),
         pool_.num_groups());
  for (const auto& g : groups_)
    if (g.kind == CacheKind::kSlidingWindow && g.window <= 0)
      fail(ErrorKind::kInternal, "a sliding-window cache group without a window");
}

std::vector<CacheGroupSpec> KvCacheManager::specs_of(const CacheLayout& layout) {
  std::vector<CacheGroupSpec> out;
  for (const auto& g : layout.groups) out.push_back({g.kind, g.window});
  return out;
}

bool KvCacheManager::recurrent() const {
  return std::any_of(groups_.begin(), groups_.end(),
                     [](const CacheGroupSpec& g) { return g.kind == CacheKind::kRecurrent; });
}

bool KvCacheManager::cross_attention() const {
  return std::any_of(groups_.begin(), groups_.end(),
                     [](const CacheGroupSpec& g) { return g.kind == CacheKind::kCrossAttention; });
}

bool KvCacheManager::releases() const {
  return std::any_of(groups_.begin(), groups_.end(),
                     [](const CacheGroupSpec& g) { return g.kind == CacheKind::kSlidingWindow; });
}

uint64_t KvCacheManager::group_key(uint64_t h, size_t g) {
  return g == 0 ? h : mix64(h ^ (0x9e3779b97f4a7c15ull * g));
}

void KvCacheManager::ensure_tables(Sequence& seq) const {
  seq.group_tables.resize(groups_.size() - 1);
}

int64_t KvCacheManager::first_kept_block(int64_t from, int64_t window) const {
  // The attention kernel reads keys in chunks of 16 positions from the chunk holding the first
  // key a query attends: n_ctx - window for a query with n_ctx keys, n_ctx >= from.
  const int64_t first_key = from - window;
  if (first_key <= 0) return 0;
  const int64_t keep_from = first_key / kernels::kAttentionKeyChunk * kernels::kAttentionKeyChunk;
  return keep_from / pool_.block_size();
}

int64_t KvCacheManager::match_prefix(Sequence& seq, uint64_t salt) {
  TF_CHECK(seq.num_computed == 0 && seq.holds_no_blocks());
  ensure_tables(seq);
  // A recurrent state is not kept at block boundaries: nothing to resume from.
  // Nor is a decoder's K/V, which depend on the encoder's input as well as on its tokens.
  if (!prefix_caching_ || recurrent() || cross_attention()) return 0;
  const int bs = pool_.block_size();
  const int64_t lookable =
      (seq.num_tokens() - 1) / bs;  // full blocks, leaving >= 1 token to compute
  queries_ += seq.prompt_len;
  const std::vector<uint64_t> hashes = prefix_hashes(seq, salt, lookable);
  // Full-attention groups: the longest run of cached blocks from the start.
  int64_t limit = lookable;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].kind != CacheKind::kFullAttention) continue;
    int64_t run = 0;
    while (run < limit && pool_.find_cached(group_key(hashes[run], g))) ++run;
    limit = run;
  }
  // Sliding groups: the longest k <= limit whose window's blocks are all cached. last_missing[b]
  // is one past the last block before b that is not cached (0: none).
  int64_t k = limit;
  for (size_t g = 0; g < groups_.size() && k > 0; ++g) {
    if (groups_[g].kind != CacheKind::kSlidingWindow) continue;
    std::vector<int64_t> after_missing(static_cast<size_t>(k) + 1, 0);
    for (int64_t b = 0; b < k; ++b)
      after_missing[b + 1] = pool_.find_cached(group_key(hashes[b], g)) ? after_missing[b] : b + 1;
    while (k > 0 && after_missing[k] > first_kept_block(k * bs, groups_[g].window)) --k;
  }
  // A later sliding group may have lowered k below what an earlier one checked: its window's
  // blocks at the lower k are a subset or earlier; check again from the start until stable.
  for (bool stable = false; !stable && k > 0;) {
    stable = true;
    for (size_t g = 0; g < groups_.size() && k > 0; ++g) {
      if (groups_[g].kind != CacheKind::kSlidingWindow) continue;
      for (int64_t b = first_kept_block(k * bs, groups_[g].window); b < k; ++b) {
        if (!pool_.find_cached(group_key(hashes[b], g))) {
          --k;
          stable = false;
          break;
        }
      }
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto& table = seq.table(g);
    const int64_t first = groups_[g].kind == CacheKind::kSlidingWindow
                              ? first_kept_block(k * bs, groups_[g].window)
                              : 0;
    for (int64_t b = 0; b < k; ++b) {
      if (b < first) {
        table.push_back(kReleased);
        continue;
      }
      const int32_t block = *pool_.find_cached(group_key(hashes[b], g));
      pool_.retain(block);
      table.push_back(block);
    }
  }
  seq.block_hashes.assign(hashes.begin(), hashes.begin() + k);
  seq.num_computed = k * bs;
  hits_ += std::min<int64_t>(seq.num_computed, seq.prompt_len);
  return seq.num_computed;
}

std::vector<uint64_t> KvCacheManager::prefix_hashes(const Sequence& seq, uint64_t salt,
                                                    int64_t n) const {
  const int bs = pool_.block_size();
  TF_CHECK(n >= 0 && n * bs <= seq.num_tokens());
  std::vector<uint64_t> out;
  out.reserve(static_cast<size_t>(n));
  uint64_t parent = root_hash(salt, pool_.hash_key());
  for (int64_t b = 0; b < n; ++b) {
    parent = block_hash(parent, seq.tokens.data() + b * bs, bs);
    out.push_back(parent);
  }
  return out;
}

int64_t KvCacheManager::cached_run(const std::vector<uint64_t>& hashes) const {
  int64_t run = 0;
  for (; run < static_cast<int64_t>(hashes.size()); ++run) {
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (groups_[g].kind == CacheKind::kRecurrent) continue;
      if (!pool_.find_cached(group_key(hashes[run], g))) return run;
    }
  }
  return run;
}

std::vector<int32_t> KvCacheManager::take_for_caching() {
  std::vector<int32_t> out;
  int64_t n = 0;
  for (const auto& g : groups_) n += g.kind != CacheKind::kRecurrent;
  if (n > pool_.num_available()) return out;
  for (size_t g = 0; g < groups_.size(); ++g)
    if (groups_[g].kind != CacheKind::kRecurrent) pool_.allocate(1, out, static_cast<int>(g));
  return out;
}

void KvCacheManager::adopt_cached(uint64_t hash, const std::vector<int32_t>& blocks) {
  for (int32_t block : blocks) {
    const uint64_t key = group_key(hash, static_cast<size_t>(pool_.group(block)));
    if (!pool_.find_cached(key)) pool_.mark_cached(block, key);
    pool_.release(block);
  }
}

void KvCacheManager::release_taken(const std::vector<int32_t>& blocks) {
  for (int32_t block : blocks) pool_.release(block);
}

bool KvCacheManager::must_copy(const Sequence& seq, size_t g, int64_t b) const {
  const int32_t block = seq.table(g)[b];
  if (block == kReleased) return false;
  // A block in the prefix cache must keep the tokens its hash names: only a sequence whose own
  // hash chain covers it (so it rewrites the same tokens) may write into it.
  return pool_.refcount(block) > 1 ||
         (pool_.cached(block) && b >= static_cast<int64_t>(seq.block_hashes.size()));
}

bool KvCacheManager::allocate_slots(Sequence& seq, int64_t num_tokens,
                                    std::vector<BlockCopy>& copies) {
  ensure_tables(seq);
  const int64_t needed = blocks_for(num_tokens);
  // Existing blocks the new tokens go into: the partial last one, or more after a sequence went
  // back to recompute tokens.
  const int64_t first_written = seq.num_computed / pool_.block_size();
  // Per group: the blocks the table must have, and the range the new tokens write into (a
  // recurrent group's one block is written by every step).
  auto span = [&](size_t g, int64_t& need, int64_t& from) {
    if (groups_[g].kind == CacheKind::kRecurrent) {
      need = 1;
      from = 0;
    } else if (groups_[g].kind == CacheKind::kCrossAttention) {
      // Written once, by the step that encodes; read-only after.
      need = blocks_for(static_cast<int64_t>(seq.encoder_tokens.size()));
      from = seq.cross_ready ? need : 0;
    } else {
      need = needed;
      from = first_written;
    }
  };
  int64_t total = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    int64_t need = 0, from = 0;
    span(g, need, from);
    const int64_t have = static_cast<int64_t>(seq.table(g).size());
    total += std::max<int64_t>(need - have, 0);
    for (int64_t b = from; b < std::min(need, have); ++b) total += must_copy(seq, g, b);
  }
  if (total > pool_.num_available()) return false;
  for (size_t g = 0; g < groups_.size(); ++g) {
    int64_t need = 0, from = 0;
    span(g, need, from);
    auto& table = seq.table(g);
    const int64_t have = static_cast<int64_t>(table.size());
    pool_.allocate(std::max<int64_t>(need - have, 0), table, static_cast<int>(g));
    for (int64_t b = from; b < std::min(need, have); ++b) {
      if (!must_copy(seq, g, b)) continue;
      const int32_t src = table[b];
      std::vector<int32_t> dst;
      pool_.allocate(1, dst, static_cast<int>(g));
      copies.push_back({src, dst[0], static_cast<int32_t>(g)});
      table[b] = dst[0];
      pool_.release(src);  // the others' (or, unreferenced, the prefix cache's) from now on
    }
  }
  return true;
}

void KvCacheManager::fork(const Sequence& parent, Sequence& child) {
  const int64_t n = parent.num_computed;
  const int64_t blocks = blocks_for(n);
  TF_CHECK(child.holds_no_blocks() && child.num_computed == 0);
  TF_CHECK(child.num_tokens() >= n &&
           std::equal(parent.tokens.begin(), parent.tokens.begin() + n, child.tokens.begin()));
  ensure_tables(child);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto& from = parent.table(g);
    // A recurrent group's one block: the state after the parent's computed tokens; a
    // cross-attention group's: the encoder's K/V, all of them.
    const int64_t n_blocks = groups_[g].kind == CacheKind::kRecurrent
                                 ? std::min<int64_t>(static_cast<int64_t>(from.size()), 1)
                             : groups_[g].kind == CacheKind::kCrossAttention
                                 ? static_cast<int64_t>(from.size())
                                 : blocks;
    TF_CHECK(static_cast<int64_t>(from.size()) >= n_blocks);
    auto& to = child.table(g);
    for (int64_t b = 0; b < n_blocks; ++b) {
      if (from[b] != kReleased) pool_.retain(from[b]);
      to.push_back(from[b]);
    }
  }
  const int64_t full = std::min<int64_t>(n / pool_.block_size(), parent.block_hashes.size());
  child.block_hashes.assign(parent.block_hashes.begin(), parent.block_hashes.begin() + full);
  child.num_computed = n;
  child.encoder_tokens = parent.encoder_tokens;
  child.cross_ready = parent.cross_ready;
}

void KvCacheManager::cache_full_blocks(Sequence& seq, uint64_t salt) {
  if (!prefix_caching_ || recurrent() || cross_attention()) return;
  const int bs = pool_.block_size();
  // Proposals (speculative decoding) are not the sequence's tokens yet: their blocks wait.
  const int64_t full = std::min(seq.num_computed, seq.num_tokens() - seq.num_drafts) / bs;
  uint64_t parent =
      seq.block_hashes.empty() ? root_hash(salt, pool_.hash_key()) : seq.block_hashes.back();
  for (int64_t b = static_cast<int64_t>(seq.block_hashes.size()); b < full; ++b) {
    const uint64_t h = block_hash(parent, seq.tokens.data() + b * bs, bs);
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (groups_[g].kind == CacheKind::kRecurrent) continue;
      const int32_t block = seq.table(g)[b];
      if (block != kReleased) pool_.mark_cached(block, group_key(h, g));
    }
    seq.block_hashes.push_back(h);
    parent = h;
  }
}

void KvCacheManager::release_outside_window(Sequence& seq) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].kind != CacheKind::kSlidingWindow) continue;
    auto& table = seq.table(g);
    const int64_t n =
        std::min<int64_t>(first_kept_block(seq.num_computed - seq.num_drafts, groups_[g].window),
                          static_cast<int64_t>(table.size()));
    for (int64_t b = n - 1; b >= 0 && table[b] != kReleased; --b) {
      pool_.release(table[b]);
      table[b] = kReleased;
      ++window_releases_;
    }
  }
}

void KvCacheManager::truncate(Sequence& seq) {
  const int64_t keep = blocks_for(seq.num_tokens());
  for (size_t g = 0; g < groups_.size() && g <= seq.group_tables.size(); ++g) {
    // One block whatever the length; the encoder's K/V whatever the decoder's length.
    if (groups_[g].kind == CacheKind::kRecurrent || groups_[g].kind == CacheKind::kCrossAttention)
      continue;
    auto& table = seq.table(g);
    while (static_cast<int64_t>(table.size()) > keep) {
      if (table.back() != kReleased) pool_.release(table.back());
      table.pop_back();
    }
  }
  const int64_t full = seq.num_computed / pool_.block_size();
  if (static_cast<int64_t>(seq.block_hashes.size()) > full) seq.block_hashes.resize(full);
}

void KvCacheManager::free(Sequence& seq) {
  for (size_t g = 0; g < groups_.size() && g <= seq.group_tables.size(); ++g) {
    auto& table = seq.table(g);
    for (auto it = table.rbegin(); it != table.rend(); ++it)
      if (*it != kReleased) pool_.release(*it);
    table.clear();
  }
  seq.block_hashes.clear();
  seq.num_computed = 0;
  seq.cross_ready = false;
}

int64_t KvCacheManager::blocks_needed(int64_t num_tokens, int64_t chunk,
                                      int64_t encoder_tokens) const {
  const int64_t bs = pool_.block_size();
  int64_t total = 0;
  for (const auto& g : groups_) {
    int64_t n = g.kind == CacheKind::kRecurrent        ? 1
                : g.kind == CacheKind::kCrossAttention ? blocks_for(encoder_tokens)
                                                       : blocks_for(num_tokens);
    if (g.kind == CacheKind::kSlidingWindow)
      n = std::min(n,
                   (g.window + kernels::kAttentionKeyChunk + std::max<int64_t>(chunk, 1)) / bs + 2);
    total += n;
  }
  return total;
}

int64_t KvCacheManager::blocks_to_grow(int64_t len, int64_t more) const {
  int64_t attention = 0;
  for (const auto& g : groups_)
    attention += g.kind == CacheKind::kFullAttention || g.kind == CacheKind::kSlidingWindow;
  return attention * (blocks_for(len + more) - blocks_for(len));
}

}  // namespace tf
