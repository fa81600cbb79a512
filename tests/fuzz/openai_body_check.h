#pragma once
// What the request fuzz targets (openai_request, grpc_request) run on a parsed OpenAI body: the
// sampling parameters and the prompt (completions or chat, through GPT-2's tokenizer and a
// GPT-2-sized model config). Ends in values that hold (ids in the vocabulary, no empty prompt) or
// in an Error; anything else traps.
#include <nlohmann/json.hpp>

#include <string>

#include "core/error.h"
#include "serving/openai_request.h"
#include "tokenizer/tokenizer_loader.h"

inline void check_openai_body(const nlohmann::json& body, bool chat) {
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
    tf::SamplingParams p = tf::parse_sampling_params(body, chat, 16);
    p.validate(config.vocab_size);
    if (chat) {
      for (int32_t id : tf::parse_chat_prompt(body, tok, config)) {
        if (id < 0 || id >= config.vocab_size) __builtin_trap();
      }
    } else {
      for (const auto& prompt : tf::parse_completion_prompts(body, tok.tokenizer.get())) {
        if (prompt.empty()) __builtin_trap();
      }
    }
  } catch (const tf::Error&) {
  }
}
