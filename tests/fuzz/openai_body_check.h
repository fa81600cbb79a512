#pragma once
// What the request fuzz targets (openai_request, grpc_request) run on a typed request read from
// an OpenAI body or a GenerateRequest: the planner (sampling parameters, prompts or chat messages
// through GPT-2's tokenizer and a GPT-2-sized model config). Ends in values that hold (ids in
// the vocabulary, no empty prompt, prompt + max_tokens within the context) or in an Error;
// anything else traps.
#include <nlohmann/json.hpp>

#include <string>

#include "core/error.h"
#include "serving/core/planner.h"
#include "serving/openai/openai_request.h"
#include "tokenizer/tokenizer_loader.h"

inline void check_request(const tf::CompletionRequest& request);

inline void check_openai_body(const nlohmann::json& body, bool chat) {
  try {
    check_request(tf::read_openai_request(body, chat));
  } catch (const tf::Error&) {
  }
}

inline void check_request(const tf::CompletionRequest& request) {
  static const tf::LoadedTokenizer tok =
      tf::load_tokenizer(std::string(TF_SHARED_DIR) + "/tokenizers/gpt2", 50257);
  static const tf::ModelConfig config = [] {
    tf::ModelConfig c;
    c.architecture = "GPT2LMHeadModel";
    c.vocab_size = 50257;
    c.max_seq_len = 1024;
    return c;
  }();
  try {
    const tf::GenerationPlan plan = tf::plan_request(request, tok, config, "fuzz");
    for (const auto& r : plan.requests) {
      if (r.prompt.empty()) __builtin_trap();
      for (int32_t id : r.prompt) {
        if (id < 0 || id >= config.vocab_size) __builtin_trap();
      }
      if (r.prompt.size() + static_cast<size_t>(r.params.max_tokens) >
          static_cast<size_t>(config.max_seq_len))
        __builtin_trap();
    }
  } catch (const tf::Error&) {
  }
}
