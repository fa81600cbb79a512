#include "model/cache_layout.h"

#include <algorithm>
#include <cstdint>
#include <map>

#include <fmt/format.h>

namespace tf {

const char* cache_kind_name(CacheKind kind) {
  switch (kind) {
    case CacheKind::kFullAttention:
      return "full_attention";
    case CacheKind::kSlidingWindow:
      return "sliding_window";
    case CacheKind::kRecurrent:
      return "recurrent";
    case CacheKind::kCrossAttention:
      return "cross_attention";
  }
  return "unknown";
}

namespace {

CacheLayout one_group(const ModelConfig& config, CacheKind kind, int64_t window) {
  CacheLayout out;
  CacheGroup g;
  g.kind = kind;
  g.window = window;
  for (int64_t l = 0; l < config.n_layers; ++l) g.layers.push_back(static_cast<int32_t>(l));
  out.groups.push_back(std::move(g));
  out.slots = config.n_layers;
  out.group_of_layer.assign(static_cast<size_t>(config.n_layers), 0);
  out.slot_of_layer.resize(static_cast<size_t>(config.n_layers));
  for (int64_t l = 0; l < config.n_layers; ++l) out.slot_of_layer[l] = static_cast<int32_t>(l);
  return out;
}

// An encoder-decoder: the decoder's self-attention layers, then their cross-attention caches,
// a group each of the decoder's size.
CacheLayout encoder_decoder(const ModelConfig& config) {
  CacheLayout out;
  const int64_t n = config.n_layers;
  out.slots = n;
  out.group_of_layer.resize(static_cast<size_t>(2 * n));
  out.slot_of_layer.resize(static_cast<size_t>(2 * n));
  for (int g = 0; g < 2; ++g) {
    CacheGroup group;
    group.kind = g == 0 ? CacheKind::kFullAttention : CacheKind::kCrossAttention;
    for (int64_t l = 0; l < n; ++l) {
      group.layers.push_back(static_cast<int32_t>(g * n + l));
      out.group_of_layer[g * n + l] = g;
      out.slot_of_layer[g * n + l] = static_cast<int32_t>(l);
    }
    out.groups.push_back(std::move(group));
  }
  return out;
}

}  // namespace

CacheLayout CacheLayout::single(const ModelConfig& config) {
  if (config.encoder_decoder()) return encoder_decoder(config);
  // A hybrid's recurrent layers and attention layers never share a group.
  if (config.hybrid()) return for_model(config, true);
  return one_group(
      config, config.arch == Arch::kMamba ? CacheKind::kRecurrent : CacheKind::kFullAttention, 0);
}

CacheLayout CacheLayout::for_model(const ModelConfig& config, bool grouped) {
  if (config.arch == Arch::kMamba) return one_group(config, CacheKind::kRecurrent, 0);
  if (config.encoder_decoder()) return encoder_decoder(config);
  const int64_t every = config.window_of_every_layer();
  if (every > 0) return one_group(config, CacheKind::kSlidingWindow, every);
  std::vector<int32_t> full, sliding, linear;
  for (int64_t l = 0; l < config.n_layers; ++l)
    (config.is_linear(l)    ? linear
     : config.is_sliding(l) ? sliding
                            : full)
        .push_back(static_cast<int32_t>(l));
  if (linear.empty() && (!grouped || sliding.empty() || full.empty())) return single(config);
  if (!linear.empty() && full.empty() && sliding.empty())
    return one_group(config, CacheKind::kRecurrent, 0);
  // Groups of the smallest kind's size (Qwen3-Next's 36 Gated DeltaNet and 12 attention layers:
  // one attention group and three recurrent ones of 12).
  size_t size = SIZE_MAX;
  for (const auto* kind : {&full, &sliding, &linear})
    if (!kind->empty()) size = std::min(size, kind->size());
  CacheLayout out;
  out.slots = static_cast<int64_t>(size);
  out.group_of_layer.assign(static_cast<size_t>(config.n_layers), 0);
  out.slot_of_layer.assign(static_cast<size_t>(config.n_layers), 0);
  auto add = [&](const std::vector<int32_t>& layers, CacheKind kind, int64_t window) {
    for (size_t first = 0; first < layers.size(); first += size) {
      CacheGroup g;
      g.kind = kind;
      g.window = window;
      const size_t end = std::min(layers.size(), first + size);
      g.layers.assign(layers.begin() + static_cast<std::ptrdiff_t>(first),
                      layers.begin() + static_cast<std::ptrdiff_t>(end));
      for (size_t i = 0; i < g.layers.size(); ++i) {
        out.group_of_layer[g.layers[i]] = static_cast<int32_t>(out.groups.size());
        out.slot_of_layer[g.layers[i]] = static_cast<int32_t>(i);
      }
      out.groups.push_back(std::move(g));
    }
  };
  add(full, CacheKind::kFullAttention, 0);
  add(sliding, CacheKind::kSlidingWindow, config.sliding_window);
  add(linear, CacheKind::kRecurrent, 0);
  return out;
}

std::string CacheLayout::describe() const {
  std::map<std::string, int> kinds;
  for (const auto& g : groups) {
    std::string k = cache_kind_name(g.kind);
    if (g.kind == CacheKind::kSlidingWindow) k += fmt::format("({})", g.window);
    ++kinds[k];
  }
  std::string out = fmt::format("{} group{} of {} layer{}:", groups.size(),
                                groups.size() == 1 ? "" : "s", slots, slots == 1 ? "" : "s");
  bool first = true;
  for (const auto& [k, n] : kinds) {
    out += fmt::format("{} {} x{}", first ? "" : ",", k, n);
    first = false;
  }
  return out;
}

}  // namespace tf
