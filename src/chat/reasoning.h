#pragma once
// Reasoning models (issue 24): the <think>...</think> part of a chat answer (DeepSeek-R1 and
// its distills, Qwen3, QwQ) returned as message.reasoning_content, apart from the content, and
// streamed as its own deltas, as vLLM's deepseek_r1 / qwen3 reasoning parsers return it.
//
// Two starts, told from the rendered prompt:
//  - opened: the template itself ends the prompt with "<think>" (DeepSeek-R1 distills,
//    Qwen3-Thinking-2507): the output is reasoning up to "</think>", all of it if none comes.
//  - may open: the output is reasoning only if it begins with "<think>" (Qwen3, which with
//    enable_thinking false gets an empty think block in the prompt and writes none).

#include <optional>
#include <string>
#include <string_view>

namespace tf {

// The think block's markers.
inline constexpr std::string_view kThinkStart = "<think>", kThinkEnd = "</think>";

struct ReasoningSplit {
  std::optional<std::string> reasoning;  // nullopt: none
  std::string content;
};

// Whether a chat template writes think blocks (its source mentions "<think>").
bool template_reasons(std::string_view template_source);
// Whether a rendered prompt leaves a think block open (it ends with "<think>" and whitespace).
bool prompt_opens_thinking(std::string_view prompt_text);

ReasoningSplit split_reasoning(std::string_view text, bool opened);

// The same split as text streams in: each push returns the new reasoning and content that are
// settled (a marker cut across pushes is held back until it is whole or disowned).
class ReasoningStream {
 public:
  explicit ReasoningStream(bool opened) : state_(opened ? kThinking : kStart) {}
  struct Delta {
    std::string reasoning, content;
  };
  Delta push(std::string_view text);
  Delta finish();  // what was held back

 private:
  enum State { kStart, kThinking, kContent };
  State state_;
  std::string held_;
  bool after_think_ = false;  // content's leading whitespace after "</think>" is dropped
};

}  // namespace tf
