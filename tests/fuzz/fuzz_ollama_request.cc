// Fuzz target: Ollama's /api/chat, /api/generate, /api/embed and /api/embeddings bodies
// (serving/ollama/ollama_request.h) read into the typed request, then planned as every chat or
// completion request is (messages through a chat template, options onto the sampling
// parameters, format schemas compiled into grammars), and the name:tag mapping. Any input must
// end in a value or an Error, never a crash or a hang.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/json.h"
#include "openai_body_check.h"
#include "serving/ollama/ollama_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json body;
  try {
    body = tf::parse_json(text, "fuzz");  // as the server reads bodies: nesting bounded
  } catch (const tf::Error&) {
    return 0;
  }
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(text, nullptr, false);
  if (body.is_discarded() || ordered.is_discarded()) return 0;
  for (int door = 0; door < 4; ++door) {
    try {
      if (door == 0) {
        check_request(tf::read_ollama_chat(body, ordered, true).request);
      } else if (door == 1) {
        check_request(tf::read_ollama_generate(body, ordered, true).request);
      } else {
        (void)tf::read_ollama_embed(body, door == 3);
      }
    } catch (const tf::Error&) {
    }
  }
  if (body.is_object() && body.contains("model") && body["model"].is_string())
    (void)tf::ollama_model_field(
        body["model"].get<std::string>(),
        [](const std::string& m, const std::string& l) { return m.size() == l.size(); });
  return 0;
}
