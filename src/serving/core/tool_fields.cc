#include "serving/core/tool_fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "sampling/json_schema.h"
#include "serving/core/api_common.h"

namespace tf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

[[noreturn]] void bad_tool(const char* field, const std::string& message) {
  throw HttpError(400, message, "", field);
}

bool known_tool(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

ToolRequest read_tool_request(const json& body, const ojson& ordered) {
  ToolRequest r;
  if (present(body, "tools")) {
    const json& tools = body["tools"];
    if (!tools.is_array()) bad_tool("tools", "'tools' must be a list");
    if (tools.size() > 1024) bad_tool("tools", "'tools' holds more than 1024 tools");
    for (size_t i = 0; i < tools.size(); ++i) {
      const json& t = tools[i];
      const std::string where = fmt::format("tools[{}]", i);
      if (!t.is_object() || !t.contains("type") || t["type"] != "function")
        bad_tool("tools",
                 fmt::format("{}: each tool must be {{\"type\": \"function\", \"function\": "
                             "{{...}}}}: only function tools are supported",
                             where));
      if (!t.contains("function") || !t["function"].is_object())
        bad_tool("tools", fmt::format("{}: 'function' must be an object", where));
      const json& fn = t["function"];
      if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty())
        bad_tool("tools", fmt::format("{}: 'function.name' must be a non-empty string", where));
      const std::string name = fn["name"].get<std::string>();
      if (known_tool(r.names, name))
        bad_tool("tools", fmt::format("{}: two tools are named '{}'", where, name));
      if (present(fn, "description") && !fn["description"].is_string())
        bad_tool("tools", fmt::format("{}: 'function.description' must be a string", where));
      ojson params = ojson{{"type", "object"}};
      if (present(fn, "parameters")) {
        if (!fn["parameters"].is_object())
          bad_tool("tools",
                   fmt::format("{}: 'function.parameters' must be a JSON schema object", where));
        params = ordered["tools"][i]["function"]["parameters"];
      }
      // The schema must compile: a bad one is the request's error now, not a failed call later.
      try {
        (void)json_schema_to_gbnf(params);
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::kInternal) throw;
        bad_tool("tools", fmt::format("{}: 'function.parameters': {}", where, e.what()));
      }
      r.names.push_back(name);
      r.parameters.push_back(std::move(params));
    }
    r.tools = ordered["tools"];
  }
  if (present(body, "tool_choice")) {
    const json& c = body["tool_choice"];
    if (c.is_string()) {
      const std::string s = c.get<std::string>();
      if (s == "none")
        r.choice = ToolRequest::kNone;
      else if (s == "auto")
        r.choice = ToolRequest::kAuto;
      else if (s == "required")
        r.choice = ToolRequest::kRequired;
      else
        bad_tool("tool_choice",
                 fmt::format("'tool_choice' must be \"none\", \"auto\", \"required\" or "
                             "{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, "
                             "not \"{}\"",
                             s));
    } else if (c.is_object() && c.contains("function") && c["function"].is_object() &&
               c["function"].contains("name") && c["function"]["name"].is_string()) {
      r.choice = ToolRequest::kNamed;
      r.named = c["function"]["name"].get<std::string>();
      if (!known_tool(r.names, r.named))
        bad_tool("tool_choice",
                 fmt::format("'tool_choice' names '{}', which is not among 'tools'", r.named));
    } else {
      bad_tool("tool_choice",
               "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
               "\"function\": {\"name\": ...}}");
    }
    if ((r.choice == ToolRequest::kRequired) && r.names.empty())
      bad_tool("tool_choice", "'tool_choice' is \"required\" but no 'tools' are given");
  }
  if (present(body, "parallel_tool_calls")) {
    if (!body["parallel_tool_calls"].is_boolean())
      bad_tool("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    r.parallel = body["parallel_tool_calls"].get<bool>();
  }
  return r;
}

}  // namespace tf
