#include "serving/openai/openai_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <unordered_set>

#include "core/error.h"
#include "serving/core/api_common.h"
#include "serving/core/request_fields.h"
#include "serving/core/structured_output.h"
#include "serving/core/tool_fields.h"

namespace tf {

using json = nlohmann::json;

std::vector<PromptInput> read_completion_prompts(const json& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) fail_field(field, "'{}' is required", field);
  const std::string shape = fmt::format(
      "'{}' must be a string, a list of strings, a list of token ids or a list of lists of token "
      "ids",
      field);
  auto ids = [&](const json& v) {
    PromptInput p{false, {}, token_ids(v, field)};
    if (p.ids.empty()) fail_field(field, "'{}' must not be empty", field);
    return p;
  };
  std::vector<PromptInput> out;
  if (it->is_string()) {
    out.push_back({true, it->get<std::string>(), {}});
  } else if (!it->is_array() || it->empty()) {
    fail_field(field, "{}", shape);
  } else if (const json& first = (*it)[0]; first.is_number_integer()) {
    out.push_back(ids(*it));
  } else if (first.is_string()) {
    for (const auto& p : *it) {
      if (!p.is_string()) fail_field(field, "{}", shape);
      out.push_back({true, p.get<std::string>(), {}});
    }
  } else if (first.is_array()) {
    for (const auto& p : *it) out.push_back(ids(p));
  } else {
    fail_field(field, "{}", shape);
  }
  return out;
}

namespace {

// An assistant message's tool_calls as templates take them (transformers' form): each call's
// arguments, sent as a JSON string (OpenAI) or an object, become an object.
nlohmann::ordered_json read_message_tool_calls(const json& calls) {
  if (!calls.is_array()) fail_field("messages", "a message's 'tool_calls' must be a list");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& c : calls) {
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
        !c["function"].contains("name") || !c["function"]["name"].is_string())
      fail_field("messages",
                 "each of a message's 'tool_calls' must be {{\"id\", \"type\": \"function\", "
                 "\"function\": {{\"name\", \"arguments\"}}}}");
    const json& fn = c["function"];
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    if (present(fn, "arguments")) {
      if (fn["arguments"].is_string()) {
        args = nlohmann::ordered_json::parse(fn["arguments"].get<std::string>(), nullptr, false);
        if (args.is_discarded())
          fail_field("messages", "a tool call's 'arguments' must be a JSON object's text");
      } else {
        args = fn["arguments"];
      }
      if (!args.is_object())
        fail_field("messages", "a tool call's 'arguments' must be a JSON object's text");
    }
    nlohmann::ordered_json call = {
        {"type", "function"},
        {"function", {{"name", fn["name"].get<std::string>()}, {"arguments", args}}}};
    if (c.contains("id") && c["id"].is_string()) call["id"] = c["id"];
    out.push_back(std::move(call));
  }
  return out;
}

}  // namespace

std::vector<ChatMessage> read_chat_messages(const json& body) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty())
    fail_field("messages", "'messages' must be a non-empty list");
  if (it->size() > kMaxMessages)
    fail_field("messages", "'messages' holds {} messages; at most {} are taken", it->size(),
               kMaxMessages);
  std::vector<ChatMessage> messages;
  for (const auto& m : *it) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
        (m.contains("content") && !m["content"].is_null() && !m["content"].is_string() &&
         !m["content"].is_array())) {
      fail_field("messages", "each message needs a string 'role' and a string or list 'content'");
    }
    std::string content;
    const json& c = m.contains("content") ? m["content"] : json();
    if (c.is_string()) {
      content = c.get<std::string>();
    } else if (c.is_array()) {  // [{"type": "text", "text": "..."}]
      for (const auto& part : c) {
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string() ||
            part["type"] != "text" || !part.contains("text") || !part["text"].is_string()) {
          fail(
              "each content part must be {{\"type\": \"text\", \"text\": STRING}}: only text "
              "content parts are supported");
        }
        content += part["text"].get<std::string>();
      }
    }
    ChatMessage msg(m["role"].get<std::string>(), std::move(content));
    if (present(m, "tool_calls")) msg.tool_calls = read_message_tool_calls(m["tool_calls"]);
    for (const char* k : {"tool_call_id", "name"}) {
      if (!present(m, k)) continue;
      if (!m[k].is_string()) fail_field("messages", "a message's '{}' must be a string", k);
      (std::string(k) == "name" ? msg.name : msg.tool_call_id) = m[k].get<std::string>();
    }
    // An assistant turn's reasoning as vLLM takes it back ("reasoning_content", or the newer
    // "reasoning"): the templates that keep it (Qwen3's, gpt-oss's) render it.
    for (const char* k : {"reasoning_content", "reasoning"}) {
      if (!present(m, k)) continue;
      if (!m[k].is_string()) fail_field("messages", "a message's '{}' must be a string", k);
      msg.reasoning = m[k].get<std::string>();
    }
    messages.push_back(std::move(msg));
  }
  return messages;
}

namespace {

using json = nlohmann::json;

// Every field a body may carry: OpenAI's, and the extensions vLLM accepts. Anything else is
// rejected by name, as OpenAI does, so a typo never silently changes nothing.
const std::unordered_set<std::string> kCommonFields = {
    "model", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "stop", "seed",
    "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "user", "best_of",
    // vLLM's sampling and extra parameters.
    "top_k", "min_p", "typical_p", "repetition_penalty", "min_tokens", "ignore_eos",
    "stop_token_ids", "skip_special_tokens", "include_stop_str_in_output", "length_penalty",
    "use_beam_search", "early_stopping", "no_repeat_ngram_size", "bad_words_ids", "priority",
    "request_id", "cache_salt", "spaces_between_special_tokens", "add_special_tokens", "timeout",
    "service_tier", "metadata", "store", "prompt_logprobs",
    // tokenflow's: false turns speculative decoding off for this request.
    "speculative",
    // Structured output (structured_output.h): OpenAI's, vLLM's and llama.cpp's names.
    "response_format", "grammar", "guided_grammar", "guided_json", "guided_regex", "guided_choice",
    "guided_whitespace_pattern", "guided_decoding_backend", "structured_outputs", "json_schema"};
const std::unordered_set<std::string> kCompletionFields = {"prompt", "echo", "suffix"};
const std::unordered_set<std::string> kChatFields = {"messages",
                                                     "max_completion_tokens",
                                                     "top_logprobs",
                                                     "tools",
                                                     "tool_choice",
                                                     "parallel_tool_calls",
                                                     "add_generation_prompt",
                                                     "chat_template_kwargs",
                                                     "thinking_token_budget",
                                                     "reasoning_effort"};

// OpenAI's reasoning_effort (and the Responses API's reasoning.effort) as budgets of the think
// block: "none" turns thinking off (the template's enable_thinking), "minimal" closes the block
// at once, "low" and "medium" allow 1024 and 8192 tokens, "high" the whole answer; the template
// also gets it as reasoning_effort (gpt-oss's templates read it). thinking_token_budget
// (vLLM's) gives the budget in tokens and wins over an effort's.
void read_thinking_fields(const json& body, CompletionRequest& r) {
  if (present(body, "reasoning_effort")) {
    const json& e = body["reasoning_effort"];
    static const std::vector<std::pair<std::string, int32_t>> kEfforts = {
        {"none", 0}, {"minimal", 0}, {"low", 1024}, {"medium", 8192}, {"high", -1}};
    auto it = std::find_if(kEfforts.begin(), kEfforts.end(),
                           [&](const auto& x) { return e.is_string() && e == x.first; });
    if (it == kEfforts.end())
      fail_field("reasoning_effort",
                 "'reasoning_effort' must be \"none\", \"minimal\", \"low\", \"medium\" or "
                 "\"high\"");
    if (it->first == "none") {
      r.chat_template_kwargs["enable_thinking"] = false;
    } else {
      r.chat_template_kwargs["reasoning_effort"] = it->first;
      if (it->second >= 0) r.thinking_budget = it->second;
    }
  }
  if (present(body, "thinking_token_budget")) {
    const json& b = body["thinking_token_budget"];
    if (!b.is_number_integer() || b.get<int64_t>() < 0 || b.get<int64_t>() > INT32_MAX)
      fail_field("thinking_token_budget", "'thinking_token_budget' must be a non-negative integer");
    r.thinking_budget = static_cast<int32_t>(b.get<int64_t>());
  }
}

void check_completion_fields(const json& body, bool chat) {
  const auto& own = chat ? kChatFields : kCompletionFields;
  check_known_fields(
      body, [&](const std::string& key) { return kCommonFields.count(key) || own.count(key); });
  if (present(body, "suffix") && body["suffix"] != "") {
    throw HttpError(400, "'suffix' is not supported", "unsupported_parameter", "suffix");
  }
  for (const char* k : {"stream", "echo", "use_beam_search", "add_special_tokens"}) {
    if (present(body, k) && !body[k].is_boolean())
      throw HttpError(400, fmt::format("'{}' must be true or false", k), "", k);
  }
  if (present(body, "stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object())
      throw HttpError(400, "'stream_options' must be an object", "", "stream_options");
    if (so.contains("include_usage") && !so["include_usage"].is_boolean() &&
        !so["include_usage"].is_null())
      throw HttpError(400, "'stream_options.include_usage' must be true or false", "",
                      "stream_options");
  }
  if (present(body, "user") && !body["user"].is_string())
    throw HttpError(400, "'user' must be a string", "", "user");
}

// The body field an error message is about: a leading 'quoted' name or first word that the body
// holds ("temperature must be >= 0" -> temperature). Only for the few plain errors left.
std::string field_of(const std::string& message, const json& body) {
  size_t b = !message.empty() && message[0] == '\'' ? 1 : 0, e = b;
  while (e < message.size() &&
         (std::islower(static_cast<unsigned char>(message[e])) || message[e] == '_'))
    ++e;
  const std::string word = message.substr(b, e - b);
  return body.is_object() && body.contains(word) ? word : std::string();
}

void read_body(const json& body, bool chat, bool log_prompt,
               const std::function<nlohmann::ordered_json()>& ordered_body, CompletionRequest& r) {
  check_completion_fields(body, chat);
  r.chat = chat;
  // The body with its members in the order sent, parsed at most once for the schema and the
  // tools' parameters.
  std::optional<nlohmann::ordered_json> ordered;
  const std::function<nlohmann::ordered_json()> ordered_once = [&] {
    if (!ordered)
      ordered = ordered_body ? ordered_body() : nlohmann::ordered_json::parse(body.dump());
    return *ordered;
  };
  r.output = read_output_constraint(body, ordered_once);
  r.params = parse_sampling_params(body, chat, 16);
  r.max_tokens_given =
      present(body, "max_tokens") || (chat && present(body, "max_completion_tokens"));
  if (chat && !present(body, "max_tokens") && present(body, "max_completion_tokens"))
    r.max_tokens_field = "max_completion_tokens";
  r.stream = body.value("stream", false);
  if (r.stream && present(body, "stream_options")) {
    const json& iu = body["stream_options"].value("include_usage", json());
    r.include_usage = iu.is_boolean() && iu.get<bool>();
  }
  r.echo = !chat && body.value("echo", false);
  r.add_special_tokens = body.value("add_special_tokens", true);
  read_request_options(body, r);
  if (present(body, "prompt_logprobs")) {
    const json& v = body["prompt_logprobs"];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxLogprobs)
      throw HttpError(
          400, fmt::format("'prompt_logprobs' must be an integer from 0 to {}", kMaxLogprobs), "",
          "prompt_logprobs");
    r.prompt_logprobs = static_cast<int32_t>(v.get<int64_t>());
  }
  apply_request_rules(r, body.value("use_beam_search", false));
  if (chat) {
    r.messages = read_chat_messages(body);
    if (present(body, "tools") || present(body, "tool_choice") ||
        present(body, "parallel_tool_calls")) {
      r.tools = read_tool_request(body, ordered_once());
      if (r.tools.forced() && r.output.kind != OutputConstraint::kNone)
        throw HttpError(400,
                        fmt::format("'tool_choice' forces a tool call, and '{}' asks for another "
                                    "output shape: give one",
                                    r.output.field),
                        "", "tool_choice");
    }
    bool add = true;
    if (present(body, "add_generation_prompt")) {
      if (!body["add_generation_prompt"].is_boolean())
        fail_field("add_generation_prompt", "'add_generation_prompt' must be true or false");
      add = body["add_generation_prompt"].get<bool>();
    }
    r.add_generation_prompt = add;
    read_chat_options(body, r);
  } else {
    r.prompts = read_completion_prompts(body);
  }
  const char* field = chat ? "messages" : "prompt";
  if (log_prompt && body.contains(field))
    r.logged_prompt =
        body[field].is_string() ? body[field].get<std::string>() : dump_json(body[field]);
}

}  // namespace

void read_request_options(const json& body, CompletionRequest& r) {
  r.model = string_field(body, "model");
  r.user = string_field(body, "user");
  r.cache_salt = string_field(body, "cache_salt");
  r.speculative = bool_field(body, "speculative", true);
  if (present(body, "priority")) {
    const json& v = body["priority"];
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT32_MAX) ||
        (!v.is_number_unsigned() && (v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)))
      throw HttpError(400, "'priority' must be a 32-bit integer", "", "priority");
    r.priority = static_cast<int32_t>(v.get<int64_t>());
  }
  if (present(body, "timeout")) {
    if (!body["timeout"].is_number() || !(body["timeout"].get<double>() > 0))
      throw HttpError(400, "'timeout' must be a number of seconds > 0", "", "timeout");
    // Bounded before converting (1e300 s is no negative deadline); the server's maximum is
    // applied by the planner.
    const double ms = std::min(body["timeout"].get<double>() * 1000, 1e12);
    r.timeout = std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(ms)));
  }
}

void read_chat_options(const json& body, CompletionRequest& r) {
  if (present(body, "chat_template_kwargs")) {
    const json& kw = body["chat_template_kwargs"];
    if (!kw.is_object())
      fail_field("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (const char* reserved : {"messages", "add_generation_prompt", "bos_token", "eos_token"})
      if (kw.contains(reserved))
        fail_field("chat_template_kwargs",
                   "'chat_template_kwargs' may not set '{}' (a field of its own)", reserved);
    r.chat_template_kwargs = kw;
  }
  read_thinking_fields(body, r);
}

CompletionRequest read_openai_request(const json& body, bool chat, bool log_prompt,
                                      const std::function<nlohmann::ordered_json()>& ordered_body) {
  CompletionRequest r;
  try {
    read_body(body, chat, log_prompt, ordered_body, r);
  } catch (const HttpError&) {
    throw;
  } catch (const FieldError& e) {
    // The field as the body names it (chat's max_completion_tokens is max_tokens inside).
    std::string field = e.field();
    if (field == "max_tokens" && !body.contains(field) && body.contains("max_completion_tokens"))
      field = "max_completion_tokens";
    throw HttpError(400, e.what(), "", field);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInternal) throw;
    throw HttpError(400, e.what(), "", field_of(e.what(), body));
  }
  return r;
}

}  // namespace tf
