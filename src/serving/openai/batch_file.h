#pragma once
// OpenAI's batch files offline (`tokenflow generate --input-file IN.jsonl --output-file
// OUT.jsonl`): the OpenAI door with a file instead of a socket. Each line is read by the OpenAI
// reader and planned by the same planner as the HTTP API's, run on an engine, and answered as the
// API answers (openai_render.h) in the batch output's shape. The CLI's one way into the OpenAI
// protocol folder.

#include <string>

#include "engine/engine.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf {

struct BatchOptions {
  std::string input_file, output_file;
  int concurrency = 64;             // requests in flight
  int32_t default_max_tokens = 16;  // when a line gives none (the OpenAI default)
};

// Runs every line of the input file through the engine (see batch_file.cc); returns the
// process's exit status.
int run_batch_file(Engine& engine, const LoadedTokenizer& tokenizer, const ModelConfig& config,
                   const BatchOptions& options);

}  // namespace tf
