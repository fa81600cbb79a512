#include "serving/anthropic/anthropic_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <optional>

#include "chat/output_stream.h"
#include "chat/reasoning.h"
#include "chat/tool_calls.h"
#include "serving/anthropic/anthropic_request.h"
#include "serving/core/job_lifecycle.h"
#include "serving/core/planner.h"
#include "serving/core/prompt.h"

namespace tf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string event(const char* type, const ojson& data) {
  return fmt::format("event: {}\ndata: {}\n\n", type, dump_json(data));
}

// What the answer's blocks and stop reason need of the plan, kept past the job's start.
struct MessageShape {
  std::string id, model;
  const Tokenizer* tokenizer = nullptr;
  std::vector<int32_t> eos_ids;
  std::vector<std::string> stops;
  bool skip_special_tokens = true;
  ChatAnswerShape answer;
  int64_t input_tokens = 0;
};

ojson tool_use_block(const ToolCall& c) {
  ojson input = ojson::parse(c.arguments, nullptr, false);
  if (!input.is_object()) input = ojson::object();
  const std::string id = c.id.rfind("call_", 0) == 0 ? "toolu_" + c.id.substr(5) : c.id;
  return {{"type", "tool_use"}, {"id", id}, {"name", c.name}, {"input", input}};
}

// end_turn (the model's end of turn), max_tokens, stop_sequence (which one: the stop sequence
// that follows the text in the decoded tokens), tool_use (calls were made).
void set_stop(const MessageShape& s, const CompletedSequence& seq, bool called,
              AnthropicAnswer& a) {
  a.stop_reason = "end_turn";
  if (seq.finish == FinishReason::kLength) {
    a.stop_reason = "max_tokens";
  } else if (called) {
    a.stop_reason = "tool_use";
  } else if (seq.finish == FinishReason::kStop && !s.stops.empty() && !seq.tokens.empty() &&
             std::find(s.eos_ids.begin(), s.eos_ids.end(), seq.tokens.back()) == s.eos_ids.end()) {
    const std::string full =
        s.tokenizer ? s.tokenizer->decode(seq.tokens, s.skip_special_tokens) : std::string();
    for (const std::string& stop : s.stops) {
      // The stop begins where the returned text ends; a few bytes of slack for decodings that
      // differ at the seam (a space the text's decoder dropped).
      const size_t at = full.find(stop, seq.text.size() > 4 ? seq.text.size() - 4 : 0);
      if (at != std::string::npos) {
        a.stop_reason = "stop_sequence";
        a.stop_sequence = stop;
        break;
      }
    }
  }
}

AnthropicAnswer answer_of(const MessageShape& s, const CompletedSequence& seq) {
  AnthropicAnswer a;
  ChatAnswerShape::Whole w = s.answer.split(seq.text);
  if (w.reasoning)
    a.content.push_back({{"type", "thinking"}, {"thinking", *w.reasoning}, {"signature", ""}});
  const std::string content = w.content.value_or("");
  const std::vector<ToolCall>& calls = w.calls;
  if (!content.empty() || (calls.empty() && a.content.empty()))
    a.content.push_back({{"type", "text"}, {"text", content}});
  for (const ToolCall& c : calls) a.content.push_back(tool_use_block(c));
  set_stop(s, seq, !calls.empty(), a);
  return a;
}

ojson message_json(const MessageShape& s, const AnthropicAnswer& a, int64_t output_tokens) {
  return {{"id", s.id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", s.model},
          {"content", a.content},
          {"stop_reason", a.stop_reason},
          {"stop_sequence", a.stop_sequence},
          {"usage", {{"input_tokens", s.input_tokens}, {"output_tokens", output_tokens}}}};
}

class WholeMessageSink final : public JobSink {
 public:
  WholeMessageSink(std::shared_ptr<const MessageShape> shape,
                   std::shared_ptr<HttpResponder> responder)
      : shape_(std::move(shape)), responder_(std::move(responder)) {}
  void end(const JobEnd& end, const GenerationJob& job) override {
    if (end.outcome == JobOutcome::kClientGone) return;
    if (!end.ok()) {
      const int status = http_status(end);
      return responder_->send(status, anthropic_error_body(status, end.error().what()));
    }
    const CompletedSequence& seq = job.results().at(0).at(0);
    responder_->send(200, dump_json(message_json(*shape_, answer_of(*shape_, seq),
                                                 end.summary.completion_tokens)));
  }

 private:
  std::shared_ptr<const MessageShape> shape_;
  std::shared_ptr<HttpResponder> responder_;
};

// Anthropic's event stream: each content block opened when its first text comes (thinking,
// then text), closed when another begins; tool_use blocks at the end with their input as one
// input_json_delta; then message_delta (stop reason, usage) and message_stop.
class MessageStreamSink final : public JobSink {
 public:
  MessageStreamSink(std::shared_ptr<const MessageShape> shape,
                    std::shared_ptr<HttpResponder> responder)
      : shape_(std::move(shape)),
        responder_(std::move(responder)),
        split_(shape_->answer.stream()) {}

  void start() {
    responder_->start_stream(200, "text/event-stream");
    AnthropicAnswer none;
    ojson msg = message_json(*shape_, none, 0);
    msg["stop_reason"] = nullptr;
    write(event("message_start", {{"type", "message_start"}, {"message", msg}}));
    write(event("ping", {{"type", "ping"}}));
  }

  void output(size_t, const RequestOutput& out) override {
    std::lock_guard lock(mu_);
    ChatOutputStream::Delta d = split_.push(out.text, out.finish != FinishReason::kNone);
    if (!d.calls.empty()) calls_ = std::move(d.calls);
    if (!d.reasoning.empty()) delta("thinking", d.reasoning);
    if (!d.content.empty()) delta("text", d.content);
  }

  void end(const JobEnd& end, const GenerationJob& job) override {
    if (end.outcome == JobOutcome::kClientGone) return;
    std::lock_guard lock(mu_);
    if (end.outcome == JobOutcome::kFailed) {
      const int status = http_status(end);
      ojson err = ojson::parse(anthropic_error_body(status, end.summary.error));
      write(event("error", err));
      return responder_->end();
    }
    close_block();
    for (const ToolCall& c : calls_) {
      ojson block = tool_use_block(c);
      const std::string args = dump_json(block["input"]);
      block["input"] = ojson::object();
      write(event("content_block_start",
                  {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}}));
      write(event("content_block_delta",
                  {{"type", "content_block_delta"},
                   {"index", index_},
                   {"delta", {{"type", "input_json_delta"}, {"partial_json", args}}}}));
      write(event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}}));
      ++index_;
    }
    if (index_ == 0) {  // no content at all: one empty text block, as the whole answer has
      open("text");
      close_block();
    }
    AnthropicAnswer a;
    const auto& results = job.results();
    if (!results.empty() && !results[0].empty())
      set_stop(*shape_, results[0][0], !calls_.empty(), a);
    write(event("message_delta",
                {{"type", "message_delta"},
                 {"delta", {{"stop_reason", a.stop_reason}, {"stop_sequence", a.stop_sequence}}},
                 {"usage", {{"output_tokens", end.summary.completion_tokens}}}}));
    write(event("message_stop", {{"type", "message_stop"}}));
    responder_->end();
  }

  bool answers_start_failure() const override { return true; }
  void start_failed(const std::exception& e) override {
    write(event("error", ojson::parse(anthropic_error_body(http_status_of(e), e.what()))));
    responder_->end();
  }

 private:
  void write(std::string s) { responder_->write(std::move(s)); }
  void open(const std::string& type) {
    if (open_ == type) return;
    close_block();
    open_ = type;
    const ojson block = type == "thinking" ? ojson{{"type", "thinking"}, {"thinking", ""}}
                                           : ojson{{"type", "text"}, {"text", ""}};
    write(event("content_block_start",
                {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}}));
  }
  void close_block() {
    if (open_.empty()) return;
    if (open_ == "thinking")
      write(event("content_block_delta",
                  {{"type", "content_block_delta"},
                   {"index", index_},
                   {"delta", {{"type", "signature_delta"}, {"signature", ""}}}}));
    write(event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}}));
    open_.clear();
    ++index_;
  }
  void delta(const std::string& type, const std::string& text) {
    open(type);
    const ojson d = type == "thinking" ? ojson{{"type", "thinking_delta"}, {"thinking", text}}
                                       : ojson{{"type", "text_delta"}, {"text", text}};
    write(event("content_block_delta",
                {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}}));
  }

  std::shared_ptr<const MessageShape> shape_;
  std::shared_ptr<HttpResponder> responder_;
  ChatOutputStream split_;
  std::vector<ToolCall> calls_;
  std::string open_;  // the open block's type ("": none)
  int64_t index_ = 0;
  std::mutex mu_;
};

AnthropicRequest read_messages_body(const HttpRequest& req, const RequestRecord& record,
                                    bool count_only) {
  const ojson ordered = parse_ordered_json_body(req.body);  // parsed once
  return read_anthropic_request(json(ordered), ordered, logs_prompts(record), count_only);
}

}  // namespace

const char* anthropic_error_type(int status) {
  switch (status) {
    case 400:
    case 405:
    case 422:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    case 504:
      return "timeout_error";
    default:
      return status < 500 ? "invalid_request_error" : "api_error";
  }
}

std::string anthropic_error_body(int status, const std::string& message) {
  return dump_json(
      ojson{{"type", "error"},
            {"error", {{"type", anthropic_error_type(status)}, {"message", message}}}});
}

void handle_messages(ServingState& state, const HttpRequest& req,
                     std::shared_ptr<HttpResponder> responder,
                     std::shared_ptr<RequestRecord> record) {
  const AnthropicRequest a = read_messages_body(req, *record, false);
  auto plan = std::make_shared<GenerationPlan>(
      plan_generation(state, a.request, req.header_lookup(), *record, random_id("msg_")));
  const ServedModel& model = *plan->model;
  responder->add_header("X-Model-Version", std::to_string(model.version));
  auto shape = std::make_shared<MessageShape>();
  shape->id = plan->requests.at(0).id;
  shape->model = plan->name;
  shape->tokenizer = model.tok();
  shape->eos_ids = model.eos_ids;
  shape->stops = plan->params.stop;
  shape->skip_special_tokens = plan->params.skip_special_tokens;
  shape->answer = plan->answer_shape();
  shape->input_tokens = static_cast<int64_t>(plan->requests.at(0).prompt.size());
  if (plan->stream) {
    auto sink = std::make_shared<MessageStreamSink>(shape, responder);
    sink->start();
    run_job(state, plan, responder, record, sink);
    return;
  }
  run_job(state, plan, responder, record, std::make_shared<WholeMessageSink>(shape, responder));
}

void handle_count_tokens(ServingState& state, const HttpRequest& req,
                         std::shared_ptr<HttpResponder> responder, RequestRecord& record) {
  const AnthropicRequest a = read_messages_body(req, record, true);
  auto model = resolve_model(state, record, a.request.model, "", req.header_lookup());
  record.model = model->name;
  record.version = model->version;
  const CompletionRequest& r = a.request;
  const std::vector<int32_t> ids = render_chat_prompt(
      *model->chat_format(), r.messages, true, model->tokenizer, model->config().max_seq_len,
      r.chat_template_kwargs, r.tools.names.empty() ? ojson() : r.tools.tools);
  log_request(record, 200);
  responder->send(200, dump_json(ojson{{"input_tokens", ids.size()}}));
}

}  // namespace tf
