#pragma once
// How a model's layers keep their context (vLLM's KV cache specs and groups): layers of one
// cache kind form groups of equal size, each group with its own block table per sequence over
// one shared block pool. A block of the pool holds `slots` layers' K and V for block_size
// positions; a block handed to group g holds the K/V of g's layers (layer l in slot
// slot_of_layer[l]). A sliding-window group's table releases blocks that fall wholly behind the
// window as a sequence advances, so that in a model whose sliding layers sit beside global ones
// (Gemma 2/3, gpt-oss, Qwen2's max_window_layers) those layers hold about a window's worth of
// blocks per sequence instead of its whole length.
//
// Groups are equal in size (the smaller kind's layer count) so that one block size serves them
// all: Gemma 2's 13 sliding and 13 global layers make two groups of 13; Gemma 3's 5:1 pattern
// with 4 global layers makes one global group and sliding groups of 4 (the last one partly
// empty). A model whose layers are all of one kind has one group of all of them: the layout of
// a plain decoder stack, block for block; a Mamba model's one recurrent group, whose block is a
// sequence's state in every layer. A hybrid (Qwen3-Next, Qwen3.5: Gated DeltaNet layers beside
// attention ones) has recurrent groups beside its attention group, of the smaller kind's size.

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace tf {

enum class CacheKind {
  kFullAttention,  // every key of the sequence stays (paged, prefix-cacheable)
  kSlidingWindow,  // keys within `window` of the newest query; blocks behind it are released
  // A fixed-size state per sequence (Mamba's convolution and SSM state): one block, whatever
  // the length, written by every step (a fork shares it until one of them writes: then it is
  // copied, as a shared K/V block is). Not prefix-cached: the state after a prefix is not kept
  // at block boundaries, so a recurrent model computes every prompt whole.
  kRecurrent,
  // An encoder-decoder's cross-attention K/V: computed once from the encoder's output when the
  // sequence starts (blocks for the encoder's length), read by every decoder step, never
  // written again; shared by forks, freed with the sequence. Not prefix-cached.
  kCrossAttention,
};

const char* cache_kind_name(CacheKind kind);

struct CacheGroup {
  CacheKind kind = CacheKind::kFullAttention;
  int64_t window = 0;           // kSlidingWindow: tokens a query attends (itself included)
  std::vector<int32_t> layers;  // ascending; at most CacheLayout::slots
};

// Layers here are cache layers (ModelConfig::cache_layers): a decoder's layers, then, for an
// encoder-decoder, each decoder layer's cross-attention (n_layers + l).
struct CacheLayout {
  std::vector<CacheGroup> groups;
  std::vector<int32_t> group_of_layer;
  std::vector<int32_t> slot_of_layer;
  int64_t slots = 0;  // layers' K/V per block: the size of the largest group

  // grouped: sliding layers beside global ones get groups of their own (releasing their old
  // blocks); false keeps every layer in one group that holds every block of a sequence
  // (vLLM's --disable-hybrid-kv-cache-manager), except that a model whose layers all slide
  // still releases (as before groups existed).
  static CacheLayout for_model(const ModelConfig& config, bool grouped = true);
  // One group of every layer, full attention (recurrent for Mamba): caches that never release
  // blocks (a draft model's shadow, beam search).
  static CacheLayout single(const ModelConfig& config);

  int64_t num_groups() const { return static_cast<int64_t>(groups.size()); }
  // e.g. "2 groups of 13 layers: sliding_window(4096) x1, full_attention x1".
  std::string describe() const;
};

}  // namespace tf
