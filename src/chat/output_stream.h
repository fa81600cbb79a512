#pragma once
// A chat answer's text as it streams, split the way every door shows it: the reasoning (the
// template's think block), the content, and at the end the tool calls (tools given). Each push
// returns what has settled (a marker cut across pushes is held back until it is whole or
// disowned); the last push (done) flushes what was held and parses the calls. OpenAI's chat
// chunks and Anthropic's content blocks are both rendered from these deltas.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/harmony.h"
#include "chat/reasoning.h"
#include "chat/tool_calls.h"

namespace tf {

class ChatOutputStream {
 public:
  // reasoning: the template writes think blocks (opened: the prompt left one open); tools:
  // the format calls are parsed in and the names they may call (nullopt: no tools).
  // harmony: the output is harmony's channels (chat/harmony.h), reasoning and calls alike
  // (opened: the prompt ended inside the analysis channel).
  ChatOutputStream(bool reasoning, bool opened, std::optional<ToolFormat> tools,
                   std::vector<std::string> names = {}, bool harmony = false);

  struct Delta {
    std::string reasoning, content;
    std::vector<ToolCall> calls;  // set by the last push
  };
  Delta push(std::string_view text, bool done);

 private:
  std::optional<ReasoningStream> reasoning_;
  std::optional<ToolCallStream> tools_;
  std::optional<HarmonyStream> harmony_;
  std::vector<std::string> names_;
};

// How a chat answer is shaped, as the planner decided for the request: whether the template
// writes think blocks (opened: the prompt left one open) and the tools whose calls are parsed
// (nullptr: none); tool_format kHarmony: the answer is harmony's channels, with or without tools.
// Every chat door keeps one and splits its answers with it.
struct ChatAnswerShape {
  bool reasoning = false, opened = false;
  std::shared_ptr<const ToolRequest> tools;
  ToolFormat tool_format = ToolFormat::kJson;

  // A finished answer split: the reasoning (nullopt: none), the content (nullopt: none, as
  // OpenAI's null: calls and no text, or only reasoning), the calls.
  struct Whole {
    std::optional<std::string> reasoning, content;
    std::vector<ToolCall> calls;
  };
  Whole split(std::string_view text) const;
  // The same split as the answer streams.
  ChatOutputStream stream() const;
};

}  // namespace tf
