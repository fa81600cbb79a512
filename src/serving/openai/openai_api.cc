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

GenerationJob::DoneFn answer_whole(std::shared_ptr<const GenerationPlan> plan,
                                   std::shared_ptr<RequestRecord> record,
                                   std::shared_ptr<HttpResponder> responder, WholeBody body) {
  return [=](const GenerationJob& job, bool client_gone) {
    const JobSummary summary = summarize(*plan, job, *record);
    record_job(summary, *record, plan->admission.get());
    if (client_gone) return log_request(*record, 499);
    if (!summary.error.empty()) {
      const int status = summary.error_status();
      responder->send(
          status, openai_error_body(status, summary.error, status == 500 ? "server_error" : ""));
      return log_request(*record, status);
    }
    if (summary.timed_out) {
      responder->send(504, openai_error_body(504, deadline_message(plan->time_limit), "timeout"));
      return log_request(*record, 504);
    }
    responder->send(200, body(job, summary));
    log_request(*record, 200);
  };
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
  shape.tools = plan.tools;
  shape.tool_format = plan.tool_format;
  shape.reasoning = plan.reasoning;
  shape.thinking_opened = plan.thinking_opened;
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
  auto parsed = std::make_shared<GenerationPlan>(plan_generation(
      state, request,
      [&](const std::string& h) {
        const std::string* v = req.header(h);
        return v ? *v : std::string();
      },
      *record, id));
  ServedModel& model = *parsed->model;
  responder->add_header("X-Model-Version", std::to_string(model.version));
  const JobObserver observer{&state.metrics,
                             {{"model", model.name}, {"version", std::to_string(model.version)}}};
  std::vector<GenerationRequest> reqs = std::move(parsed->requests);
  auto shared = std::make_shared<const OpenAiShape>(openai_shape(*parsed, id, model.name, chat));

  if (parsed->stream) {
    const int32_t n = parsed->choices_per_prompt;
    auto echoed = std::make_shared<std::vector<bool>>(reqs.size() * n, false);
    // Echo with logprobs: each prompt's logprobs arrive with its request's first output; every
    // choice's echo chunk lists them.
    auto prompt_lps = std::make_shared<std::vector<ojson>>(reqs.size());
    // With tools or reasoning, each chat choice's text is shaped by a ChatChoiceStream:
    // reasoning and content deltas as they settle, tool calls parsed at the end.
    auto shapers = std::make_shared<std::vector<ChatChoiceStream>>();
    if (chat && (shared->tools || shared->reasoning))
      shapers->assign(reqs.size() * n, ChatChoiceStream(*shared));
    auto shapers_mu = std::make_shared<std::mutex>();
    GenerationJob::EventFn on_event = [=](size_t i, const RequestOutput& out) {
      const size_t index = i * static_cast<size_t>(n) + static_cast<size_t>(out.index);
      const bool echo = parsed->echo && index < echoed->size() && !(*echoed)[index];
      if (index < shapers->size()) {
        std::lock_guard lock(*shapers_mu);
        for (const ojson& chunk : (*shapers)[index].chunks(i, out)) responder->write(sse(chunk));
        return;
      }
      if (shared->logprobs && parsed->echo && !out.prompt_logprobs.empty() &&
          i < prompt_lps->size())
        (*prompt_lps)[i] = completion_prompt_logprobs(
            shared->tokenizer, shared->first_prompt_token.at(i), out.prompt_logprobs);
      if (auto chunk = openai_stream_chunk(*shared, i, out, echo)) {
        if (echo && shared->logprobs) {
          ojson part = (*prompt_lps)[i];
          if (part.is_null())  // a one-token prompt: its token has no logprob
            part =
                completion_prompt_logprobs(shared->tokenizer, shared->first_prompt_token.at(i), {});
          prepend_logprobs((*chunk)["choices"][0]["logprobs"], part);
        }
        if (echo) (*echoed)[index] = true;
        responder->write(sse(*chunk));
      }
    };
    GenerationJob::DoneFn on_done = [=](const GenerationJob& job, bool client_gone) {
      const JobSummary summary = summarize(*parsed, job, *record);
      record_job(summary, *record, parsed->admission.get());
      if (client_gone) return log_request(*record, 499);
      if (!summary.error.empty()) {  // the headers are out: the error travels in the stream
        const int status = summary.error_status();
        responder->write(
            "data: " +
            openai_error_body(status, summary.error, status == 500 ? "server_error" : "") + "\n\n");
        responder->write("data: [DONE]\n\n");
        responder->end();
        return log_request(*record, status);
      }
      if (parsed->include_usage) responder->write(sse(openai_usage_chunk(*shared, summary)));
      responder->write("data: [DONE]\n\n");
      responder->end();
      log_request(*record, 200);
    };
    responder->start_stream(200, "text/event-stream");
    if (chat) {  // the first chunk of every choice carries the role
      for (size_t i = 0; i < reqs.size() * n; ++i)
        responder->write(sse(openai_role_chunk(*shared, static_cast<int64_t>(i))));
    }
    try {
      GenerationJob::start(*model.engine, std::move(reqs), responder, state.jobs, on_event, on_done,
                           observer);
    } catch (const std::exception& e) {
      // The headers are out: the error travels in the stream, as vLLM sends it (logged first:
      // this runs on the preparation pool, not the connection's strand).
      log_request(*record, http_status_of(e));
      responder->write("data: " + openai_error_body(e) + "\n\n");
      responder->write("data: [DONE]\n\n");
      responder->end();
    }
    return;
  }

  GenerationJob::start(
      *model.engine, std::move(reqs), responder, state.jobs, nullptr,
      answer_whole(parsed, record, responder,
                   [shared](const GenerationJob& job, const JobSummary& summary) {
                     return dump_json(openai_response(*shared, job.results(), summary));
                   }),
      observer);
}

}  // namespace tf
