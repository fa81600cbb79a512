#include "serving/openai/responses_api.h"

#include <fmt/format.h>

#include <mutex>
#include <unordered_set>

#include "serving/core/completion_request.h"
#include "serving/core/planner.h"
#include "serving/core/prompt.h"
#include "serving/core/request_fields.h"
#include "serving/openai/openai_api.h"
#include "serving/openai/openai_render.h"
#include "serving/openai/openai_request.h"

namespace tf {
namespace {

using json = nlohmann::json;

// Fields a Responses body may carry. OpenAI's own, and the sampling extensions vLLM accepts
// on its chat API (passed through as they are).
const std::unordered_set<std::string> kFields = {
    "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream",
    "tools", "tool_choice", "parallel_tool_calls", "text", "reasoning", "store", "metadata", "user",
    "top_logprobs", "include", "truncation", "service_tier", "previous_response_id", "background",
    "prompt_cache_key", "safety_identifier", "max_tool_calls", "stream_options",
    // Extensions, under the chat API's names.
    "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed", "stop",
    "priority", "cache_salt", "chat_template_kwargs", "timeout", "min_tokens", "ignore_eos",
    "logit_bias", "skip_special_tokens", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar", "structured_outputs"};
const char* const kPassThrough[] = {"model",
                                    "temperature",
                                    "top_p",
                                    "stream",
                                    "parallel_tool_calls",
                                    "user",
                                    "top_k",
                                    "min_p",
                                    "repetition_penalty",
                                    "presence_penalty",
                                    "frequency_penalty",
                                    "seed",
                                    "stop",
                                    "priority",
                                    "cache_salt",
                                    "chat_template_kwargs",
                                    "timeout",
                                    "min_tokens",
                                    "ignore_eos",
                                    "logit_bias",
                                    "skip_special_tokens",
                                    "guided_json",
                                    "guided_regex",
                                    "guided_choice",
                                    "guided_grammar",
                                    "structured_outputs"};

// The chat field an error names, as the Responses API names it.
const std::pair<const char*, const char*> kRenamed[] = {
    {"max_tokens", "max_output_tokens"}, {"messages", "input"}, {"response_format", "text"}};

// Runs fn, renaming the chat fields its HttpError names to the Responses API's.
template <typename Fn>
auto in_responses_terms(Fn fn) {
  try {
    return fn();
  } catch (const HttpError& e) {
    std::string message = e.what(), param = e.param();
    for (const auto& [chat_name, name] : kRenamed) {
      if (param == chat_name) param = name;
      for (const std::string& quoted : {fmt::format("'{}'", chat_name), std::string(chat_name)}) {
        const size_t at = message.find(quoted);
        if (at == 0 || (at != std::string::npos && quoted[0] == '\''))
          message.replace(at, quoted.size(), quoted[0] == '\'' ? fmt::format("'{}'", name) : name);
      }
    }
    throw HttpError(e.status(), message, e.code(), param);
  }
}

[[noreturn]] void bad_input(const std::string& message, const std::string& param) {
  throw HttpError(400, message, "", param);
}

std::string item_text(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    bad_input(fmt::format("'{}' must be a string or a list of parts", where), "input");
  std::string text;
  for (const ojson& part : content) {
    const std::string type = part.is_object() ? part.value("type", "") : "";
    if (type == "input_text" || type == "output_text" || type == "text") {
      if (!part.contains("text") || !part["text"].is_string())
        bad_input(fmt::format("a '{}' part of '{}' needs a string 'text'", type, where), "input");
      text += part["text"].get<std::string>();
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      throw HttpError(400,
                      fmt::format("'{}' parts are not supported: this server takes text", type),
                      "unsupported_parameter", "input");
    } else {
      bad_input(fmt::format("unknown content part type '{}' in '{}'", type, where), "input");
    }
  }
  return text;
}

ojson chat_messages(const ojson& body) {
  ojson messages = ojson::array();
  if (present(body, "instructions")) {
    if (!body["instructions"].is_string())
      bad_input("'instructions' must be a string", "instructions");
    messages.push_back({{"role", "system"}, {"content", body["instructions"]}});
  }
  if (!present(body, "input")) bad_input("'input' is required", "input");
  const ojson& input = body["input"];
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return messages;
  }
  if (!input.is_array() || input.empty())
    bad_input("'input' must be a string or a non-empty list of items", "input");
  if (input.size() > kMaxMessages)
    bad_input(
        fmt::format("'input' holds {} items; at most {} are taken", input.size(), kMaxMessages),
        "input");
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& item = input[i];
    const std::string where = fmt::format("input[{}]", i);
    if (!item.is_object()) bad_input(fmt::format("'{}' must be an object", where), "input");
    const std::string type = item.value("type", item.contains("role") ? "message" : "");
    if (type == "message") {
      if (!item.contains("role") || !item["role"].is_string())
        bad_input(fmt::format("'{}' needs a role", where), "input");
      std::string role = item["role"].get<std::string>();
      if (role == "developer") role = "system";
      if (role != "user" && role != "assistant" && role != "system")
        bad_input(fmt::format("'{}.role' must be user, assistant, system or developer", where),
                  "input");
      if (!item.contains("content")) bad_input(fmt::format("'{}' needs content", where), "input");
      messages.push_back({{"role", role}, {"content", item_text(item["content"], where)}});
    } else if (type == "function_call") {
      for (const char* k : {"call_id", "name", "arguments"})
        if (!item.contains(k) || !item[k].is_string())
          bad_input(fmt::format("'{}' (a function_call) needs a string '{}'", where, k), "input");
      const ojson call = {{"id", item["call_id"]},
                          {"type", "function"},
                          {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
      // Calls in a row are one assistant turn.
      if (!messages.empty() && messages.back().contains("tool_calls")) {
        messages.back()["tool_calls"].push_back(call);
      } else {
        messages.push_back(
            {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ojson::array({call})}});
      }
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string())
        bad_input(fmt::format("'{}' (a function_call_output) needs a string 'call_id'", where),
                  "input");
      if (!item.contains("output"))
        bad_input(fmt::format("'{}' needs an 'output'", where), "input");
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", item["call_id"]},
                          {"content", item_text(item["output"], where)}});
    } else if (type == "reasoning") {
      continue;  // earlier reasoning is not shown to the model again (as chat templates drop it)
    } else {
      throw HttpError(400, fmt::format("'{}': items of type '{}' are not supported", where, type),
                      "unsupported_parameter", "input");
    }
  }
  return messages;
}

ojson chat_tools(const ojson& tools) {
  if (!tools.is_array()) bad_input("'tools' must be a list", "tools");
  ojson out = ojson::array();
  for (const ojson& t : tools) {
    if (!t.is_object() || t.value("type", "") != "function")
      throw HttpError(400,
                      fmt::format("only function tools are supported, got {}",
                                  t.is_object() ? t.value("type", "no type") : t.dump()),
                      "unsupported_parameter", "tools");
    ojson fn = ojson::object();
    for (const char* k : {"name", "description", "parameters", "strict"})
      if (t.contains(k)) fn[k] = t[k];
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  return out;
}

ojson chat_tool_choice(const ojson& choice) {
  if (choice.is_string()) return choice;
  if (choice.is_object() && choice.value("type", "") == "function" && choice.contains("name"))
    return {{"type", "function"}, {"function", {{"name", choice["name"]}}}};
  bad_input(
      "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
      "\"name\": ...}",
      "tool_choice");
}

ojson chat_response_format(const ojson& text) {
  if (!text.is_object()) bad_input("'text' must be an object", "text");
  if (!text.contains("format")) return nullptr;
  const ojson& f = text["format"];
  const std::string type = f.is_object() ? f.value("type", "") : "";
  if (type == "text") return nullptr;
  if (type == "json_object") return {{"type", "json_object"}};
  if (type == "json_schema") {
    ojson schema = ojson::object();
    for (const char* k : {"name", "description", "schema", "strict"})
      if (f.contains(k)) schema[k] = f[k];
    return {{"type", "json_schema"}, {"json_schema", schema}};
  }
  bad_input("'text.format.type' must be text, json_object or json_schema", "text");
}

ojson usage_of(const ojson& chat_usage) {
  const int64_t in = chat_usage.value("prompt_tokens", int64_t{0});
  const int64_t out = chat_usage.value("completion_tokens", int64_t{0});
  int64_t cached = 0;
  if (chat_usage.contains("prompt_tokens_details"))
    cached = chat_usage["prompt_tokens_details"].value("cached_tokens", int64_t{0});
  return {{"input_tokens", in},
          {"input_tokens_details", {{"cached_tokens", cached}}},
          {"output_tokens", out},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", in + out}};
}

ojson text_part(const std::string& text, const ojson& logprobs) {
  return {{"type", "output_text"},
          {"text", text},
          {"annotations", ojson::array()},
          {"logprobs", logprobs.is_array() ? logprobs : ojson::array()}};
}

ojson reasoning_item(const std::string& id, const std::string& text) {
  return {{"type", "reasoning"},
          {"id", id},
          {"summary", ojson::array()},
          {"content", ojson::array({{{"type", "reasoning_text"}, {"text", text}}})}};
}

ojson call_item(const std::string& id, const ojson& call, const char* status) {
  return {{"type", "function_call"},
          {"id", id},
          {"call_id", call.value("id", "")},
          {"name", call["function"].value("name", "")},
          {"arguments", call["function"].value("arguments", "")},
          {"status", status}};
}

std::string item_id(const char* prefix) {
  return random_id(prefix);
}

// The Response object's fields that echo the request.
ojson response_object(const ResponseHead& h, const char* status, ojson output, ojson usage,
                      ojson incomplete) {
  const json& r = h.request;
  auto echo = [&](const char* k, json fallback) {
    return ojson::parse((r.contains(k) && !r[k].is_null() ? r[k] : fallback).dump());
  };
  ojson tools = ojson::array();
  if (r.contains("tools") && r["tools"].is_array()) tools = ojson::parse(r["tools"].dump());
  return {{"id", h.id},
          {"object", "response"},
          {"created_at", h.created_at},
          {"status", status},
          {"error", nullptr},
          {"incomplete_details", std::move(incomplete)},
          {"instructions", echo("instructions", nullptr)},
          {"max_output_tokens", echo("max_output_tokens", nullptr)},
          {"model", h.model},
          {"output", std::move(output)},
          {"parallel_tool_calls", echo("parallel_tool_calls", true)},
          {"previous_response_id", nullptr},
          {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
          {"store", false},
          {"temperature", echo("temperature", 1.0)},
          {"text", echo("text", json{{"format", {{"type", "text"}}}})},
          {"tool_choice", echo("tool_choice", "auto")},
          {"tools", tools},
          {"top_p", echo("top_p", 1.0)},
          {"truncation", "disabled"},
          {"usage", std::move(usage)},
          {"user", echo("user", nullptr)},
          {"metadata", echo("metadata", json::object())}};
}

std::string sse_event(const ojson& e) {
  return fmt::format("event: {}\ndata: {}\n\n", e["type"].get<std::string>(), dump_json(e));
}

}  // namespace

ojson responses_to_chat_body(const ojson& body) {
  check_known_fields(body, [](const std::string& key) { return kFields.count(key) > 0; });
  if (present(body, "previous_response_id"))
    throw HttpError(400,
                    "'previous_response_id' is not supported: this server stores no responses; "
                    "send the conversation in 'input'",
                    "unsupported_parameter", "previous_response_id");
  if (present(body, "background") && body["background"] != false)
    throw HttpError(400, "'background' responses are not supported", "unsupported_parameter",
                    "background");
  ojson chat = {{"messages", chat_messages(body)}};
  for (const char* k : kPassThrough)
    if (present(body, k)) chat[k] = body[k];
  if (present(body, "max_output_tokens")) chat["max_tokens"] = body["max_output_tokens"];
  if (present(body, "tools")) chat["tools"] = chat_tools(body["tools"]);
  if (present(body, "tool_choice")) chat["tool_choice"] = chat_tool_choice(body["tool_choice"]);
  if (present(body, "text")) {
    ojson format = chat_response_format(body["text"]);
    if (!format.is_null()) chat["response_format"] = std::move(format);
  }
  bool logprobs = present(body, "top_logprobs");
  if (present(body, "include")) {
    if (!body["include"].is_array()) bad_input("'include' must be a list", "include");
    for (const ojson& v : body["include"]) {
      if (!v.is_string()) bad_input("'include' must be a list of strings", "include");
      if (v == "message.output_text.logprobs") logprobs = true;
    }
  }
  if (logprobs) {
    chat["logprobs"] = true;
    if (present(body, "top_logprobs")) chat["top_logprobs"] = body["top_logprobs"];
  }
  if (present(body, "reasoning")) {
    const ojson& r = body["reasoning"];
    if (!r.is_object()) bad_input("'reasoning' must be an object", "reasoning");
    if (present(r, "effort")) chat["reasoning_effort"] = r["effort"];
  }
  if (present(body, "stream") && body["stream"] == true)
    chat["stream_options"] = {{"include_usage", true}};
  return chat;
}

ojson response_in_progress(const ResponseHead& head) {
  return response_object(head, "in_progress", ojson::array(), nullptr, nullptr);
}

ojson response_from_chat(const ResponseHead& head, const ojson& chat) {
  ojson output = ojson::array();
  const ojson& choice = chat["choices"].at(0);
  const ojson& message = choice["message"];
  if (message.contains("reasoning_content") && message["reasoning_content"].is_string())
    output.push_back(reasoning_item(item_id("rs_"), message["reasoning_content"]));
  if (message.contains("content") && message["content"].is_string()) {
    ojson logprobs = choice["logprobs"].is_object() ? choice["logprobs"]["content"] : ojson();
    output.push_back({{"type", "message"},
                      {"id", item_id("msg_")},
                      {"status", "completed"},
                      {"role", "assistant"},
                      {"content", ojson::array({text_part(message["content"], logprobs)})}});
  }
  if (message.contains("tool_calls"))
    for (const ojson& call : message["tool_calls"])
      output.push_back(call_item(item_id("fc_"), call, "completed"));
  const bool incomplete = choice["finish_reason"] == "length";
  return response_object(head, incomplete ? "incomplete" : "completed", std::move(output),
                         usage_of(chat["usage"]),
                         incomplete ? ojson{{"reason", "max_output_tokens"}} : ojson());
}

ojson ResponseEventStream::event(const char* type, ojson fields) {
  ojson e = {{"type", type}};
  for (auto it = fields.begin(); it != fields.end(); ++it) e[it.key()] = it.value();
  e["sequence_number"] = seq_++;
  return e;
}

std::vector<ojson> ResponseEventStream::start() {
  std::vector<ojson> out;
  out.push_back(event("response.created", {{"response", response_in_progress(head_)}}));
  out.push_back(event("response.in_progress", {{"response", response_in_progress(head_)}}));
  return out;
}

void ResponseEventStream::close_reasoning(std::vector<ojson>& out) {
  if (reasoning_item_ < 0) return;
  ojson& item = output_[reasoning_item_];
  item["content"][0]["text"] = reasoning_;
  out.push_back(event("response.reasoning_text.done", {{"item_id", item["id"]},
                                                       {"output_index", reasoning_item_},
                                                       {"content_index", 0},
                                                       {"text", reasoning_}}));
  out.push_back(
      event("response.output_item.done", {{"output_index", reasoning_item_}, {"item", item}}));
  reasoning_item_ = -1;
}

void ResponseEventStream::close_text(std::vector<ojson>& out) {
  if (text_item_ < 0) return;
  ojson& item = output_[text_item_];
  item["content"][0]["text"] = text_;
  item["status"] = "completed";
  const ojson ids = {{"item_id", item["id"]}, {"output_index", text_item_}, {"content_index", 0}};
  ojson done = ids;
  done["text"] = text_;
  done["logprobs"] = item["content"][0]["logprobs"];
  out.push_back(event("response.output_text.done", done));
  ojson part = ids;
  part["part"] = item["content"][0];
  out.push_back(event("response.content_part.done", part));
  out.push_back(event("response.output_item.done", {{"output_index", text_item_}, {"item", item}}));
  text_item_ = -1;
}

void ResponseEventStream::close_call(std::vector<ojson>& out) {
  if (call_item_ < 0) return;
  ojson& item = output_[call_item_];
  item["arguments"] = call_args_;
  item["status"] = "completed";
  out.push_back(
      event("response.function_call_arguments.done",
            {{"item_id", item["id"]}, {"output_index", call_item_}, {"arguments", call_args_}}));
  out.push_back(event("response.output_item.done", {{"output_index", call_item_}, {"item", item}}));
  call_item_ = -1;
}

std::vector<ojson> ResponseEventStream::chunk(const ojson& chat_chunk) {
  std::vector<ojson> out;
  if (!chat_chunk.contains("choices") || chat_chunk["choices"].empty()) return out;
  const ojson& choice = chat_chunk["choices"][0];
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string())
    finish_reason_ = choice["finish_reason"].get<std::string>();
  if (!choice.contains("delta")) return out;
  const ojson& delta = choice["delta"];
  if (delta.contains("reasoning_content") && delta["reasoning_content"].is_string()) {
    const std::string d = delta["reasoning_content"].get<std::string>();
    if (reasoning_item_ < 0 && !d.empty()) {
      close_text(out);
      close_call(out);
      reasoning_item_ = static_cast<int64_t>(output_.size());
      reasoning_.clear();
      output_.push_back(reasoning_item(item_id("rs_"), ""));
      out.push_back(event("response.output_item.added",
                          {{"output_index", reasoning_item_}, {"item", output_.back()}}));
    }
    if (!d.empty()) {
      reasoning_ += d;
      out.push_back(
          event("response.reasoning_text.delta", {{"item_id", output_[reasoning_item_]["id"]},
                                                  {"output_index", reasoning_item_},
                                                  {"content_index", 0},
                                                  {"delta", d}}));
    }
  }
  if (delta.contains("content") && delta["content"].is_string()) {
    const std::string d = delta["content"].get<std::string>();
    if (text_item_ < 0 && !d.empty()) {
      close_reasoning(out);
      close_call(out);
      text_item_ = static_cast<int64_t>(output_.size());
      text_.clear();
      output_.push_back({{"type", "message"},
                         {"id", item_id("msg_")},
                         {"status", "in_progress"},
                         {"role", "assistant"},
                         {"content", ojson::array()}});
      out.push_back(event("response.output_item.added",
                          {{"output_index", text_item_}, {"item", output_.back()}}));
      output_.back()["content"].push_back(text_part("", ojson::array()));
      out.push_back(event("response.content_part.added", {{"item_id", output_.back()["id"]},
                                                          {"output_index", text_item_},
                                                          {"content_index", 0},
                                                          {"part", text_part("", nullptr)}}));
    }
    if (!d.empty()) {
      text_ += d;
      ojson logprobs = ojson::array();
      if (choice.contains("logprobs") && choice["logprobs"].is_object())
        logprobs = choice["logprobs"]["content"];
      ojson& all = output_[text_item_]["content"][0]["logprobs"];
      for (const ojson& lp : logprobs) all.push_back(lp);
      out.push_back(event("response.output_text.delta", {{"item_id", output_[text_item_]["id"]},
                                                         {"output_index", text_item_},
                                                         {"content_index", 0},
                                                         {"delta", d},
                                                         {"logprobs", logprobs}}));
    }
  }
  if (delta.contains("tool_calls")) {
    for (const ojson& call : delta["tool_calls"]) {
      if (call.contains("id")) {  // a new call: its name, then its arguments
        close_reasoning(out);
        close_text(out);
        close_call(out);
        call_item_ = static_cast<int64_t>(output_.size());
        call_args_.clear();
        output_.push_back(call_item(item_id("fc_"), call, "in_progress"));
        output_.back()["arguments"] = "";
        out.push_back(event("response.output_item.added",
                            {{"output_index", call_item_}, {"item", output_.back()}}));
      }
      if (call_item_ < 0 || !call.contains("function")) continue;
      const std::string d = call["function"].value("arguments", "");
      if (d.empty()) continue;
      call_args_ += d;
      out.push_back(event(
          "response.function_call_arguments.delta",
          {{"item_id", output_[call_item_]["id"]}, {"output_index", call_item_}, {"delta", d}}));
    }
  }
  return out;
}

std::vector<ojson> ResponseEventStream::finish(const ojson& usage) {
  std::vector<ojson> out;
  close_reasoning(out);
  close_text(out);
  close_call(out);
  const bool incomplete = finish_reason_ == "length";
  ojson response =
      response_object(head_, incomplete ? "incomplete" : "completed", output_, usage_of(usage),
                      incomplete ? ojson{{"reason", "max_output_tokens"}} : ojson());
  out.push_back(event(incomplete ? "response.incomplete" : "response.completed",
                      {{"response", std::move(response)}}));
  return out;
}

std::vector<ojson> ResponseEventStream::fail(const std::string& message) {
  std::vector<ojson> out;
  ojson response = response_object(head_, "failed", output_, nullptr, nullptr);
  response["error"] = {{"code", "server_error"}, {"message", message}};
  out.push_back(event("response.failed", {{"response", std::move(response)}}));
  return out;
}

namespace {

// A Response streamed as semantic events: response.created / in_progress first, the chat
// chunks of the one choice turned into output item events, then response.completed with the
// usage (or response.failed with the engine's error; also when the engine refuses the job).
class ResponseStreamSink final : public JobSink {
 public:
  ResponseStreamSink(const ResponseHead& head, std::shared_ptr<const OpenAiShape> shape,
                     std::shared_ptr<HttpResponder> responder)
      : shape_(std::move(shape)),
        responder_(std::move(responder)),
        events_(head),
        chat_stream_(*shape_) {}

  void start() {
    responder_->start_stream(200, "text/event-stream");
    for (const ojson& e : events_.start()) responder_->write(sse_event(e));
  }
  void output(size_t i, const RequestOutput& out) override {
    std::lock_guard lock(mu_);
    for (const ojson& c : chat_stream_.chunks(i, out))
      for (const ojson& e : events_.chunk(c)) responder_->write(sse_event(e));
  }
  void end(const JobEnd& end, const GenerationJob&) override {
    if (end.outcome == JobOutcome::kClientGone) return;
    std::lock_guard lock(mu_);
    const auto last = end.outcome == JobOutcome::kFailed
                          ? events_.fail(end.summary.error)
                          : events_.finish(openai_usage(end.summary));
    for (const ojson& e : last) responder_->write(sse_event(e));
    responder_->end();
  }
  bool answers_start_failure() const override { return true; }
  void start_failed(const std::exception& e) override {
    for (const ojson& ev : events_.fail(e.what())) responder_->write(sse_event(ev));
    responder_->end();
  }

 private:
  std::shared_ptr<const OpenAiShape> shape_;  // the chat stream points into it
  std::shared_ptr<HttpResponder> responder_;
  ResponseEventStream events_;
  ChatChoiceStream chat_stream_;
  std::mutex mu_;
};

}  // namespace

void handle_responses(ServingState& state, const HttpRequest& req,
                      std::shared_ptr<HttpResponder> responder,
                      std::shared_ptr<RequestRecord> record) {
  const json body = parse_json_body(req.body);
  const ojson ordered = ojson::parse(req.body);
  const ojson chat_ordered = responses_to_chat_body(ordered);
  const std::string chat_id = random_id("chatcmpl-");
  // Read and planned as a chat request; its errors name the Responses API's fields.
  auto plan = in_responses_terms([&] {
    const CompletionRequest request =
        read_openai_request(json::parse(chat_ordered.dump()), /*chat=*/true, logs_prompts(*record),
                            [&] { return chat_ordered; });
    return std::make_shared<GenerationPlan>(
        plan_generation(state, request, req.header_lookup(), *record, chat_id));
  });
  ServedModel& model = *plan->model;
  responder->add_header("X-Model-Version", std::to_string(model.version));
  auto shape = std::make_shared<const OpenAiShape>(openai_shape(*plan, chat_id, model.name, true));
  ResponseHead head;
  head.id = random_id("resp_");
  head.created_at = unix_seconds();
  head.model = model.name;
  head.request = body;
  if (plan->stream) {
    auto sink = std::make_shared<ResponseStreamSink>(head, shape, responder);
    sink->start();
    run_job(state, plan, responder, record, sink);
    return;
  }
  run_job(
      state, plan, responder, record,
      whole_answer(responder, [shape, head](const GenerationJob& job, const JobSummary& summary) {
        return dump_json(response_from_chat(head, openai_response(*shape, job.results(), summary)));
      }));
}

}  // namespace tf
