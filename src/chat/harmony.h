#pragma once
// OpenAI's harmony response format (gpt-oss): an assistant turn is a run of messages, each
//   [<|start|>assistant][ to=RECIPIENT]<|channel|>CHANNEL[ to=RECIPIENT][ [<|constrain|>]TYPE]
//   <|message|>BODY then <|end|>, <|call|> (a tool call ends the turn) or <|return|> (the
//   final answer ends it)
// on three channels: "analysis" (the chain of thought: reasoning_content), "commentary" (tool
// calls, to=functions.NAME with the arguments as the body; without a recipient, a preamble the
// user may see) and "final" (the answer). The generation prompt ends with "<|start|>assistant",
// so the output starts at a header. The markers are special tokens: the text parsed here is the
// output decoded with them kept.

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_calls.h"

namespace tf {

struct HarmonyMessage {
  std::string channel;       // "analysis", "commentary", "final", or as written
  std::string recipient;     // "functions.get_weather"; empty when none
  std::string content_type;  // "json" (from "<|constrain|>json" or " json"); empty when none
  std::string body;
  bool complete = false;  // ended by <|end|>, <|call|> or <|return|>
};

// Every message of an assistant turn's output, in order. Text before the first header, and a
// header never closed by <|message|>, are kept as a message of channel "" (their text the body)
// so nothing the model wrote is lost.
std::vector<HarmonyMessage> parse_harmony(std::string_view text);

// The turn split as every chat door shows it: reasoning (analysis bodies, joined by "\n"),
// content (final bodies and commentary without a recipient, in order), tool calls (commentary
// to=functions.NAME whose NAME is in `names`: a JSON body is the arguments; other recipients and
// other names stay content, as written).
struct HarmonySplit {
  std::string reasoning, content;
  bool has_reasoning = false, has_content = false;
  std::vector<ToolCall> calls;
};
HarmonySplit split_harmony(std::string_view text, const std::vector<std::string>& names);

// Grammars (GBNF with harmony's markers as token elements, sampling/grammar.h) that hold a
// harmony answer to a shape, each allowing one analysis message first (the model's thought):
// harmony_call_grammar: one call of one of `names` (its arguments held to the matching schema
// in `parameters`) on the commentary channel, as
//   <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGUMENTS
// (the model's end, <|call|>, ends the turn); harmony_final_grammar: the final channel's body
// held to `gbnf` (a response_format's grammar).
std::string harmony_call_grammar(const std::vector<std::string>& names,
                                 const std::vector<nlohmann::ordered_json>& parameters);
std::string harmony_final_grammar(const std::string& gbnf);

// The same split as the output streams: each push returns the reasoning and content that have
// settled (a marker cut across pushes is held until it is whole); finish() returns the rest and
// the calls.
class HarmonyStream {
 public:
  struct Delta {
    std::string reasoning, content;
  };
  Delta push(std::string_view text);
  HarmonySplit finish(const std::vector<std::string>& names, Delta& rest);

 private:
  std::string all_;
  size_t sent_reasoning_ = 0, sent_content_ = 0;
  Delta settled(bool final);
};

}  // namespace tf
