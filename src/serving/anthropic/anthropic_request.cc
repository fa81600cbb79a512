#include "serving/anthropic/anthropic_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

#include "sampling/json_schema.h"
#include "serving/core/api_common.h"
#include "serving/core/request_fields.h"

namespace tf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

const std::unordered_set<std::string> kFields = {
    "model",    "max_tokens",   "messages",  "system",     "stop_sequences", "temperature",
    "top_p",    "top_k",        "metadata",  "stream",     "tools",          "tool_choice",
    "thinking", "service_tier", "container", "mcp_servers"};
const std::unordered_set<std::string> kCountFields = {
    "model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers"};

[[noreturn]] void bad(const std::string& field, const std::string& message) {
  throw HttpError(400, message, "", field);
}

// A content that is a string or a list of text blocks, as one string.
std::string text_of(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    bad(where, fmt::format("{} must be a string or a list of blocks", where));
  std::string out;
  for (const auto& b : content) {
    if (!b.is_object() || b.value("type", "") != "text" || !b.contains("text") ||
        !b["text"].is_string())
      bad(where, fmt::format("{} may hold only text blocks ({{\"type\": \"text\", \"text\": ...}})",
                             where));
    out += b["text"].get<std::string>();
  }
  return out;
}

void read_messages(const json& body, CompletionRequest& r) {
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
    bad("messages", "'messages' must be a non-empty list");
  const json& msgs = body["messages"];
  if (msgs.size() > kMaxMessages)
    bad("messages", fmt::format("'messages' holds more than {} messages", kMaxMessages));
  if (present(body, "system")) r.messages.push_back({"system", text_of(body["system"], "system")});
  for (size_t i = 0; i < msgs.size(); ++i) {
    const json& m = msgs[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad("messages", fmt::format("{} must be an object with a 'role'", where));
    const std::string role = m["role"].get<std::string>();
    if (role != "user" && role != "assistant")
      bad("messages",
          fmt::format("{}.role must be \"user\" or \"assistant\", not \"{}\"", where, role));
    if (!m.contains("content")) bad("messages", fmt::format("{}.content is required", where));
    const json& content = m["content"];
    if (content.is_string()) {
      r.messages.push_back({role, content.get<std::string>()});
      continue;
    }
    if (!content.is_array())
      bad("messages", fmt::format("{}.content must be a string or a list of blocks", where));
    ChatMessage msg(role, "");
    ojson calls = ojson::array();
    std::vector<ChatMessage> results;  // tool_result blocks: tool messages, in order
    for (size_t k = 0; k < content.size(); ++k) {
      const json& b = content[k];
      const std::string bw = fmt::format("{}.content[{}]", where, k);
      if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
        bad("messages", fmt::format("{} must be a block with a 'type'", bw));
      const std::string type = b["type"].get<std::string>();
      if (type == "text") {
        if (!b.contains("text") || !b["text"].is_string())
          bad("messages", fmt::format("{}.text must be a string", bw));
        msg.content += b["text"].get<std::string>();
      } else if (type == "tool_use" && role == "assistant") {
        if (!b.contains("id") || !b["id"].is_string() || !b.contains("name") ||
            !b["name"].is_string() || !b.contains("input") || !b["input"].is_object())
          bad("messages", fmt::format("{}: a tool_use block needs 'id', 'name' and an 'input' "
                                      "object",
                                      bw));
        calls.push_back({{"id", b["id"]},
                         {"type", "function"},
                         {"function", {{"name", b["name"]}, {"arguments", ojson(b["input"])}}}});
      } else if (type == "tool_result" && role == "user") {
        if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
          bad("messages", fmt::format("{}.tool_use_id must be a string", bw));
        ChatMessage t("tool", b.contains("content") ? text_of(b["content"], "messages") : "");
        if (b.value("is_error", false) == true) t.content = "Error: " + t.content;
        t.tool_call_id = b["tool_use_id"].get<std::string>();
        results.push_back(std::move(t));
      } else if ((type == "thinking" || type == "redacted_thinking") && role == "assistant") {
        // Earlier turns' thinking is not part of the context (as Anthropic's API drops it).
      } else {
        bad("messages",
            fmt::format("{}: '{}' blocks are not supported in {} turns (text, tool_use in "
                        "assistant turns, tool_result in user turns)",
                        bw, type, role));
      }
    }
    for (auto& t : results) r.messages.push_back(std::move(t));
    if (!calls.empty()) msg.tool_calls = std::move(calls);
    if (!msg.content.empty() || !msg.tool_calls.is_null() || results.empty())
      r.messages.push_back(std::move(msg));
  }
}

void read_tools(const json& body, const ojson& ordered, CompletionRequest& r) {
  ToolRequest& t = r.tools;
  if (present(body, "tools")) {
    const json& tools = body["tools"];
    if (!tools.is_array()) bad("tools", "'tools' must be a list");
    if (tools.size() > 1024) bad("tools", "'tools' holds more than 1024 tools");
    for (size_t i = 0; i < tools.size(); ++i) {
      const json& tool = tools[i];
      const std::string where = fmt::format("tools[{}]", i);
      if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string() ||
          tool["name"].get<std::string>().empty())
        bad("tools", fmt::format("{}: each tool needs a non-empty 'name'", where));
      if (tool.contains("type") && tool["type"] != "custom")
        bad("tools", fmt::format("{}: only client tools with an input_schema are supported, not "
                                 "'{}'",
                                 where, tool["type"].dump()));
      const std::string name = tool["name"].get<std::string>();
      if (std::find(t.names.begin(), t.names.end(), name) != t.names.end())
        bad("tools", fmt::format("{}: two tools are named '{}'", where, name));
      if (!tool.contains("input_schema") || !tool["input_schema"].is_object())
        bad("tools", fmt::format("{}: 'input_schema' must be a JSON schema object", where));
      if (tool.contains("description") && !tool["description"].is_string())
        bad("tools", fmt::format("{}: 'description' must be a string", where));
      const ojson schema = ordered["tools"][i]["input_schema"];
      try {
        (void)json_schema_to_gbnf(schema);
      } catch (const Error& e) {
        bad("tools", fmt::format("{}: 'input_schema': {}", where, e.what()));
      }
      ojson fn = {{"name", name}};
      if (tool.contains("description")) fn["description"] = tool["description"];
      fn["parameters"] = schema;
      t.tools.push_back({{"type", "function"}, {"function", fn}});
      t.names.push_back(name);
      t.parameters.push_back(schema);
    }
  }
  if (present(body, "tool_choice")) {
    const json& c = body["tool_choice"];
    if (!c.is_object() || !c.contains("type") || !c["type"].is_string())
      bad("tool_choice", "'tool_choice' must be an object with a 'type'");
    const std::string type = c["type"].get<std::string>();
    if (type == "auto") {
      t.choice = ToolRequest::kAuto;
    } else if (type == "any") {
      t.choice = ToolRequest::kRequired;
    } else if (type == "none") {
      t.choice = ToolRequest::kNone;
    } else if (type == "tool") {
      if (!c.contains("name") || !c["name"].is_string())
        bad("tool_choice", "'tool_choice' of type \"tool\" needs a 'name'");
      t.choice = ToolRequest::kNamed;
      t.named = c["name"].get<std::string>();
      if (std::find(t.names.begin(), t.names.end(), t.named) == t.names.end())
        bad("tool_choice",
            fmt::format("'tool_choice' names '{}', which is not in 'tools'", t.named));
    } else {
      bad("tool_choice", fmt::format("'tool_choice.type' must be auto, any, tool or none, not "
                                     "\"{}\"",
                                     type));
    }
    if (c.contains("disable_parallel_tool_use")) {
      if (!c["disable_parallel_tool_use"].is_boolean())
        bad("tool_choice", "'tool_choice.disable_parallel_tool_use' must be a boolean");
      t.parallel = !c["disable_parallel_tool_use"].get<bool>();
    }
    if ((t.choice == ToolRequest::kRequired || t.choice == ToolRequest::kNamed) && t.names.empty())
      bad("tool_choice", "'tool_choice' asks for a tool call but no 'tools' are given");
  }
}

// A number at most hi; its lower bound is the sampling parameters' own check (the planner's,
// with the message every door gives).
double number(const json& body, const char* key, double hi) {
  const json& v = body[key];
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    bad(key, fmt::format("'{}' must be a number", key));
  if (v.get<double>() > hi) bad(key, fmt::format("'{}' must be at most {}", key, hi));
  return v.get<double>();
}

}  // namespace

AnthropicRequest read_anthropic_request(const json& body, const ojson& ordered, bool log_prompt,
                                        bool count_only) {
  check_known_fields(body, [&](const std::string& k) {
    return count_only ? kCountFields.count(k) > 0 : kFields.count(k) > 0;
  });
  AnthropicRequest a;
  CompletionRequest& r = a.request;
  r.chat = true;
  r.model = string_field(body, "model");
  if (!present(body, "model")) bad("model", "'model' is required");
  read_messages(body, r);
  read_tools(body, ordered, r);
  if (present(body, "thinking")) {
    const json& th = body["thinking"];
    if (!th.is_object() || !th.contains("type") || !th["type"].is_string())
      bad("thinking",
          "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or "
          "{\"type\": \"disabled\"}");
    const std::string type = th["type"].get<std::string>();
    if (type == "enabled") {
      const json& b = th.value("budget_tokens", json());
      if (!b.is_number_integer() || b.get<int64_t>() < 1 || b.get<int64_t>() > INT32_MAX)
        bad("thinking", "'thinking.budget_tokens' must be a positive integer");
      a.thinking_budget = static_cast<int32_t>(b.get<int64_t>());
      r.thinking_budget = a.thinking_budget;
      r.chat_template_kwargs["enable_thinking"] = true;
    } else if (type == "disabled") {
      r.chat_template_kwargs["enable_thinking"] = false;
    } else {
      bad("thinking", fmt::format("'thinking.type' must be \"enabled\" or \"disabled\", not "
                                  "\"{}\"",
                                  type));
    }
  }
  if (log_prompt) r.logged_prompt = dump_json(body["messages"]);
  if (count_only) return a;

  SamplingParams& p = r.params;
  if (!present(body, "max_tokens")) bad("max_tokens", "'max_tokens' is required");
  const json& mt = body["max_tokens"];
  if (!mt.is_number_integer() || mt.get<int64_t>() < 1 || mt.get<int64_t>() > INT32_MAX)
    bad("max_tokens", "'max_tokens' must be a positive integer");
  p.max_tokens = static_cast<int32_t>(mt.get<int64_t>());
  r.max_tokens_given = true;
  if (a.thinking_budget && *a.thinking_budget >= p.max_tokens)
    bad("thinking", "'thinking.budget_tokens' must be less than 'max_tokens'");
  if (present(body, "temperature"))
    p.temperature = static_cast<float>(number(body, "temperature", 2));
  if (present(body, "top_p")) p.top_p = static_cast<float>(number(body, "top_p", 1e9));
  if (present(body, "top_k")) {
    const json& k = body["top_k"];
    if (!k.is_number_integer() || k.get<int64_t>() < INT32_MIN || k.get<int64_t>() > INT32_MAX)
      bad("top_k", "'top_k' must be an integer");
    p.top_k = static_cast<int32_t>(k.get<int64_t>());
  }
  if (present(body, "stop_sequences")) {
    const json& s = body["stop_sequences"];
    if (!s.is_array()) bad("stop_sequences", "'stop_sequences' must be a list of strings");
    for (const auto& x : s) {
      if (!x.is_string() || x.get<std::string>().empty())
        bad("stop_sequences", "'stop_sequences' must be a list of non-empty strings");
      p.stop.push_back(x.get<std::string>());
    }
  }
  if (present(body, "metadata")) {
    const json& md = body["metadata"];
    if (!md.is_object()) bad("metadata", "'metadata' must be an object");
    if (md.contains("user_id") && !md["user_id"].is_null()) {
      if (!md["user_id"].is_string()) bad("metadata", "'metadata.user_id' must be a string");
      r.user = md["user_id"].get<std::string>();
    }
  }
  r.stream = bool_field(body, "stream", false);
  try {
    apply_request_rules(r, false);
  } catch (const FieldError& e) {
    bad(e.field() == "stop" ? "stop_sequences" : e.field(), e.what());
  }
  if (r.tools.forced() && r.output.kind != OutputConstraint::kNone)
    bad("tool_choice", "'tool_choice' forces a tool call and another output shape is asked for");
  return a;
}

}  // namespace tf
