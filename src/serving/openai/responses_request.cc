#include "serving/openai/responses_request.h"

#include <fmt/format.h>

#include <unordered_set>

#include "serving/core/api_common.h"
#include "serving/core/request_fields.h"
#include "serving/core/structured_output.h"
#include "serving/core/tool_fields.h"
#include "serving/openai/openai_request.h"

namespace tf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// Fields a Responses body may carry. OpenAI's own, and the sampling extensions vLLM accepts
// on its chat API (under the chat API's names).
const std::unordered_set<std::string> kResponsesFields = {
    "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream",
    "tools", "tool_choice", "parallel_tool_calls", "text", "reasoning", "store", "metadata", "user",
    "top_logprobs", "include", "truncation", "service_tier", "previous_response_id", "background",
    "prompt_cache_key", "safety_identifier", "max_tool_calls", "stream_options",
    // Extensions, under the chat API's names.
    "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed", "stop",
    "priority", "cache_salt", "chat_template_kwargs", "timeout", "min_tokens", "ignore_eos",
    "logit_bias", "skip_special_tokens", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar", "structured_outputs"};

[[noreturn]] void bad_item(const std::string& message, const std::string& param,
                           const std::string& code = "") {
  throw HttpError(400, message, code, param);
}

std::string item_text(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    bad_item(fmt::format("'{}' must be a string or a list of parts", where), "input");
  std::string text;
  for (const ojson& part : content) {
    const std::string type = part.is_object() ? part.value("type", "") : "";
    if (type == "input_text" || type == "output_text" || type == "text") {
      if (!part.contains("text") || !part["text"].is_string())
        bad_item(fmt::format("a '{}' part of '{}' needs a string 'text'", type, where), "input");
      text += part["text"].get<std::string>();
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      bad_item(fmt::format("'{}' parts are not supported: this server takes text", type), "input",
               "unsupported_parameter");
    } else {
      bad_item(fmt::format("unknown content part type '{}' in '{}'", type, where), "input");
    }
  }
  return text;
}

std::vector<ChatMessage> input_messages(const ojson& body) {
  std::vector<ChatMessage> messages;
  if (present(body, "instructions")) {
    if (!body["instructions"].is_string())
      bad_item("'instructions' must be a string", "instructions");
    messages.emplace_back("system", body["instructions"].get<std::string>());
  }
  if (!present(body, "input")) bad_item("'input' is required", "input");
  const ojson& input = body["input"];
  if (input.is_string()) {
    messages.emplace_back("user", input.get<std::string>());
    return messages;
  }
  if (!input.is_array() || input.empty())
    bad_item("'input' must be a string or a non-empty list of items", "input");
  if (input.size() > kMaxMessages)
    bad_item(
        fmt::format("'input' holds {} items; at most {} are taken", input.size(), kMaxMessages),
        "input");
  bool calls_open = false;  // the last message is an assistant turn of calls
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& item = input[i];
    const std::string where = fmt::format("input[{}]", i);
    if (!item.is_object()) bad_item(fmt::format("'{}' must be an object", where), "input");
    const std::string type = item.value("type", item.contains("role") ? "message" : "");
    if (type == "function_call") {
      for (const char* k : {"call_id", "name", "arguments"})
        if (!item.contains(k) || !item[k].is_string())
          bad_item(fmt::format("'{}' (a function_call) needs a string '{}'", where, k), "input");
      ojson args = ojson::parse(item["arguments"].get<std::string>(), nullptr, false);
      if (!args.is_object())
        bad_item(fmt::format("'{}.arguments' must be a JSON object's text", where), "input");
      const ojson call = {{"type", "function"},
                          {"function", {{"name", item["name"]}, {"arguments", std::move(args)}}},
                          {"id", item["call_id"]}};
      // Calls in a row are one assistant turn.
      if (!calls_open) {
        ChatMessage m("assistant", "");
        m.tool_calls = ojson::array();
        messages.push_back(std::move(m));
        calls_open = true;
      }
      messages.back().tool_calls.push_back(call);
      continue;
    }
    calls_open = false;
    if (type == "message") {
      if (!item.contains("role") || !item["role"].is_string())
        bad_item(fmt::format("'{}' needs a role", where), "input");
      std::string role = item["role"].get<std::string>();
      if (role == "developer") role = "system";
      if (role != "user" && role != "assistant" && role != "system")
        bad_item(fmt::format("'{}.role' must be user, assistant, system or developer", where),
                 "input");
      if (!item.contains("content")) bad_item(fmt::format("'{}' needs content", where), "input");
      messages.emplace_back(role, item_text(item["content"], where));
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string())
        bad_item(fmt::format("'{}' (a function_call_output) needs a string 'call_id'", where),
                 "input");
      if (!item.contains("output")) bad_item(fmt::format("'{}' needs an 'output'", where), "input");
      ChatMessage m("tool", item_text(item["output"], where));
      m.tool_call_id = item["call_id"].get<std::string>();
      messages.push_back(std::move(m));
    } else if (type == "reasoning") {
      // Earlier reasoning is not shown to the model again (as chat templates drop it).
    } else {
      bad_item(fmt::format("'{}': items of type '{}' are not supported", where, type), "input",
               "unsupported_parameter");
    }
  }
  return messages;
}

// tools, tool_choice and parallel_tool_calls in the function-tools shape the chat API shares
// (core/tool_fields.h): Responses' flat tools {type, name, description, parameters, strict}
// nested as {type, function: {...}}.
ToolRequest read_response_tools(const ojson& body) {
  ojson shared = ojson::object();
  if (present(body, "tools")) {
    const ojson& tools = body["tools"];
    if (!tools.is_array()) bad_item("'tools' must be a list", "tools");
    ojson out = ojson::array();
    for (const ojson& t : tools) {
      if (!t.is_object() || t.value("type", "") != "function")
        bad_item(fmt::format("only function tools are supported, got {}",
                             t.is_object() ? t.value("type", "no type") : t.dump()),
                 "tools", "unsupported_parameter");
      ojson fn = ojson::object();
      for (const char* k : {"name", "description", "parameters", "strict"})
        if (t.contains(k)) fn[k] = t[k];
      out.push_back({{"type", "function"}, {"function", fn}});
    }
    shared["tools"] = std::move(out);
  }
  if (present(body, "tool_choice")) {
    const ojson& c = body["tool_choice"];
    if (c.is_string()) {
      shared["tool_choice"] = c;
    } else if (c.is_object() && c.value("type", "") == "function" && c.contains("name")) {
      shared["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    } else {
      bad_item(
          "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
          "\"name\": ...}",
          "tool_choice");
    }
  }
  if (present(body, "parallel_tool_calls"))
    shared["parallel_tool_calls"] = body["parallel_tool_calls"];
  if (shared.empty()) return {};
  return read_tool_request(json(shared), shared);
}

// text.format: json_object, or json_schema ({name, description, schema, strict}) as chat's
// response_format reads it; "text" (the default) constrains nothing.
OutputConstraint read_text_format(const ojson& body) {
  OutputConstraint none;
  if (!present(body, "text")) return none;
  const ojson& text = body["text"];
  if (!text.is_object()) bad_item("'text' must be an object", "text");
  if (!text.contains("format")) return none;
  const ojson& f = text["format"];
  const std::string type = f.is_object() ? f.value("type", "") : "";
  if (type == "text") return none;
  ojson format;
  if (type == "json_object") {
    format = {{"type", "json_object"}};
  } else if (type == "json_schema") {
    ojson schema = ojson::object();
    for (const char* k : {"name", "description", "schema", "strict"})
      if (f.contains(k)) schema[k] = f[k];
    format = {{"type", "json_schema"}, {"json_schema", schema}};
  } else {
    bad_item("'text.format.type' must be text, json_object or json_schema", "text");
  }
  const ojson shared = {{"response_format", format}};
  OutputConstraint c;
  try {
    c = read_output_constraint(json(shared), [&] { return shared; });
  } catch (const HttpError& e) {
    throw HttpError(e.status(), e.what(), e.code(), "text");
  }
  c.field = "text";
  return c;
}

void read_into(const ojson& body, bool log_prompt, CompletionRequest& r) {
  check_known_fields(body, [](const std::string& key) { return kResponsesFields.count(key) > 0; });
  if (present(body, "previous_response_id"))
    throw HttpError(400,
                    "'previous_response_id' is not supported: this server stores no responses; "
                    "send the conversation in 'input'",
                    "unsupported_parameter", "previous_response_id");
  if (present(body, "background") && body["background"] != false)
    throw HttpError(400, "'background' responses are not supported", "unsupported_parameter",
                    "background");
  const json plain(body);  // the same values as the shared readers take them (no parse)
  r.chat = true;
  read_request_options(plain, r);
  r.messages = input_messages(body);
  r.params = parse_sampling_params(plain, /*chat=*/true, 16);
  if (present(body, "max_output_tokens")) {
    const ojson& m = body["max_output_tokens"];
    if (!m.is_number_integer() || m.get<int64_t>() < 1 || m.get<int64_t>() > INT32_MAX)
      fail_field("max_output_tokens", "max_output_tokens must be at least 1, got {}", m.dump());
    r.params.max_tokens = static_cast<int32_t>(m.get<int64_t>());
    r.max_tokens_given = true;
  }
  r.max_tokens_field = "max_output_tokens";
  // The output text's logprobs: asked by include, with top_logprobs alternatives.
  bool logprobs = present(body, "top_logprobs");
  if (present(body, "include")) {
    if (!body["include"].is_array()) bad_item("'include' must be a list", "include");
    for (const ojson& v : body["include"]) {
      if (!v.is_string()) bad_item("'include' must be a list of strings", "include");
      if (v == "message.output_text.logprobs") logprobs = true;
    }
  }
  if (logprobs) {
    int32_t top = 0;
    if (present(body, "top_logprobs")) {
      const ojson& t = body["top_logprobs"];
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > 20)
        fail_field("top_logprobs", "'top_logprobs' must be an integer from 0 to 20");
      top = static_cast<int32_t>(t.get<int64_t>());
    }
    r.params.logprobs = top;
  }
  r.stream = bool_field(plain, "stream", false);
  r.include_usage = r.stream;
  r.output = read_output_constraint(plain, [&] { return body; });
  const OutputConstraint text = read_text_format(body);
  if (text.kind != OutputConstraint::kNone) {
    if (r.output.kind != OutputConstraint::kNone)
      bad_item(
          fmt::format("'text.format' and '{}' both constrain the output: give one", r.output.field),
          "text");
    r.output = text;
  }
  r.tools = read_response_tools(body);
  if (r.tools.forced() && r.output.kind != OutputConstraint::kNone)
    bad_item(fmt::format("'tool_choice' forces a tool call, and '{}' asks for another output "
                         "shape: give one",
                         r.output.field),
             "tool_choice");
  json chat_fields = json::object();
  if (present(body, "chat_template_kwargs"))
    chat_fields["chat_template_kwargs"] = plain["chat_template_kwargs"];
  if (present(body, "reasoning")) {
    const ojson& reasoning = body["reasoning"];
    if (!reasoning.is_object()) bad_item("'reasoning' must be an object", "reasoning");
    if (present(reasoning, "effort")) chat_fields["reasoning_effort"] = json(reasoning["effort"]);
  }
  as_bad_request([&] { read_chat_options(chat_fields, r); },
                 [](const std::string& f) { return f == "reasoning_effort" ? "reasoning" : f; });
  apply_request_rules(r, false);
  if (log_prompt) r.logged_prompt = dump_json(body["input"]);
}

}  // namespace

CompletionRequest read_responses_request(const ojson& body, bool log_prompt) {
  CompletionRequest r;
  as_bad_request([&] { read_into(body, log_prompt, r); });
  return r;
}

}  // namespace tf
