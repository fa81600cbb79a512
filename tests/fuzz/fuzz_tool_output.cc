// Fuzz target: a model's output as the chat API parses it (issue 24) — tool calls in each
// format, whole and streamed in pieces, and think blocks split off, whole and streamed. The
// output is what a prompt can make a model write, so it is untrusted text. Any input must end in
// a value; the streamed split must equal the whole one (else the target traps).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chat/reasoning.h"
#include "chat/tool_calls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  static const std::vector<std::string> names = {"add", "get_weather", "a"};
  const size_t piece = size ? 1 + data[0] % 7 : 1;
  for (tf::ToolFormat f : {tf::ToolFormat::kHermes, tf::ToolFormat::kLlama3Json,
                           tf::ToolFormat::kMistral, tf::ToolFormat::kJson}) {
    const tf::ParsedToolOutput whole = tf::parse_tool_calls(text, f, names);
    tf::ToolCallStream s(f);
    std::string sent;
    for (size_t at = 0; at < text.size(); at += piece) sent += s.push(text.substr(at, piece));
    std::string rest;
    const tf::ParsedToolOutput streamed = s.finish(names, rest);
    if (streamed.calls.size() != whole.calls.size()) __builtin_trap();
    if (whole.calls.empty() && sent + rest != text) __builtin_trap();
  }
  for (bool opened : {false, true}) {
    const tf::ReasoningSplit whole = tf::split_reasoning(text, opened);
    tf::ReasoningStream s(opened);
    std::string reasoning, content;
    for (size_t at = 0; at < text.size(); at += piece) {
      const auto d = s.push(text.substr(at, piece));
      reasoning += d.reasoning;
      content += d.content;
    }
    const auto d = s.finish();
    reasoning += d.reasoning;
    content += d.content;
    if (reasoning != whole.reasoning.value_or("") || content != whole.content) __builtin_trap();
  }
  return 0;
}
