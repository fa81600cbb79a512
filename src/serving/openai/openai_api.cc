#include "serving/openai/openai_api.h"

#include <fmt/format.h>

#include <functional>
#include <mutex>

#include "serving/core/planner.h"
#include "serving/openai/openai_render.h"
#include "serving/openai/openai_request.h"

namespace tf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string sse(const ojson& j) {
  return "data: " + dump_json(j) + "\n\n";
}

}  // namespace

namespace {

// A job answered whole: one body, or an error in OpenAI's shape.
class WholeSink final : public JobSink {
 public:
  WholeSink(std::shared_ptr<HttpResponder> responder, WholeBody body)
      : responder_(std::move(responder)), body_(std::move(body)) {}
  void end(const JobEnd& end, const GenerationJob& job) override {
    const int status = http_status(end);
    switch (end.outcome) {
      case JobOutcome::kClientGone:
        return;
      case JobOutcome::kFailed:
        return responder_->send(status, openai_error_body(status, end.summary.error,
                                                          status == 500 ? "server_error" : ""));
      case JobOutcome::kTimedOut:
        return responder_->send(504, openai_error_body(504, end.error().what(), "timeout"));
      case JobOutcome::kOk:
        return responder_->send(200, body_(job, end.summary));
    }
  }

 private:
  std::shared_ptr<HttpResponder> responder_;
  WholeBody body_;
};

// Completions and chat as Server-Sent Events: the role chunks first (chat), a chunk per output
// (echo, logprobs, tools and reasoning shaped), the usage chunk when asked, then [DONE]; an
// error after the headers travels inside the stream, as vLLM sends it.
class OpenAiStreamSink final : public JobSink {
 public:
  OpenAiStreamSink(std::shared_ptr<const GenerationPlan> plan,
                   std::shared_ptr<const OpenAiShape> shape,
                   std::shared_ptr<HttpResponder> responder, size_t prompts)
      : plan_(std::move(plan)),
        shape_(std::move(shape)),
        responder_(std::move(responder)),
        n_(plan_->choices_per_prompt),
        echoed_(prompts * static_cast<size_t>(n_), false),
        prompt_lps_(prompts) {
    // With tools or reasoning, each chat choice's text is shaped by a ChatChoiceStream:
    // reasoning and content deltas as they settle, tool calls parsed at the end.
    if (shape_->chat && (shape_->answer.tools || shape_->answer.reasoning))
      shapers_.assign(prompts * static_cast<size_t>(n_), ChatChoiceStream(*shape_));
  }

  // The headers and, for chat, the first chunk of every choice (it carries the role).
  void start(size_t prompts) {
    responder_->start_stream(200, "text/event-stream");
    if (shape_->chat) {
      for (size_t i = 0; i < prompts * static_cast<size_t>(n_); ++i)
        responder_->write(sse(openai_role_chunk(*shape_, static_cast<int64_t>(i))));
    }
  }

  void output(size_t i, const RequestOutput& out) override {
    // (Outputs are drained on the connection's strand; the lock keeps the shapers' state
    // ordered for a checker that cannot see the strand.)
    std::lock_guard lock(mu_);
    const size_t index = i * static_cast<size_t>(n_) + static_cast<size_t>(out.index);
    const bool echo = plan_->echo && index < echoed_.size() && !echoed_[index];
    if (index < shapers_.size()) {
      for (const ojson& chunk : shapers_[index].chunks(i, out)) responder_->write(sse(chunk));
      return;
    }
    // Echo with logprobs: each prompt's logprobs arrive with its request's first output; every
    // choice's echo chunk lists them.
    if (shape_->logprobs && plan_->echo && !out.prompt_logprobs.empty() && i < prompt_lps_.size())
      prompt_lps_[i] = completion_prompt_logprobs(
          shape_->tokenizer, shape_->first_prompt_token.at(i), out.prompt_logprobs);
    if (auto chunk = openai_stream_chunk(*shape_, i, out, echo)) {
      if (echo && shape_->logprobs) {
        ojson part = prompt_lps_[i];
        if (part.is_null())  // a one-token prompt: its token has no logprob
          part =
              completion_prompt_logprobs(shape_->tokenizer, shape_->first_prompt_token.at(i), {});
        prepend_logprobs((*chunk)["choices"][0]["logprobs"], part);
      }
      if (echo) echoed_[index] = true;
      responder_->write(sse(*chunk));
    }
  }

  void end(const JobEnd& end, const GenerationJob&) override {
    if (end.outcome == JobOutcome::kClientGone) return;
    if (end.outcome == JobOutcome::kFailed) {  // the headers are out: the error is in the stream
      const int status = http_status(end);
      responder_->write(
          "data: " +
          openai_error_body(status, end.summary.error, status == 500 ? "server_error" : "") +
          "\n\n");
    } else if (plan_->include_usage) {
      responder_->write(sse(openai_usage_chunk(*shape_, end.summary)));
    }
    responder_->write("data: [DONE]\n\n");
    responder_->end();
  }

  bool answers_start_failure() const override { return true; }
  void start_failed(const std::exception& e) override {
    responder_->write("data: " + openai_error_body(e) + "\n\n");
    responder_->write("data: [DONE]\n\n");
    responder_->end();
  }

 private:
  std::shared_ptr<const GenerationPlan> plan_;
  std::shared_ptr<const OpenAiShape> shape_;
  std::shared_ptr<HttpResponder> responder_;
  int32_t n_;
  std::vector<bool> echoed_;
  std::vector<ojson> prompt_lps_;
  std::vector<ChatChoiceStream> shapers_;
  std::mutex mu_;
};

}  // namespace

std::shared_ptr<JobSink> whole_answer(std::shared_ptr<HttpResponder> responder, WholeBody body) {
  return std::make_shared<WholeSink>(std::move(responder), std::move(body));
}

OpenAiShape openai_shape(const GenerationPlan& plan, const std::string& id,
                         const std::string& model, bool chat) {
  OpenAiShape shape;
  shape.id = id;
  shape.model = model;
  shape.created = unix_seconds();
  shape.chat = chat;
  shape.logprobs = plan.params.logprobs.has_value();
  shape.choices_per_prompt = plan.choices_per_prompt;
  shape.tokenizer = plan.model->tok();
  shape.answer = plan.answer_shape();
  if (plan.echo) {
    for (const auto& pr : plan.prompts)
      shape.echo.push_back(shape.tokenizer ? shape.tokenizer->decode(pr, false) : std::string());
  }
  shape.prompt_logprobs_field = plan.prompt_logprobs.has_value();
  for (const auto& pr : plan.prompts) shape.first_prompt_token.push_back(pr.at(0));
  return shape;
}

void handle_openai_generation(ServingState& state, const HttpRequest& req,
                              std::shared_ptr<HttpResponder> responder,
                              std::shared_ptr<RequestRecord> record, bool chat) {
  const CompletionRequest request =
      read_openai_request(parse_json_body(req.body), chat, logs_prompts(*record),
                          [&] { return nlohmann::ordered_json::parse(req.body); });
  const std::string id = random_id(chat ? "chatcmpl-" : "cmpl-");
  auto parsed = std::make_shared<GenerationPlan>(
      plan_generation(state, request, req.header_lookup(), *record, id));
  ServedModel& model = *parsed->model;
  responder->add_header("X-Model-Version", std::to_string(model.version));
  const size_t prompts = parsed->requests.size();
  auto shape = std::make_shared<const OpenAiShape>(openai_shape(*parsed, id, parsed->name, chat));
  if (parsed->stream) {
    auto sink = std::make_shared<OpenAiStreamSink>(parsed, shape, responder, prompts);
    sink->start(prompts);
    run_job(state, parsed, responder, record, sink);
    return;
  }
  run_job(state, parsed, responder, record,
          whole_answer(responder, [shape](const GenerationJob& job, const JobSummary& summary) {
            return dump_json(openai_response(*shape, job.results(), summary));
          }));
}

}  // namespace tf
