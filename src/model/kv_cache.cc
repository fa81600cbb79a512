#include "model/kv_cache.h"

#include <sys/mman.h>

#include <algorithm>

#include "core/error.h"

namespace tf {

KvCache::KvCache(const ModelConfig& config, int64_t num_blocks, int block_size,
                 kernels::KvType type)
    : KvCache(config, CacheLayout::single(config), num_blocks, block_size, type) {}

namespace {

// A block's bytes in one slot: what the layout's kinds keep there (the larger, when attention
// and recurrent groups share the pool).
int64_t slot_block_bytes(const ModelConfig& config, const CacheLayout& layout, int block_size,
                         kernels::KvType type) {
  int64_t bytes = 0;
  for (const auto& g : layout.groups) {
    const int64_t b =
        g.kind == CacheKind::kRecurrent
            ? config.ssm_state_floats() * static_cast<int64_t>(sizeof(float))
            : block_size * kernels::kv_bytes_per_token(type, config.kv_dim(), config.head_dim);
    bytes = std::max(bytes, b);
  }
  return bytes;
}

}  // namespace

KvCache::KvCache(const ModelConfig& config, CacheLayout layout, int64_t num_blocks, int block_size,
                 kernels::KvType type)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      layout_(std::move(layout)),
      n_slots_(layout_.slots),
      kv_dim_(config.kv_dim()),
      head_dim_(config.head_dim),
      type_(type) {
  if (static_cast<int64_t>(layout_.slot_of_layer.size()) != config.cache_layers() ||
      static_cast<int64_t>(layout_.group_of_layer.size()) != config.cache_layers() || n_slots_ <= 0)
    fail(ErrorKind::kInternal, "a cache layout of {} layers for a model of {}",
         layout_.slot_of_layer.size(), config.cache_layers());
  if (num_blocks <= 0) fail("KV cache needs at least one block, got {}", num_blocks);
  if (type == kernels::KvType::kQ8_0 && (head_dim_ <= 0 || kv_dim_ % head_dim_ != 0))
    fail(ErrorKind::kUnsupported, "a q8_0 KV cache needs whole heads (kv_dim {}, head_dim {})",
         kv_dim_, head_dim_);
  if (block_size <= 0 || block_size > kMaxBlockSize)
    fail("KV block size {} is out of range (1..{})", block_size, kMaxBlockSize);
  slot_block_bytes_ = slot_block_bytes(config, layout_, block_size, type);
  const int64_t bytes = n_slots_ * num_blocks_ * slot_block_bytes_;
  storage_ = std::unique_ptr<uint8_t[], Unmap>(map_populated(static_cast<size_t>(bytes)),
                                               Unmap{static_cast<size_t>(bytes)});
  bytes_ = bytes;
}

uint8_t* KvCache::map_populated(size_t bytes) {
  // In 2 MiB pages where the kernel gives them, as the weights are (WeightStore::alloc_bytes):
  // attention at a depth of thousands of tokens reads one head's slice of each row from blocks
  // all over the pool, a few lines per 4 KiB page. (Not measured apart from the session's other
  // attention changes; what limits decode at depth is the misses a thread keeps in flight,
  // bench/results/throughput.md.) The mapping starts on a 2 MiB boundary and every page is
  // written once here, so the resident size does not grow as blocks are first used.
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t span = bytes >= kHuge ? bytes + kHuge : bytes;
  void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    fail(ErrorKind::kResourceExhausted, "cannot allocate a KV cache of {} bytes", bytes);
  auto* base = static_cast<uint8_t*>(p);
  if (span > bytes) {  // keep the 2 MiB-aligned part
    const size_t head = (kHuge - reinterpret_cast<uintptr_t>(base) % kHuge) % kHuge;
    const size_t tail = (head + bytes + 4095) / 4096 * 4096;  // munmap takes whole pages
    if (head > 0) ::munmap(base, head);
    if (tail < span) ::munmap(base + tail, span - tail);
    base += head;
    ::madvise(base, bytes, MADV_HUGEPAGE);
  }
#ifdef MADV_POPULATE_WRITE
  if (::madvise(base, bytes, MADV_POPULATE_WRITE) == 0) return base;
#endif
  for (size_t off = 0; off < bytes; off += 4096) base[off] = 0;  // kernels before 5.14
  return base;
}

void KvCache::Unmap::operator()(uint8_t* p) const {
  if (p != nullptr) ::munmap(p, bytes);
}

int KvCache::block_size_for(const ModelConfig& config, const CacheLayout& layout, int requested,
                            kernels::KvType type) {
  bool recurrent = false, attention = false;
  for (const auto& g : layout.groups)
    (g.kind == CacheKind::kRecurrent ? recurrent : attention) = true;
  if (!recurrent || !attention || requested <= 0) return requested;
  const int64_t per_token = kernels::kv_bytes_per_token(type, config.kv_dim(), config.head_dim);
  const int64_t state = config.ssm_state_floats() * static_cast<int64_t>(sizeof(float));
  const int64_t tokens = (state + per_token - 1) / per_token;
  const int64_t bs = (tokens + requested - 1) / requested * requested;
  return static_cast<int>(std::clamp<int64_t>(bs, requested, std::max(requested, kMaxBlockSize)));
}

int64_t KvCache::bytes_per_block(const ModelConfig& config, int block_size, kernels::KvType type) {
  return bytes_per_block(config, CacheLayout::single(config), block_size, type);
}

int64_t KvCache::bytes_per_block(const ModelConfig& config, const CacheLayout& layout,
                                 int block_size, kernels::KvType type) {
  return layout.slots * slot_block_bytes(config, layout, block_size, type);
}

int64_t KvCache::bytes_per_token(int32_t group) const {
  const auto& g = layout_.groups.at(static_cast<size_t>(group));
  if (g.kind == CacheKind::kRecurrent) return 0;
  return static_cast<int64_t>(g.layers.size()) *
         kernels::kv_bytes_per_token(type_, kv_dim_, head_dim_);
}

void KvCache::copy_block(int32_t src, int32_t dst, int32_t group) {
  if (src < 0 || src >= num_blocks_ || dst < 0 || dst >= num_blocks_ || group < 0 ||
      group >= layout_.num_groups()) {
    fail(ErrorKind::kInternal, "copy_block({}, {}) of group {} outside the cache of {} blocks", src,
         dst, group, num_blocks_);
  }
  if (src == dst) return;
  // A block id owns the same span of every slot: its K and V rows, or a recurrent state.
  for (int64_t s = 0; s < n_slots_; ++s) {
    uint8_t* base = storage_.get() + s * num_blocks_ * slot_block_bytes_;
    std::copy_n(base + src * slot_block_bytes_, slot_block_bytes_, base + dst * slot_block_bytes_);
  }
}

void KvCache::save_block(int32_t block, uint8_t* dst) const {
  if (block < 0 || block >= num_blocks_)
    fail(ErrorKind::kInternal, "save_block({}) outside the cache of {} blocks", block, num_blocks_);
  for (int64_t s = 0; s < n_slots_; ++s) {
    const uint8_t* base = storage_.get() + s * num_blocks_ * slot_block_bytes_;
    std::copy_n(base + block * slot_block_bytes_, slot_block_bytes_, dst + s * slot_block_bytes_);
  }
}

std::vector<std::span<uint8_t>> KvCache::block_spans(int32_t block) {
  if (block < 0 || block >= num_blocks_)
    fail(ErrorKind::kInternal, "block_spans({}) outside the cache of {} blocks", block,
         num_blocks_);
  std::vector<std::span<uint8_t>> out;
  for (int64_t s = 0; s < n_slots_; ++s) {
    uint8_t* base = storage_.get() + s * num_blocks_ * slot_block_bytes_;
    out.emplace_back(base + block * slot_block_bytes_, static_cast<size_t>(slot_block_bytes_));
  }
  return out;
}

kernels::PagedKvLayer KvCache::layer(int64_t l) {
  if (l < 0 || l >= static_cast<int64_t>(layout_.slot_of_layer.size()))
    fail(ErrorKind::kInternal, "layer {} outside the KV cache's layout", l);
  const int64_t ts = kernels::kv_type_size(type_);
  uint8_t* base = storage_.get() + layout_.slot_of_layer[l] * num_blocks_ * slot_block_bytes_;
  kernels::PagedKvLayer out{
      base,  base + block_size_ * kv_dim_ * ts, block_size_,           static_cast<int>(kv_dim_),
      type_, layout_.group_of_layer[l],         slot_block_bytes_ / ts};
  if (type_ == kernels::KvType::kQ8_0) {  // the rows' scales after both K's and V's rows
    out.scale_group = static_cast<int>(head_dim_);
    out.scale_offset = 2 * block_size_ * kv_dim_;
  }
  return out;
}

float* KvCache::state(int64_t l, int32_t block) {
  if (l < 0 || l >= static_cast<int64_t>(layout_.slot_of_layer.size()) || block < 0 ||
      block >= num_blocks_ ||
      layout_.groups[layout_.group_of_layer[l]].kind != CacheKind::kRecurrent)
    fail(ErrorKind::kInternal, "no recurrent state for layer {} in block {}", l, block);
  uint8_t* base = storage_.get() + layout_.slot_of_layer[l] * num_blocks_ * slot_block_bytes_;
  return reinterpret_cast<float*>(base + block * slot_block_bytes_);
}

}  // namespace tf
