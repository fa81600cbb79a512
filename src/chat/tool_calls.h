#pragma once
// Tool calling (issue 24), protocol-neutral: the tools a request offers (ToolRequest, read from
// each door's own fields: serving/core/tool_fields.h), the formats models write their calls
// in, told from the chat template (or named by --tool-call-parser); the model's output parsed
// into tool calls, whole or as it streams; and, for a forced choice ("required" or a named
// function), the grammar that keeps the output a call of the tools with arguments valid for
// their parameter schemas.
//
// Formats (what vLLM's parsers of the same names read):
//  - hermes: <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, repeated (Hermes 2/3,
//    Qwen2.5, Qwen3); content is the text before the first call.
//  - llama3_json: {"name": N, "parameters": {...}} as the whole output, optionally after
//    <|python_tag|>, several separated by ';' (Llama 3.1-3.3's JSON tool calling).
//  - mistral: [TOOL_CALLS] followed by [{"name": N, "arguments": {...}}, ...], or the v11 form
//    [TOOL_CALLS]N[ARGS]{...}.
//  - json: the whole output one JSON object {"name", "arguments" | "parameters"}, or a list of
//    them, or {"tool_calls": [...]}: for templates of no known family.
//  - harmony: gpt-oss's channels (chat/harmony.h): commentary messages to=functions.NAME whose
//    body is the arguments; the analysis channel is the reasoning, final the content.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

enum class ToolFormat { kHermes, kLlama3Json, kMistral, kJson, kHarmony };

// The format a parser name means ("hermes", "llama3_json", "mistral", "json", "openai" /
// "harmony"), or nullopt.
std::optional<ToolFormat> tool_format_named(std::string_view name);
const char* tool_format_name(ToolFormat format);
// The format a chat template's source asks for: the markers it writes in its tool instructions.
ToolFormat detect_tool_format(std::string_view template_source);

struct ToolRequest {
  enum Choice { kNone, kAuto, kRequired, kNamed };
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // as sent: the template's
  std::vector<std::string> names;                                  // per tool
  std::vector<nlohmann::ordered_json> parameters;  // per tool: its JSON schema (object)
  Choice choice = kAuto;
  std::string named;  // kNamed: the function
  bool parallel = true;
  // Whether output is parsed for calls: tools were given and tool_choice is not "none".
  bool active() const { return !names.empty() && choice != kNone; }
  // Whether decoding is constrained to calls: "required" or a named function.
  bool forced() const { return !names.empty() && (choice == kRequired || choice == kNamed); }
  bool operator==(const ToolRequest&) const = default;
};

struct ToolCall {
  std::string id;  // "call_..."
  std::string name;
  std::string arguments;  // a JSON object's text
  bool operator==(const ToolCall&) const = default;
};

struct ParsedToolOutput {
  std::optional<std::string> content;  // nullopt: none (OpenAI's null)
  std::vector<ToolCall> calls;
};

// The output split into content and calls. A call is taken only when it is well-formed and names
// one of `names`; otherwise the whole output is content, as written.
ParsedToolOutput parse_tool_calls(std::string_view text, ToolFormat format,
                                  const std::vector<std::string>& names);

// GBNF for tool_choice "required" or a named function: one call (or, with parallel tool calls,
// one or more) in the format, each {"name": N, "arguments": A} with A valid for N's schema.
// The format's special-token markers (<|python_tag|>, [TOOL_CALLS]) are left out: parse_tool_calls
// reads the calls without them. Harmony's calls are headers of special tokens, which its grammar
// holds as token elements (harmony_call_grammar: one call, after the model's thought).
// analysis_open (harmony only): the prompt ended inside the analysis channel.
std::string tool_call_grammar(const ToolRequest& tools, ToolFormat format,
                              bool analysis_open = false);

// Streaming: text is passed on as content until a call may have begun; from there it is held,
// and finish() parses the whole output. push() returns the content safe to send now.
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolFormat format) : format_(format) {}
  std::string push(std::string_view text);
  // The whole output parsed; `rest` gets the content not sent yet (held back text that did not
  // become a call, or what follows the sent part).
  ParsedToolOutput finish(const std::vector<std::string>& names, std::string& rest);

 private:
  ToolFormat format_;
  std::string all_;
  size_t sent_ = 0;
  bool holding_ = false;
};

}  // namespace tf
