#pragma once

#include <string>

#include "engine/engine.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf::cli {

struct BatchOptions {
  std::string input_file, output_file;
  int concurrency = 64;             // requests in flight
  int32_t default_max_tokens = 16;  // when a line gives none (the OpenAI default)
};

// Runs every line of the input file through the engine; see batch.cc.
int run_batch_file(Engine& engine, const LoadedTokenizer& tokenizer, const ModelConfig& config,
                   const BatchOptions& options);

}  // namespace tf::cli
