#pragma once
// A model ready to run: its weights, its tokenizer (with chat template and stop ids) and the
// engine that runs its requests (DESIGN.md's ModelInstance). `serve` (one per model version),
// `generate` and `bench` build it the same way: load(), then start_engine() once the engine's
// configuration is known.

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "kernels/weights.h"
#include "model/model.h"
#include "sampling/grammar.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf {

// Every id that ends a sequence: the tokenizer's declared stop ids, the config's EOS and, for
// llama2.c checkpoints, BOS (its run.c ends a story there).
std::vector<int32_t> model_stop_ids(const ModelConfig& config, const LoadedTokenizer& tokenizer);

struct ModelInstance {
  std::unique_ptr<Model> model;
  LoadedTokenizer tokenizer;  // tokenizer.tokenizer is null when the model has none
  std::vector<int32_t> eos_ids;
  std::unique_ptr<Model> draft;    // speculative decoding's draft model (config.speculative_draft)
  std::unique_ptr<Engine> engine;  // null until start_engine()

  virtual ~ModelInstance();  // the engine (its thread) stops before the model goes

  const ModelConfig& config() const { return model->config(); }
  const Tokenizer* tok() const { return tokenizer.tokenizer.get(); }
  // The vocabulary as constrained decoding matches it (token bytes and their trie), built on
  // first use and kept; nullptr when the model has no tokenizer.
  std::shared_ptr<const GrammarVocab> grammar_vocab() const;

  // Loads path's weights as weight_type, its tokenizer (explicit_tokenizer when given) and its
  // stop ids. Throws Error naming what is wrong.
  void load(const std::string& path, const std::string& explicit_tokenizer = "",
            kernels::WeightType weight_type = kernels::WeightType::kF32);
  // Starts the engine (loading config.speculative_draft's model first: its vocabulary, and its
  // tokenizer's tokens where it has one, must be the model's). ids_only: without the tokenizer
  // and the stop ids, so that sequences are token ids that end only at max_tokens (benchmarks
  // with fixed output lengths).
  void start_engine(const EngineConfig& config, bool ids_only = false);

 private:
  std::string weights_id_;  // the weights' path and type (load)
  mutable std::once_flag grammar_vocab_once_;
  mutable std::shared_ptr<const GrammarVocab> grammar_vocab_;
};

}  // namespace tf
