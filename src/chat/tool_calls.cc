#include "chat/tool_calls.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <utility>

#include "chat/harmony.h"
#include "chat/text_trim.h"
#include "core/error.h"
#include "core/random_id.h"
#include "sampling/json_schema.h"

namespace tf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralTag = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";

bool known(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// One call from a parsed JSON object: {"name": N, "arguments" | "parameters": object or a string
// holding one}. nullopt when it is not one, or names no tool.
std::optional<ToolCall> call_from(const ojson& v, const std::vector<std::string>& names) {
  if (!v.is_object() || !v.contains("name") || !v["name"].is_string()) return std::nullopt;
  const std::string name = v["name"].get<std::string>();
  if (!known(names, name)) return std::nullopt;
  ojson args = ojson::object();
  for (const char* k : {"arguments", "parameters"}) {
    if (!v.contains(k)) continue;
    args = v[k];
    if (args.is_string()) {
      args = ojson::parse(args.get<std::string>(), nullptr, false);
      if (args.is_discarded()) return std::nullopt;
    }
    break;
  }
  if (!args.is_object()) return std::nullopt;
  return ToolCall{random_id("call_"), name, args.dump()};
}

// Calls from JSON text holding one call object or a list of them.
std::optional<std::vector<ToolCall>> calls_from_json(std::string_view text,
                                                     const std::vector<std::string>& names) {
  const ojson v = ojson::parse(trim(text), nullptr, false);
  if (v.is_discarded()) return std::nullopt;
  std::vector<ToolCall> calls;
  const ojson* list = &v;
  if (v.is_object() && v.contains("tool_calls")) list = &v["tool_calls"];
  if (list->is_array()) {
    if (list->empty()) return std::nullopt;
    for (const auto& item : *list) {
      // {"type": "function", "function": {...}} as OpenAI writes them, or the call itself.
      const ojson& fn = item.is_object() && item.contains("function") ? item["function"] : item;
      auto c = call_from(fn, names);
      if (!c) return std::nullopt;
      calls.push_back(std::move(*c));
    }
    return calls;
  }
  auto c = call_from(*list, names);
  if (!c) return std::nullopt;
  calls.push_back(std::move(*c));
  return calls;
}

// The content before a call: as written, less the whitespace that parts it from the call;
// none (null) when there is nothing else.
std::optional<std::string> content_of(std::string_view text) {
  if (trim(text).empty()) return std::nullopt;
  return std::string(rtrim(text));
}

ParsedToolOutput as_content(std::string_view text) {
  ParsedToolOutput out;
  if (!text.empty()) out.content = std::string(text);
  return out;
}

ParsedToolOutput parse_hermes(std::string_view text, const std::vector<std::string>& names) {
  const size_t first = text.find(kHermesOpen);
  if (first == std::string_view::npos) return as_content(text);
  ParsedToolOutput out;
  size_t at = first;
  while (at != std::string_view::npos) {
    const size_t body = at + kHermesOpen.size();
    size_t end = text.find(kHermesClose, body);
    std::string_view inner =
        text.substr(body, end == std::string_view::npos ? std::string_view::npos : end - body);
    if (end == std::string_view::npos) {
      // The output was cut off (max_tokens) after the call but inside its closing marker: what
      // is there of "</tool_call>" is not part of the call (vLLM's hermes parser reads it so).
      while (!inner.empty() && std::isspace(static_cast<unsigned char>(inner.back())))
        inner.remove_suffix(1);
      for (size_t k = std::min(inner.size(), kHermesClose.size() - 1); k > 0; --k) {
        if (inner.substr(inner.size() - k) == kHermesClose.substr(0, k)) {
          inner.remove_suffix(k);
          break;
        }
      }
    }
    auto calls = calls_from_json(inner, names);
    if (!calls) {
      // A call cut off before it was whole: the calls complete before it stand (a forced
      // choice's answer cut by max_tokens keeps them); with none, the text is content.
      if (end == std::string_view::npos && !out.calls.empty()) break;
      return as_content(text);
    }
    for (auto& c : *calls) out.calls.push_back(std::move(c));
    if (end == std::string_view::npos) break;
    at = text.find(kHermesOpen, end + kHermesClose.size());
  }
  out.content = content_of(text.substr(0, first));
  return out;
}

// Where the JSON object or list at the start of s ends (one past its closing bracket), or npos
// when s does not start with one or it is not closed.
size_t json_value_end(std::string_view s) {
  if (s.empty() || (s.front() != '{' && s.front() != '[')) return std::string_view::npos;
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// A list of calls cut off before its end (max_tokens): the calls complete before the cut, when
// there is at least one and each is a call of the tools; nullopt otherwise. (A forced choice's
// answer cut short keeps the calls it finished, as vLLM's parsers do.)
std::optional<std::vector<ToolCall>> calls_of_cut_list(std::string_view text,
                                                       const std::vector<std::string>& names) {
  std::string_view t = trim(text);
  if (t.empty() || t.front() != '[') return std::nullopt;
  size_t pos = 1;
  auto skip = [&] {
    while (pos < t.size() && std::isspace(static_cast<unsigned char>(t[pos]))) ++pos;
  };
  std::vector<ToolCall> calls;
  for (skip(); pos < t.size() && t[pos] == '{';) {
    const size_t len = json_value_end(t.substr(pos));
    if (len == std::string_view::npos) break;  // the cut
    const ojson v = ojson::parse(t.substr(pos, len), nullptr, false);
    auto c = v.is_discarded() ? std::nullopt : call_from(v, names);
    if (!c) return std::nullopt;
    calls.push_back(std::move(*c));
    pos += len;
    skip();
    if (pos < t.size() && t[pos] == ',') {
      ++pos;
      skip();
    }
  }
  if (calls.empty() || pos >= t.size() || t[pos] == ']') return std::nullopt;  // not a cut list
  return calls;
}

ParsedToolOutput parse_llama3(std::string_view text, const std::vector<std::string>& names) {
  std::string_view body = trim(text);
  if (body.substr(0, kPythonTag.size()) == kPythonTag) body = trim(body.substr(kPythonTag.size()));
  if (body.empty() || (body.front() != '{' && body.front() != '[')) return as_content(text);
  if (auto calls = calls_from_json(body, names)) return {std::nullopt, std::move(*calls)};
  // Several calls separated by ';': each a JSON object or list, found by its brackets (a ';'
  // inside a string is text), in one pass.
  ParsedToolOutput out;
  std::string_view rest = body;
  while (true) {
    const size_t end = json_value_end(rest);
    if (end == std::string_view::npos) return as_content(text);
    auto calls = calls_from_json(rest.substr(0, end), names);
    if (!calls) return as_content(text);
    for (auto& c : *calls) out.calls.push_back(std::move(c));
    rest = trim(rest.substr(end));
    if (rest.empty()) break;
    if (rest.front() != ';') return as_content(text);
    rest = trim(rest.substr(1));
  }
  return out;
}

ParsedToolOutput parse_mistral(std::string_view text, const std::vector<std::string>& names) {
  const size_t tag = text.find(kMistralTag);
  std::string_view body;
  std::optional<std::string> content;
  if (tag == std::string_view::npos) {
    // A constrained output (the marker is a special token a grammar cannot spell): the list
    // alone.
    const std::string_view t = trim(text);
    if (t.empty() || t.front() != '[') return as_content(text);
    body = t;
  } else {
    content = content_of(text.substr(0, tag));
    body = trim(text.substr(tag + kMistralTag.size()));
  }
  if (auto calls = calls_from_json(body, names)) return {content, std::move(*calls)};
  if (auto calls = calls_of_cut_list(body, names)) return {content, std::move(*calls)};
  // v11: N[ARGS]{...}, possibly repeated after further [TOOL_CALLS] markers.
  ParsedToolOutput out;
  out.content = content;
  std::string_view rest = body;
  while (!rest.empty()) {
    const size_t args = rest.find(kMistralArgs);
    if (args == std::string_view::npos) return as_content(text);
    const std::string name(trim(rest.substr(0, args)));
    rest = rest.substr(args + kMistralArgs.size());
    const size_t next = rest.find(kMistralTag);
    const std::string_view a = rest.substr(0, next);
    ojson call = {{"name", name}, {"arguments", ojson::parse(trim(a), nullptr, false)}};
    if (call["arguments"].is_discarded()) return as_content(text);
    auto c = call_from(call, names);
    if (!c) return as_content(text);
    out.calls.push_back(std::move(*c));
    rest = next == std::string_view::npos ? std::string_view()
                                          : rest.substr(next + kMistralTag.size());
  }
  if (out.calls.empty()) return as_content(text);
  return out;
}

// Where text may hold the start of a call, for streaming: the offset from which it is held
// back, and whether a call has surely begun there (a whole marker, or - for the formats whose
// call is the whole output - JSON at the start). at_start: nothing was sent yet.
// from: where to look for a marker (text before it was searched already and sent).
std::pair<size_t, bool> hold_from(std::string_view text, ToolFormat format, bool at_start,
                                  size_t from) {
  const std::string_view marker = format == ToolFormat::kHermes    ? kHermesOpen
                                  : format == ToolFormat::kMistral ? kMistralTag
                                                                   : kPythonTag;
  if (const size_t at = text.find(marker, from); at != std::string_view::npos) return {at, true};
  if (format != ToolFormat::kHermes && at_start) {
    const std::string_view t = trim(text);
    if (t.empty()) return {0, false};  // only whitespace yet: a call may still begin
    if (t.front() == '{' || t.front() == '[') return {0, true};
  }
  // A suffix of text that begins the marker: held until more text settles it.
  for (size_t k = std::min(marker.size() - 1, text.size()); k > 0; --k)
    if (text.substr(text.size() - k) == marker.substr(0, k)) return {text.size() - k, false};
  return {text.size(), false};
}

}  // namespace

std::optional<ToolFormat> tool_format_named(std::string_view name) {
  if (name == "hermes" || name == "qwen" || name == "qwen3") return ToolFormat::kHermes;
  if (name == "llama3_json" || name == "llama3" || name == "llama4_json")
    return ToolFormat::kLlama3Json;
  if (name == "mistral") return ToolFormat::kMistral;
  if (name == "json" || name == "generic") return ToolFormat::kJson;
  if (name == "openai" || name == "harmony" || name == "gpt-oss") return ToolFormat::kHarmony;
  return std::nullopt;
}

const char* tool_format_name(ToolFormat format) {
  switch (format) {
    case ToolFormat::kHermes:
      return "hermes";
    case ToolFormat::kLlama3Json:
      return "llama3_json";
    case ToolFormat::kMistral:
      return "mistral";
    case ToolFormat::kJson:
      return "json";
    case ToolFormat::kHarmony:
      return "openai";
  }
  return "json";
}

ToolFormat detect_tool_format(std::string_view source) {
  if (source.find("<|channel|>") != std::string_view::npos) return ToolFormat::kHarmony;
  if (source.find(kHermesOpen) != std::string_view::npos) return ToolFormat::kHermes;
  if (source.find(kMistralTag) != std::string_view::npos) return ToolFormat::kMistral;
  if (source.find(kPythonTag) != std::string_view::npos ||
      source.find("ipython") != std::string_view::npos)
    return ToolFormat::kLlama3Json;
  return ToolFormat::kJson;
}

ParsedToolOutput parse_tool_calls(std::string_view text, ToolFormat format,
                                  const std::vector<std::string>& names) {
  ParsedToolOutput out;
  switch (format) {
    case ToolFormat::kHermes:
      out = parse_hermes(text, names);
      break;
    case ToolFormat::kLlama3Json:
      out = parse_llama3(text, names);
      break;
    case ToolFormat::kMistral:
      out = parse_mistral(text, names);
      break;
    case ToolFormat::kJson:
      if (auto calls = calls_from_json(text, names))
        out.calls = std::move(*calls);
      else if (auto cut = calls_of_cut_list(text, names))
        out.calls = std::move(*cut);
      else
        out = as_content(text);
      break;
    case ToolFormat::kHarmony: {
      HarmonySplit h = split_harmony(text, names);
      if (h.has_content) out.content = std::move(h.content);
      out.calls = std::move(h.calls);
      break;
    }
  }
  return out;
}

std::string tool_call_grammar(const ToolRequest& tools, ToolFormat format, bool analysis_open) {
  if (format == ToolFormat::kHarmony) {  // a call is a message header of special tokens
    std::vector<std::string> names;
    std::vector<ojson> parameters;
    for (size_t i = 0; i < tools.names.size(); ++i) {
      if (tools.choice == ToolRequest::kNamed && tools.names[i] != tools.named) continue;
      names.push_back(tools.names[i]);
      parameters.push_back(tools.parameters[i]);
    }
    return harmony_call_grammar(names, parameters, analysis_open);
  }
  // One schema for a call object: {"name": const, "arguments": the tool's parameters}, as a
  // choice over the tools (or the named one alone).
  const char* args_key = format == ToolFormat::kLlama3Json ? "parameters" : "arguments";
  ojson alternatives = ojson::array();
  for (size_t i = 0; i < tools.names.size(); ++i) {
    if (tools.choice == ToolRequest::kNamed && tools.names[i] != tools.named) continue;
    alternatives.push_back(ojson{
        {"type", "object"},
        {"properties", {{"name", {{"const", tools.names[i]}}}, {args_key, tools.parameters[i]}}},
        {"required", {"name", args_key}},
        {"additionalProperties", false}});
  }
  if (alternatives.empty()) fail("tool_call_grammar: no tool to call");
  const ojson schema =
      alternatives.size() == 1 ? alternatives[0] : ojson{{"anyOf", std::move(alternatives)}};
  std::string gbnf = json_schema_to_gbnf(schema);
  // The schema's grammar becomes one call; root is rewritten around it.
  const std::string root = "root ::= ";
  if (gbnf.rfind(root, 0) != 0) fail("tool_call_grammar: unexpected schema grammar");
  gbnf = "tool-call-json ::= " + gbnf.substr(root.size());
  std::string top;
  switch (format) {
    case ToolFormat::kHermes:
      top = "root ::= tool-call";
      if (tools.parallel) top += " (\"\\n\" tool-call)*";
      top += "\ntool-call ::= \"<tool_call>\\n\" tool-call-json \"\\n</tool_call>\"\n";
      break;
    case ToolFormat::kLlama3Json:
      top = "root ::= tool-call-json";
      if (tools.parallel) top += " (\"; \" tool-call-json)*";
      top += "\n";
      break;
    case ToolFormat::kMistral:
    case ToolFormat::kJson:
      top = tools.parallel ? "root ::= \"[\" tool-call-json (\",\" tool-call-json)* \"]\"\n"
                           : "root ::= \"[\" tool-call-json \"]\"\n";
      break;
    case ToolFormat::kHarmony:  // above
      break;
  }
  return top + gbnf;
}

std::string ToolCallStream::push(std::string_view text) {
  all_ += text;
  if (holding_) return "";
  const auto [hold, begun] = hold_from(all_, format_, sent_ == 0, sent_);
  holding_ = begun;
  const size_t upto = std::max(sent_, hold);
  std::string out = all_.substr(sent_, upto - sent_);
  sent_ = upto;
  return out;
}

ParsedToolOutput ToolCallStream::finish(const std::vector<std::string>& names, std::string& rest) {
  ParsedToolOutput parsed = parse_tool_calls(all_, format_, names);
  rest.clear();
  if (parsed.calls.empty()) {
    rest = all_.substr(sent_);  // nothing became a call: what was held is content after all
    return parsed;
  }
  const std::string content = parsed.content.value_or("");
  if (content.size() > sent_ && content.compare(0, sent_, all_, 0, sent_) == 0)
    rest = content.substr(sent_);
  return parsed;
}

}  // namespace tf
