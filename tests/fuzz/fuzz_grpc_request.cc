// Fuzz target: the gRPC API's request messages. Any bytes parsed as a GenerateRequest go through
// the conversion to the OpenAI body and the REST parsers behind it (sampling parameters,
// prompts, chat messages through a chat template); as a ReloadConfigRequest, through the model
// config's validation. Any input must end in a value or an Error, never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "core/error.h"
#include "serving/grpc_generation.h"
#include "serving/openai_request.h"
#include "serving/server_config.h"
#include "tensorflow_serving/apis/model_management.pb.h"
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
  // Invalid UTF-8 in string fields is refused by the parser, with a log line per input.
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  tokenflow::v1::GenerateRequest req;
  if (req.ParseFromArray(data, static_cast<int>(size))) {
    for (bool stream : {false, true}) {
      try {
        bool chat = false;
        const nlohmann::json body = tf::openai_body_of(req, stream, chat);
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
  }
  tensorflow::serving::ReloadConfigRequest reload;
  if (reload.ParseFromArray(data, static_cast<int>(size))) {
    try {
      tf::validate_model_server_config(reload.config());
      (void)tf::model_entries(reload.config());
    } catch (const tf::Error&) {
    }
  }
  return 0;
}
