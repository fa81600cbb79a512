// Fuzz target: the JSON request parsers of the HTTP API (OpenAI completions and chat bodies:
// prompts, messages through a chat template, every sampling parameter) and TF Serving's model
// paths. Any input must end in a value or an Error, never a crash or a hang.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "serving/openai_request.h"
#include "serving/tfserving_api.h"
#include "tokenizer/tokenizer_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tf::LoadedTokenizer tok =
      tf::load_tokenizer(std::string(TF_SHARED_DIR) + "/tokenizers/gpt2", 50257);
  static const tf::ModelConfig config = [] {
    tf::ModelConfig c;
    c.architecture = "GPT2LMHeadModel";
    c.vocab_size = 50257;
    c.max_seq_len = 1024;
    return c;
  }();
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)tf::parse_model_path(text);
  } catch (const tf::Error&) {
  }
  const nlohmann::json body = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  for (bool chat : {false, true}) {
    try {
      tf::SamplingParams p = tf::parse_sampling_params(body, chat, 16);
      p.validate(config.vocab_size);
      if (chat) {
        auto ids = tf::parse_chat_prompt(body, tok, config);
        for (int32_t id : ids) {
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
  return 0;
}
