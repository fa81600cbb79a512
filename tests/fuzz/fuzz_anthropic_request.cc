// Fuzz target: Anthropic's Messages and count_tokens bodies (serving/anthropic/
// anthropic_request.h) read into the typed request, then planned as every chat request is
// (messages through a chat template, tools' schemas compiled into the forcing grammar, every
// sampling parameter). Any input must end in a value or an Error, never a crash or a hang.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/json.h"
#include "openai_body_check.h"
#include "serving/anthropic/anthropic_request.h"

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
  for (bool count_only : {false, true}) {
    try {
      const tf::AnthropicRequest a = tf::read_anthropic_request(body, ordered, true, count_only);
      if (!count_only) check_request(a.request);
    } catch (const tf::Error&) {
    }
  }
  return 0;
}
