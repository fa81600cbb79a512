#pragma once
// The memory of the paged KV cache: for every slot of the layout (CacheLayout: a layer of each
// cache group), num_blocks blocks, each one span holding block_size token rows of K and then of
// V, or a recurrent layer's state (a block id belongs to one group, so the groups sharing a
// slot never share a span). Which block
// belongs to which sequence and group is decided above (the engine's block pool); the model
// only reads and writes through block tables, layer l through its group's table.
//
// The memory is mapped on its own and faulted in when the cache is made, as llama.cpp and vLLM
// reserve theirs at load: a server's resident size is its steady size from the first request on
// (not growing over hours as blocks are first written), a machine without the memory finds out
// at load rather than later, and unloading a model version unmaps it, whatever malloc keeps.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/attention.h"
#include "model/cache_layout.h"
#include "model/model_config.h"

namespace tf {

class KvCache {
 public:
  static constexpr int kDefaultBlockSize = 16;

  // One group of every layer (CacheLayout::single).
  KvCache(const ModelConfig& config, int64_t num_blocks, int block_size = kDefaultBlockSize,
          kernels::KvType type = kernels::KvType::kF32);
  KvCache(const ModelConfig& config, CacheLayout layout, int64_t num_blocks,
          int block_size = kDefaultBlockSize, kernels::KvType type = kernels::KvType::kF32);

  // A block's bytes: layout.slots layers' K and V.
  static int64_t bytes_per_block(const ModelConfig& config, int block_size = kDefaultBlockSize,
                                 kernels::KvType type = kernels::KvType::kF32);
  static int64_t bytes_per_block(const ModelConfig& config, const CacheLayout& layout,
                                 int block_size, kernels::KvType type);

  // The block size to use for a layout: `requested`, raised (in multiples of it) for a layout
  // whose recurrent groups share the pool with attention groups until an attention block holds
  // about as many bytes as a layer's state (vLLM's choice for hybrids: Qwen3-Next's 2.2 MB
  // states would otherwise make every 16-token K/V block as large), at most kMaxBlockSize.
  static int block_size_for(const ModelConfig& config, const CacheLayout& layout, int requested,
                            kernels::KvType type);
  static constexpr int kMaxBlockSize = 4096;

  int64_t num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  int64_t bytes() const { return bytes_; }
  // Bytes one token's keys and values take over a group's layers (0 for a recurrent group,
  // whose state does not grow with the tokens).
  int64_t bytes_per_token(int32_t group) const;
  kernels::KvType type() const { return type_; }
  const CacheLayout& layout() const { return layout_; }
  // Layer l's K/V: its slot's arrays, read through its group's block table.
  kernels::PagedKvLayer layer(int64_t l);
  // Layer l's recurrent state in block b (a recurrent group's): ModelConfig::ssm_state_floats().
  float* state(int64_t l, int32_t block);
  // Copies block src's contents (keys and values, or a recurrent group's states), in every
  // slot, to block dst (forking a sequence); group: the group both belong to.
  void copy_block(int32_t src, int32_t dst, int32_t group = 0);
  // A block's bytes over every slot: what save_block writes and load_block reads (the prefix
  // cache on disk keeps blocks in this form).
  int64_t block_bytes() const { return n_slots_ * slot_block_bytes_; }
  void save_block(int32_t block, uint8_t* dst) const;
  // The same bytes where they lie: one span per slot, in save_block's order.
  std::vector<std::span<uint8_t>> block_spans(int32_t block);

 private:
  int64_t num_blocks_;
  int block_size_;
  CacheLayout layout_;
  int64_t n_slots_;
  int64_t kv_dim_;
  int64_t head_dim_;
  int64_t slot_block_bytes_ = 0;  // a block's bytes in one slot: K and V rows, or a state
  kernels::KvType type_;
  // `bytes` of zeroed anonymous memory, every page resident (2 MiB pages where the kernel has
  // them).
  static uint8_t* map_populated(size_t bytes);
  struct Unmap {
    size_t bytes;
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t[], Unmap> storage_{nullptr, Unmap{0}};
  int64_t bytes_ = 0;
};

}  // namespace tf
