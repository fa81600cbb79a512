#pragma once
// LoRA adapters (issue 54): a fine-tune stored as low-rank corrections of a base model's linear
// projections, W' = W + s * B * A (A [r, in], B [out, r]; s = lora_alpha / r, or lora_alpha /
// sqrt(r) with rsLoRA), applied unmerged: the base projection runs once for the whole batch and
// each sequence that uses an adapter adds s * B (A x) to its own rows (SequenceChunk::lora), so
// sequences with different adapters, or none, share one forward pass.
//
// Read from PEFT's adapter directory (adapter_config.json + adapter_model.safetensors) or a GGUF
// adapter (llama.cpp's convert_lora_to_gguf.py: blk.N.attn_q.weight.lora_a / lora_b, alpha in
// adapter.lora.alpha), held to its base: every tensor must name a projection the base has
// (q/k/v/o_proj, gate/up/down_proj of a dense MLP, or a fused base's qkv_proj and gate_up_proj,
// whose B rows are split into the q/k/v and gate/up parts the model applies) with the base's
// shape; anything else (embeddings, the LM head, experts, modules_to_save, DoRA, biases) is
// refused by name, never ignored.

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/sha256.h"
#include "kernels/weights.h"
#include "model/model_config.h"
#include "model/weight_store.h"

namespace tf {

class Model;

enum class LoraTarget : uint8_t { kQ, kK, kV, kO, kGate, kUp, kDown };
constexpr int kLoraTargets = 7;
// "q_proj", "k_proj", ...: PEFT's module names.
const char* lora_target_name(LoraTarget t);

// One projection's correction: A [rank, in] and B [out, rank] with the scale folded into B.
struct LoraPair {
  kernels::WeightMatrix a, b;
  int64_t rank = 0;
};

class LoraAdapter {
 public:
  // Reads the adapter at `path` (a PEFT directory) for `base`; throws Error (kInvalidArgument,
  // kUnsupported, kNotFound) naming the file and the tensor or field that does not fit.
  static std::shared_ptr<const LoraAdapter> load(const std::string& path, const Model& base);

  // The correction of layer `layer`'s projection `t`, or nullptr where the adapter has none.
  const LoraPair* pair(int64_t layer, LoraTarget t) const {
    const auto& p = layers_.at(static_cast<size_t>(layer))[static_cast<size_t>(t)];
    return p ? &*p : nullptr;
  }
  const std::string& path() const { return path_; }
  const Model* base() const { return base_; }  // the model it was loaded for
  // Unique in the process (a reload is another adapter): what keys its prefix-cache blocks.
  uint64_t id() const { return id_; }
  // SHA-256 of its path and its corrections as computed (taken at load): what keys its blocks in
  // the prefix cache on disk, the same in every process that loads the same adapter.
  const Sha256Digest& digest() const { return digest_; }
  int64_t rank() const { return rank_; }  // adapter_config.json's r
  float alpha() const { return alpha_; }
  bool rslora() const { return rslora_; }
  // The base model's name or path as the adapter records it ("" when it does not).
  const std::string& base_model() const { return base_model_; }
  // Bytes of the corrections in compute form (what a loaded adapter costs).
  size_t bytes() const { return bytes_; }
  // Which projections it corrects, PEFT's names ("q_proj", "v_proj").
  std::vector<std::string> targets() const;

 private:
  LoraAdapter() = default;
  // A GGUF adapter file (llama.cpp's convert_lora_to_gguf.py).
  static std::shared_ptr<const LoraAdapter> load_gguf(const std::string& path, const Model& base);
  // Pairs the store's lora_A / lora_B tensors (PEFT's names, or GGUF's), checks them against the
  // base and keeps them in compute form; interleaved: the file's q/k rows are in llama.cpp's
  // interleaved rotary layout (moved to the base's where it differs).
  void pair_up(const ModelConfig& c, bool gguf, bool interleaved);

  const Model* base_ = nullptr;
  uint64_t id_ = 0;
  Sha256Digest digest_{};
  std::string path_, base_model_;
  int64_t rank_ = 0;
  float alpha_ = 0.0f;
  bool rslora_ = false;
  size_t bytes_ = 0;
  WeightStore store_;
  std::vector<std::array<std::optional<LoraPair>, kLoraTargets>> layers_;
};

// The shape [out, in] of the correction a LoRA pair of target t makes at a layer (a part of a
// fused base's qkv_proj / gate_up_proj for its q/k/v and gate/up), or nullopt where the layer
// has no such dense projection (a Gated DeltaNet layer's attention, an MoE layer's MLP).
std::optional<std::array<int64_t, 2>> lora_target_shape(const ModelConfig& config, int64_t layer,
                                                        LoraTarget t);

}  // namespace tf
