#pragma once
// A loaded language model: its config, its weights, and one forward pass over a ragged batch of
// sequences that reads and extends their paged KV cache.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/weight_store.h"

namespace tf {

class ThreadPool;
class LoraAdapter;

// The tokens one sequence contributes to a forward pass. Positions [0, start_pos) are already in
// the KV cache; tokens[i] sits at position start_pos + i. The block tables must cover positions
// [0, start_pos + n_tokens): one per group of the cache's layout (KvCache::layout), group 0's in
// block_table and the others' in group_tables; a sliding-window group's may hold -1 (released)
// for blocks wholly behind the window of the chunk's first query.
struct SequenceChunk {
  std::span<const int32_t> tokens;
  int64_t start_pos = 0;
  std::span<const int32_t> block_table;
  bool all_logits = false;  // logits for every token, else only for the last
  std::span<const std::vector<int32_t>> group_tables = {};  // groups 1.. of the layout
  // An encoder-decoder's: the encoder's length (its cross-attention K/V fill positions
  // [0, encoder_len) of the cross-attention group's blocks), and its input when this chunk
  // computes them first (the sequence's first chunk, or again after its blocks were freed).
  int64_t encoder_len = 0;
  std::span<const int32_t> encoder_tokens = {};
  // The LoRA adapter this sequence runs with (model/lora.h: loaded for this model), or none.
  const LoraAdapter* lora = nullptr;

  const int32_t* table(int32_t group) const {
    return group == 0 ? block_table.data() : group_tables[group - 1].data();
  }
  size_t table_size(int32_t group) const {
    return group == 0 ? block_table.size() : group_tables[group - 1].size();
  }
};

// Where one token of a flattened batch belongs: its sequence (index into the batch) and position.
struct TokenPosition {
  int64_t pos;
  int32_t seq;
};

class Model {
 public:
  virtual ~Model() = default;

  const ModelConfig& config() const { return config_; }
  const WeightStore& weights() const { return weights_; }
  // Once built: the weight files are unmapped (WeightStore::close_files).
  void close_weight_files() { weights_.close_files(); }
  int64_t parameter_count() const;

  // Checks the batch against the model and the cache, then runs it: writes K/V for every token
  // and the logits rows ([logit_rows(batch), vocab_size]) to `logits`. Throws before changing
  // anything if a token, position or block is out of range. Not thread-safe: one caller (the
  // engine thread of this instance) at a time. hidden, when given, also gets each logits row's
  // final hidden state after the final norm ([logit_rows(batch), dim]: what embeddings pool).
  void forward(std::span<const SequenceChunk> batch, KvCache& kv, float* logits, ThreadPool& pool,
               float* hidden = nullptr);

  static int64_t logit_rows(std::span<const SequenceChunk> batch);
  // Whether the forward pass applies LoRA adapters (SequenceChunk::lora).
  virtual bool supports_lora() const { return false; }

 protected:
  Model(ModelConfig config, WeightStore weights)
      : config_(std::move(config)), weights_(std::move(weights)) {}

  // Called by forward() once the batch is validated; tokens[t] says where token t of the flattened
  // batch sits.
  virtual void run(std::span<const SequenceChunk> batch, std::span<const TokenPosition> tokens,
                   KvCache& kv, float* logits, ThreadPool& pool) = 0;

  ModelConfig config_;
  WeightStore weights_;
  float* hidden_out_ = nullptr;  // forward()'s hidden, for run() to fill (null: not asked for)

 private:
  std::vector<TokenPosition> token_positions_;
};

// Loads a model from a Hugging Face directory (config.json + safetensors) or a llama2.c .bin,
// its linear layers and embeddings packed into weight_type (--dtype); norms and biases stay f32.
// The weight files are unmapped once the model is built (the model holds copies), unless
// keep_files: the stored tensors stay readable through weights().get() (quantize writes them).
std::unique_ptr<Model> load_model(const std::string& path,
                                  kernels::WeightType weight_type = kernels::WeightType::kF32,
                                  bool keep_files = false);

}  // namespace tf
