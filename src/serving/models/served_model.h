#pragma once
// A model as the server serves it: its weights, tokenizer (with chat template and stop ids),
// and the engine that runs its requests, under the name clients address it by.

#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_format.h"
#include "engine/model_instance.h"
#include "model/lora.h"
#include "serving/models/generate_settings.h"

namespace tf {

// A ModelInstance (weights, tokenizer, stop ids, engine) under the name and version clients
// address it by.
struct ServedModel : ModelInstance {
  std::string name;     // what clients put in "model" and in TF Serving paths
  std::string path;     // where it was loaded from
  int64_t version = 1;  // TF Serving's version number
  int64_t created = 0;  // unix seconds, when it became available
  double load_seconds = 0.0;
  // TF Serving's generate signature: generation_config.json's settings, then the model config's.
  GenerateSignature generate;
  // The conversation format (chat template parsed once, tool-call format, think blocks); the
  // composition root sets it at load with the operator's overrides (nullptr: the planner
  // builds the model's own per request).
  std::shared_ptr<const ChatFormat> chat;
  // What it serves (ModelTask bits, model_tasks.h): from its config, or the operator's --task.
  uint8_t tasks = 0;
  // A generator serving as a reranker (--task score): its "no" and "yes" token ids, whose
  // logits after a pair's prompt are the pair's scores.
  std::vector<int32_t> score_tokens;
  // The operator's embedding pooling (--pooling) over the model's own; unset: the model's.
  std::optional<Pooling> pooling;
  // chat, or the model's own format when none was set.
  std::shared_ptr<const ChatFormat> chat_format() const {
    return chat ? chat : ChatFormat::for_model(tokenizer, config());
  }
  // At most this many LoRA adapters resident in compute form (0: no limit): loading one more
  // evicts the least recently used that no request holds (reloaded from its files when named
  // again).
  size_t max_loras = 0;
  // The adapter at `path` loaded for this version's weights: loaded on first use (by the
  // caller's thread, never the engine's), then kept (least recently used first evicted past
  // max_loras). Throws Error naming what does not fit.
  std::shared_ptr<const LoraAdapter> lora(const std::string& path) const;
  // Forgets the adapter at `path` (its memory goes once no running request holds it).
  void drop_lora(const std::string& path) const;
  struct LoraCounts {
    int64_t resident = 0, loads = 0, evictions = 0;
    int64_t bytes = 0;  // of the resident adapters in compute form
  };
  LoraCounts lora_counts() const;

 private:
  mutable std::mutex lora_mu_;
  // Resident adapters by path, most recently used first.
  mutable std::list<std::pair<std::string, std::shared_ptr<const LoraAdapter>>> loras_;
  mutable int64_t lora_loads_ = 0, lora_evictions_ = 0;
};

// Loads a model directory or file, its tokenizer (or explicit_tokenizer) and its
// generation_config.json, and starts its engine.
std::unique_ptr<ServedModel> load_served_model(
    const std::string& name, const std::string& path, const EngineConfig& engine_config,
    const std::string& explicit_tokenizer = "",
    kernels::WeightType weight_type = kernels::WeightType::kF32);

// The served name of a model path when none is given: the directory's (or file's stem) name.
std::string default_served_name(const std::string& path);

}  // namespace tf
