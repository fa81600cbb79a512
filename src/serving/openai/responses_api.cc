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
#include "serving/openai/responses_request.h"

namespace tf {
namespace {

using json = nlohmann::json;

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

ojson usage_of(const JobSummary& summary) {
  const int64_t in = summary.prompt_tokens, out = summary.completion_tokens;
  return {{"input_tokens", in},
          {"input_tokens_details", {{"cached_tokens", summary.cached_prompt_tokens}}},
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

ojson call_item(const std::string& id, const ToolCall& call, const char* status) {
  return {{"type", "function_call"},     {"id", id},
          {"call_id", call.id},          {"name", call.name},
          {"arguments", call.arguments}, {"status", status}};
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

ojson response_in_progress(const ResponseHead& head) {
  return response_object(head, "in_progress", ojson::array(), nullptr, nullptr);
}

ojson response_object_of(const ResponseHead& head, const ResponseParts& parts,
                         const JobSummary& summary) {
  ojson output = ojson::array();
  if (parts.reasoning) output.push_back(reasoning_item(item_id("rs_"), *parts.reasoning));
  if (parts.text)
    output.push_back({{"type", "message"},
                      {"id", item_id("msg_")},
                      {"status", "completed"},
                      {"role", "assistant"},
                      {"content", ojson::array({text_part(*parts.text, parts.logprobs)})}});
  for (const ToolCall& call : parts.calls)
    output.push_back(call_item(item_id("fc_"), call, "completed"));
  return response_object(head, parts.incomplete ? "incomplete" : "completed", std::move(output),
                         usage_of(summary),
                         parts.incomplete ? ojson{{"reason", "max_output_tokens"}} : ojson());
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

std::vector<ojson> ResponseEventStream::reasoning(const std::string& d) {
  std::vector<ojson> out;
  if (d.empty()) return out;
  if (reasoning_item_ < 0) {
    close_text(out);
    reasoning_item_ = static_cast<int64_t>(output_.size());
    reasoning_.clear();
    output_.push_back(reasoning_item(item_id("rs_"), ""));
    out.push_back(event("response.output_item.added",
                        {{"output_index", reasoning_item_}, {"item", output_.back()}}));
  }
  reasoning_ += d;
  out.push_back(event("response.reasoning_text.delta", {{"item_id", output_[reasoning_item_]["id"]},
                                                        {"output_index", reasoning_item_},
                                                        {"content_index", 0},
                                                        {"delta", d}}));
  return out;
}

std::vector<ojson> ResponseEventStream::text(const std::string& d, const ojson& logprobs) {
  std::vector<ojson> out;
  if (d.empty()) return out;
  if (text_item_ < 0) {
    close_reasoning(out);
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
  text_ += d;
  const ojson lps = logprobs.is_array() ? logprobs : ojson::array();
  ojson& all = output_[text_item_]["content"][0]["logprobs"];
  for (const ojson& lp : lps) all.push_back(lp);
  out.push_back(event("response.output_text.delta", {{"item_id", output_[text_item_]["id"]},
                                                     {"output_index", text_item_},
                                                     {"content_index", 0},
                                                     {"delta", d},
                                                     {"logprobs", lps}}));
  return out;
}

std::vector<ojson> ResponseEventStream::calls(const std::vector<ToolCall>& calls) {
  std::vector<ojson> out;
  if (calls.empty()) return out;
  close_reasoning(out);
  close_text(out);
  for (const ToolCall& call : calls) {
    const int64_t index = static_cast<int64_t>(output_.size());
    output_.push_back(call_item(item_id("fc_"), call, "in_progress"));
    output_.back()["arguments"] = "";
    out.push_back(
        event("response.output_item.added", {{"output_index", index}, {"item", output_.back()}}));
    const ojson id = output_.back()["id"];
    out.push_back(event("response.function_call_arguments.delta",
                        {{"item_id", id}, {"output_index", index}, {"delta", call.arguments}}));
    output_.back()["arguments"] = call.arguments;
    output_.back()["status"] = "completed";
    out.push_back(event("response.function_call_arguments.done",
                        {{"item_id", id}, {"output_index", index}, {"arguments", call.arguments}}));
    out.push_back(
        event("response.output_item.done", {{"output_index", index}, {"item", output_.back()}}));
  }
  return out;
}

std::vector<ojson> ResponseEventStream::finish(const JobSummary& summary, bool incomplete) {
  std::vector<ojson> out;
  close_reasoning(out);
  close_text(out);
  ojson response =
      response_object(head_, incomplete ? "incomplete" : "completed", output_, usage_of(summary),
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

// What rendering needs of the plan, kept past the job's start.
struct ResponseShape {
  ResponseHead head;
  const Tokenizer* tokenizer = nullptr;
  bool logprobs = false;
  ChatAnswerShape answer;
};

ojson output_logprobs(const ResponseShape& s, const std::vector<SampleResult>& lps) {
  return s.logprobs ? chat_logprobs(s.tokenizer, lps)["content"] : ojson::array();
}

// The whole Response: the one sequence split into reasoning, text and calls.
class ResponseWholeSink final : public JobSink {
 public:
  ResponseWholeSink(std::shared_ptr<const ResponseShape> shape,
                    std::shared_ptr<HttpResponder> responder)
      : shape_(std::move(shape)), responder_(std::move(responder)) {}
  void end(const JobEnd& end, const GenerationJob& job) override {
    if (end.outcome == JobOutcome::kClientGone) return;
    if (!end.ok()) {
      const int status = http_status(end);
      return responder_->send(status, openai_error_body(status, end.error().what()));
    }
    const ResponseShape& s = *shape_;
    const CompletedSequence& seq = job.results().at(0).at(0);
    ResponseParts parts;
    ChatAnswerShape::Whole w = s.answer.split(seq.text);
    parts.reasoning = std::move(w.reasoning);
    parts.calls = std::move(w.calls);
    parts.text = std::move(w.content);
    parts.logprobs = output_logprobs(s, seq.logprobs);
    parts.incomplete = seq.finish == FinishReason::kLength;
    responder_->send(200, dump_json(response_object_of(s.head, parts, end.summary)));
  }

 private:
  std::shared_ptr<const ResponseShape> shape_;
  std::shared_ptr<HttpResponder> responder_;
};

// A Response streamed as semantic events: response.created / in_progress first, the settled
// reasoning and text as they come (the logprobs of the tokens behind the text with it), the
// calls when the answer is complete, then response.completed with the usage (or
// response.failed with the engine's error; also when the engine refuses the job).
class ResponseStreamSink final : public JobSink {
 public:
  ResponseStreamSink(std::shared_ptr<const ResponseShape> shape,
                     std::shared_ptr<HttpResponder> responder)
      : shape_(std::move(shape)),
        responder_(std::move(responder)),
        events_(shape_->head),
        split_(shape_->answer.stream()) {}

  void start() {
    responder_->start_stream(200, "text/event-stream");
    send(events_.start());
  }
  void output(size_t, const RequestOutput& out) override {
    std::lock_guard lock(mu_);
    if (out.finish == FinishReason::kLength) incomplete_ = true;
    ChatOutputStream::Delta d = split_.push(out.text, out.finish != FinishReason::kNone);
    if (shape_->logprobs)
      for (const ojson& lp : output_logprobs(*shape_, out.logprobs)) logprobs_.push_back(lp);
    if (!d.reasoning.empty()) {
      send(events_.reasoning(d.reasoning));
      if (d.content.empty()) logprobs_ = ojson::array();  // the reasoning's tokens
    }
    if (!d.content.empty()) {
      send(events_.text(d.content, logprobs_));
      logprobs_ = ojson::array();
    }
    if (!d.calls.empty()) send(events_.calls(d.calls));
  }
  void end(const JobEnd& end, const GenerationJob&) override {
    if (end.outcome == JobOutcome::kClientGone) return;
    std::lock_guard lock(mu_);
    send(end.outcome == JobOutcome::kFailed ? events_.fail(end.summary.error)
                                            : events_.finish(end.summary, incomplete_));
    responder_->end();
  }
  bool answers_start_failure() const override { return true; }
  void start_failed(const std::exception& e) override {
    send(events_.fail(e.what()));
    responder_->end();
  }

 private:
  void send(const std::vector<ojson>& events) {
    for (const ojson& e : events) responder_->write(sse_event(e));
  }

  std::shared_ptr<const ResponseShape> shape_;
  std::shared_ptr<HttpResponder> responder_;
  ResponseEventStream events_;
  ChatOutputStream split_;
  ojson logprobs_ = ojson::array();  // of tokens whose text is still held back
  bool incomplete_ = false;
  std::mutex mu_;
};

}  // namespace

void handle_responses(ServingState& state, const HttpRequest& req,
                      std::shared_ptr<HttpResponder> responder,
                      std::shared_ptr<RequestRecord> record) {
  // The body, parsed once (in the order sent: a schema's properties keep it).
  const ojson body = parse_ordered_json_body(req.body);
  const CompletionRequest request = read_responses_request(body, logs_prompts(*record));
  // Planned as every chat request; the planner's errors name the Responses API's fields.
  auto plan = in_responses_terms([&] {
    return std::make_shared<GenerationPlan>(
        plan_generation(state, request, req.header_lookup(), *record, random_id("resp_")));
  });
  ServedModel& model = *plan->model;
  responder->add_header("X-Model-Version", std::to_string(model.version));
  auto shape = std::make_shared<ResponseShape>();
  shape->head.id = plan->requests.at(0).id;
  shape->head.created_at = unix_seconds();
  shape->head.model = plan->name;
  shape->head.request = nlohmann::json(body);
  shape->tokenizer = model.tok();
  shape->logprobs = plan->params.logprobs.has_value();
  shape->answer = plan->answer_shape();
  if (plan->stream) {
    auto sink = std::make_shared<ResponseStreamSink>(shape, responder);
    sink->start();
    run_job(state, plan, responder, record, sink);
    return;
  }
  run_job(state, plan, responder, record, std::make_shared<ResponseWholeSink>(shape, responder));
}

}  // namespace tf
