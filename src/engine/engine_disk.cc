// The engine's side of the prefix cache on disk (EngineConfig::kv_disk, KvDiskCache): offering
// full blocks as steps compute them, and loading a new request's prefix before it is scheduled.
//
// A load never blocks the step loop: the request's first sequence waits in loading_ while the
// disk's I/O thread reads its blocks straight into pool blocks taken for them, and the other
// sequences step on; the blocks read are then registered in the RAM prefix cache
// (KvCacheManager::adopt_cached) and the sequence is scheduled, where match_prefix finds them
// as any cached prefix. So every rule of the RAM cache (groups, windows, forks, copy-on-write)
// holds for them unchanged.

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/lora.h"

namespace tf {

namespace {

// What makes two engines' blocks interchangeable beyond the served name: the model's shape, the
// cache's element type and block size, and its layout.
std::string disk_fingerprint(const ModelConfig& c, const KvCache& kv) {
  return fmt::format("{} vocab={} dim={} layers={} heads={}/{} head_dim={} kv={} block={} [{}]",
                     c.architecture, c.vocab_size, c.dim, c.n_layers, c.n_heads, c.n_kv_heads,
                     c.head_dim, kernels::kv_type_name(kv.type()), kv.block_size(),
                     kv.layout().describe());
}

}  // namespace

std::unique_ptr<KvDiskCache> make_disk_cache(const EngineConfig& config, const Model& model,
                                             const KvCache& kv, const KvCacheManager& manager,
                                             std::function<void()> on_loaded) {
  if (config.kv_disk.dir.empty()) return nullptr;
  const ModelConfig& c = model.config();
  if (c.encoder_only() || !manager.prefix_caching() || manager.recurrent() ||
      manager.cross_attention()) {
    log::info("--kv-cache-dir: {} keeps no prefix cache ({}); nothing of it goes to disk",
              c.architecture,
              !manager.prefix_caching() ? "--no-prefix-caching"
              : c.encoder_only()        ? "an encoder"
              : manager.recurrent()     ? "a recurrent state"
                                        : "an encoder-decoder");
    return nullptr;
  }
  return std::make_unique<KvDiskCache>(
      config.kv_disk, disk_fingerprint(c, kv), kv.block_size(),
      kv.block_bytes() * static_cast<int64_t>(kv.layout().num_groups()), std::move(on_loaded));
}

KvDiskCache::Key Engine::disk_root(const Sequence& seq) const {
  const GenerationRequest& spec = seq.request->spec;
  // An adapter as its weights are (a reload of other files at the same path, or another
  // adapter with the same process id in another process, never shares blocks).
  return disk_->root(spec.cache_salt, spec.lora ? hex(spec.lora->digest()) : "");
}

std::vector<KvDiskCache::Key> Engine::disk_keys(const Sequence& seq, int64_t n) const {
  std::vector<KvDiskCache::Key> out;
  out.reserve(static_cast<size_t>(n));
  KvDiskCache::Key key = disk_root(seq);
  const int bs = kv_.block_size();
  for (int64_t b = 0; b < n; ++b) {
    key = KvDiskCache::next(key, seq.tokens.data() + b * bs, bs);
    out.push_back(key);
  }
  return out;
}

bool Engine::start_disk_load(Sequence& seq) {
  // A request gathering every prompt row computes them all: no prefix is used.
  if (!disk_ || seq.request->spec.all_prompt_rows()) return false;
  const int bs = kv_.block_size();
  const int64_t lookable = (seq.num_tokens() - 1) / bs;  // as match_prefix: >= 1 token computed
  if (lookable <= 0) return false;
  const int64_t in_ram =
      manager_.cached_run(manager_.prefix_hashes(seq, scheduler_.salt(&seq), lookable));
  if (in_ram >= lookable) return false;
  const std::vector<KvDiskCache::Key> keys = disk_keys(seq, lookable);
  if (!disk_->lookup(keys[static_cast<size_t>(in_ram)])) return false;
  // The blocks to read into, taken now (at most half of what the pool has free, so that a long
  // prefix on disk does not preempt the running sequences).
  const int64_t groups = static_cast<int64_t>(kv_.layout().num_groups());
  const int64_t n = std::min(lookable - in_ram, pool_.num_available() / 2 / groups);
  if (n <= 0) return false;
  DiskLoad load{&seq, in_ram, {}};
  KvDiskCache::LoadJob job;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> blocks = manager_.take_for_caching();
    if (blocks.empty()) break;
    std::vector<std::span<uint8_t>> into;
    for (int32_t block : blocks)
      for (const auto& span : kv_.block_spans(block)) into.push_back(span);
    job.into.push_back(std::move(into));
    load.blocks.push_back(std::move(blocks));
  }
  if (job.into.empty()) return false;
  job.id = ++next_disk_job_;
  job.keys.assign(keys.begin() + in_ram,
                  keys.begin() + in_ram + static_cast<int64_t>(job.into.size()));
  job.tokens.assign(seq.tokens.begin() + in_ram * bs,
                    seq.tokens.begin() + (in_ram + static_cast<int64_t>(job.into.size())) * bs);
  seq.disk_job = job.id;
  loading_[job.id] = std::move(load);
  disk_->load(std::move(job));
  return true;
}

void Engine::forget_disk_load(Sequence& seq) {
  if (seq.disk_job == 0) return;
  auto it = loading_.find(seq.disk_job);
  if (it != loading_.end()) it->second.seq = nullptr;
  seq.disk_job = 0;
}

void Engine::install_disk_loads() {
  if (!disk_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    disk_ready_ = false;
  }
  const int bs = kv_.block_size();
  for (const KvDiskCache::Loaded& l : disk_->take_loaded()) {
    auto it = loading_.find(l.id);
    if (it == loading_.end()) continue;
    DiskLoad load = std::move(it->second);
    loading_.erase(it);
    if (!load.seq) {  // its request ended meanwhile
      for (const auto& blocks : load.blocks) manager_.release_taken(blocks);
      continue;
    }
    Sequence& seq = *load.seq;
    seq.disk_job = 0;
    const std::vector<uint64_t> hashes = manager_.prefix_hashes(
        seq, scheduler_.salt(&seq), load.first + static_cast<int64_t>(load.blocks.size()));
    for (size_t i = 0; i < load.blocks.size(); ++i) {
      if (static_cast<int64_t>(i) < l.blocks)
        manager_.adopt_cached(hashes[static_cast<size_t>(load.first) + i], load.blocks[i]);
      else
        manager_.release_taken(load.blocks[i]);
    }
    disk_loaded_tokens_ += l.blocks * bs;
    scheduler_.add(&seq);
  }
}

void Engine::offer_to_disk(const SchedulerOutput& sched) {
  if (!disk_) return;
  const int bs = kv_.block_size();
  const int64_t block_bytes = kv_.block_bytes();
  const size_t groups = static_cast<size_t>(kv_.layout().num_groups());
  for (const auto& c : sched.chunks) {
    Sequence& seq = *c.seq;
    const int64_t full = static_cast<int64_t>(seq.block_hashes.size());
    if (seq.disk_offered > full ||
        (seq.disk_offered > 0 && seq.block_hashes[seq.disk_offered - 1] != seq.disk_offered_hash))
      seq.disk_offered = 0;  // truncated, or other blocks since: look again
    if (seq.disk_offered >= full) continue;
    // The chain goes on from the last block offered (its tokens unchanged: same hash).
    KvDiskCache::Key key = seq.disk_offered > 0 ? seq.disk_offered_key : disk_root(seq);
    for (int64_t b = seq.disk_offered; b < full; ++b) {
      key = KvDiskCache::next(key, seq.tokens.data() + b * bs, bs);
      if (disk_->known(key)) continue;
      std::vector<uint8_t> bytes = disk_->buffer();
      bool whole = true;
      for (size_t g = 0; g < groups && whole; ++g) {
        const int32_t block = seq.table(g)[static_cast<size_t>(b)];
        whole = block != KvCacheManager::kReleased;  // behind a window, released already
        if (whole) kv_.save_block(block, bytes.data() + g * block_bytes);
      }
      if (whole) disk_->store(key, seq.tokens.data() + b * bs, std::move(bytes));
    }
    seq.disk_offered = full;
    seq.disk_offered_hash = seq.block_hashes[full - 1];
    seq.disk_offered_key = key;
  }
}

}  // namespace tf
