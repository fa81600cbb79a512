// Fuzz target: the chat template parser and renderer. Arbitrary bytes are parsed as a template
// and rendered against a small conversation under tight limits; only tf::Error may escape, and
// no input may crash, hang or grow without bound.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chat/chat_template.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Hi \u00e9 \ud83d\ude00\nthere  "},
      {"role": "assistant", "content": null,
       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1.5}}}]},
      {"role": "tool", "content": "{\"ok\": true}"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"
  })");
  tf::ChatTemplateLimits limits;
  limits.max_output_bytes = 64 << 10;
  limits.max_steps = 20000;
  limits.max_depth = 200;
  try {
    const tf::ChatTemplate t =
        tf::ChatTemplate::parse(std::string_view(reinterpret_cast<const char*>(data), size));
    const std::string out = t.render(context, limits);
    if (out.size() > limits.max_output_bytes) __builtin_trap();
  } catch (const tf::Error&) {
  }
  return 0;
}
