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

#include <optional>

#include "chat/tool_calls.h"

namespace tf {

// The analysis channel's markers: what opens it (a prompt may end with it: the answer then
// starts inside the thought), the model's own close, and the close a thinking budget forces
// (the thought ended and the final answer's header written).
constexpr std::string_view kHarmonyAnalysisOpen = "<|channel|>analysis<|message|>";
constexpr std::string_view kHarmonyAnalysisClose = "<|end|>";
constexpr std::string_view kHarmonyToFinal = "<|end|><|start|>assistant<|channel|>final<|message|>";

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

// The turn split as every chat door shows it (analysis_open: the prompt ended inside the
// analysis channel, so the text starts in the thought): reasoning (analysis bodies, joined by
// "\n"), content (final bodies and commentary without a recipient, in order), tool calls
// (commentary to=functions.NAME whose NAME is in `names`: a JSON body is the arguments; other
// recipients and other names stay content, as written).
struct HarmonySplit {
  std::string reasoning, content;
  bool has_reasoning = false, has_content = false;
  std::vector<ToolCall> calls;
};
HarmonySplit split_harmony(std::string_view text, const std::vector<std::string>& names,
                           bool analysis_open = false);

// Grammars (GBNF with harmony's markers as token elements, sampling/grammar.h) that hold a
// harmony answer to a shape, each allowing one analysis message first (the model's thought):
// harmony_call_grammar: one call of one of `names` (its arguments held to the matching schema
// in `parameters`) on the commentary channel, as
//   <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGUMENTS
// (the model's end, <|call|>, ends the turn); harmony_final_grammar: the final channel's body
// held to `gbnf` (a response_format's grammar).
// analysis_open: the prompt ended inside the analysis channel (kHarmonyAnalysisOpen): the
// output is the rest of that thought first, then the constrained message.
std::string harmony_call_grammar(const std::vector<std::string>& names,
                                 const std::vector<nlohmann::ordered_json>& parameters,
                                 bool analysis_open = false);
std::string harmony_final_grammar(const std::string& gbnf, bool analysis_open = false);

// The same split as the output streams: each push returns the reasoning and content that have
// settled (a marker cut across pushes is held until it is whole); finish() returns the rest and
// the calls. Linear in the output: settled messages are kept split, and the message being
// written is searched for its end only in what arrived since the last push.
class HarmonyStream {
 public:
  // analysis_open: the prompt ended inside the analysis channel (the output starts in it).
  explicit HarmonyStream(bool analysis_open = false);
  struct Delta {
    std::string reasoning, content;
  };
  Delta push(std::string_view text);
  HarmonySplit finish(const std::vector<std::string>& names, Delta& rest);

 private:
  std::string all_;    // the output so far (after the opened thought's marker)
  size_t parsed_ = 0;  // all_ before it is settled messages, split into done_
  HarmonySplit done_;
  // The message being written (its header read, or text before any header: stray_): where its
  // body starts in all_ and how far it was searched for its end.
  std::optional<HarmonyMessage> open_;
  bool stray_ = false;
  size_t body_from_ = 0, searched_ = 0;
  size_t sent_reasoning_ = 0, sent_content_ = 0;
  Delta settled(bool final);
};

}  // namespace tf
