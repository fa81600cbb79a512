#include "serving/grpc_generation.h"

#include <fmt/format.h>

#include <deque>

#include "core/cancel.h"
#include "serving/generation_job.h"
#include "serving/openai_api.h"
#include "serving/openai_render.h"
#include "serving/openai_request.h"
#include "tokenizer/unicode.h"

namespace tf {
namespace {

using json = nlohmann::json;
constexpr const char* kService = "tokenflow.v1.GenerationService";

v1::FinishReason finish_of(FinishReason f) {
  switch (f) {
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kAbort:
      return v1::FINISH_REASON_ABORT;
    default:
      return v1::FINISH_REASON_UNSPECIFIED;
  }
}

void add_logprobs(const Tokenizer* tok, const std::vector<SampleResult>& lps,
                  google::protobuf::RepeatedPtrField<v1::TokenLogprob>* out) {
  for (const auto& r : lps) {
    v1::TokenLogprob* lp = out->Add();
    lp->set_token_id(r.token);
    lp->set_token(token_bytes(tok, r.token));
    lp->set_logprob(r.logprob);
    for (const auto& alt : r.top) {
      v1::TopLogprob* t = lp->add_top_logprobs();
      t->set_token_id(alt.token);
      t->set_token(token_bytes(tok, alt.token));
      t->set_logprob(alt.logprob);
    }
  }
}

json ids_json(const google::protobuf::RepeatedField<int32_t>& ids) {
  return json(std::vector<int32_t>(ids.begin(), ids.end()));
}

// Usage over the returned sequences; cached prompt tokens from the engine's timings.
void fill_usage(const JobSummary& s, v1::Usage* u) {
  u->set_prompt_tokens(s.prompt_tokens);
  u->set_completion_tokens(s.completion_tokens);
  u->set_total_tokens(s.prompt_tokens + s.completion_tokens);
  u->set_cached_prompt_tokens(s.cached_prompt_tokens);
}

// The model a tokenize / detokenize request names (nullptr: throws 404).
std::shared_ptr<ServedModel> resolve_model(GrpcCall& call, ServingState& state,
                                           const std::string& field) {
  const ModelRequestSpec spec = state.registry.parse_model_field(field);
  auto m = state.registry.resolve(spec, {}, call.header_fn());
  if (!m) throw HttpError(404, state.registry.unavailable_reason(spec), "model_not_found", "model");
  call.record->model = m->name;
  call.record->version = m->version;
  if (call.record->key && !call.record->key->allows(m->name))
    throw HttpError(403, fmt::format("this API key may not use model '{}'", m->name),
                    "model_not_allowed");
  return m;
}

json chat_json(const v1::Chat& chat) {
  json messages = json::array();
  for (const auto& m : chat.messages())
    messages.push_back({{"role", m.role()}, {"content", m.content()}});
  json body = {{"messages", messages}};
  if (chat.has_add_generation_prompt())
    body["add_generation_prompt"] = chat.add_generation_prompt();
  return body;
}

// What a finished job ends with: DEADLINE_EXCEEDED when it ran past its deadline and a sequence
// was stopped for it, else OK.
grpc::Status end_status(const JobSummary& summary, std::chrono::milliseconds limit) {
  if (!summary.timed_out) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, deadline_message(limit));
}

// Starts the plan's job on the call's strand; books it as REST does when it ends (record_job),
// then calls done(job, summary, client_gone).
void start_job(GrpcContext& ctx, std::shared_ptr<GenerationPlan> plan,
               std::shared_ptr<RequestRecord> record, std::shared_ptr<GrpcCallHost> host,
               GenerationJob::EventFn on_event,
               std::function<void(const GenerationJob&, const JobSummary&, bool)> done,
               std::function<void(const std::exception&)> failed) {
  const ServedModel& model = *plan->model;
  JobObserver observer{&ctx.state.metrics,
                       {{"model", model.name}, {"version", std::to_string(model.version)}}};
  start_call_job(
      ctx, std::move(host), *model.engine, std::move(plan->requests), std::move(observer),
      std::move(on_event),
      [plan, record, done = std::move(done)](const GenerationJob& job, bool client_gone) {
        const JobSummary summary = summarize(*plan, job, *record);
        record_job(summary, *record, plan->admission.get());
        done(job, summary, client_gone);
      },
      std::move(failed));
}

// --- Generate (unary) ---------------------------------------------------------------------

void start_generate(GrpcContext& ctx, UnaryJobCall* r, const v1::GenerateRequest& req,
                    v1::GenerateResponse* resp) {
  r->call.admit();
  bool chat = false;
  const json body = openai_body_of(req, /*stream=*/false, chat);
  const std::string id = random_id(chat ? "chatcmpl-" : "cmpl-");
  auto plan = std::make_shared<GenerationPlan>(plan_generation(
      ctx.state, body, chat, r->call.header_fn(), *r->call.record, id, r->call.time_limit()));
  r->server_ctx->AddInitialMetadata("x-model-version", std::to_string(plan->model->version));
  const Tokenizer* tok = plan->model->tok();
  resp->set_id(id);
  resp->set_model(plan->model->name);
  resp->set_model_version(plan->model->version);
  auto record = r->call.record;
  start_job(
      ctx, plan, record, r->host, nullptr,
      [r, plan, tok, resp](const GenerationJob& job, const JobSummary& summary, bool client_gone) {
        if (client_gone) return r->finish(client_gone_status(r->server_ctx));
        const grpc::Status status = end_status(summary, plan->time_limit);
        if (!status.ok()) return r->finish(status);
        for (size_t i = 0; i < job.num_prompts(); ++i) {
          const auto& seqs = job.results()[i];
          const auto& picks = summary.returned[i];
          for (size_t k = 0; k < picks.size(); ++k) {
            const GeneratedSequence& s = seqs[picks[k]];
            v1::Sequence* out = resp->add_sequences();
            out->set_index(static_cast<int32_t>(k));
            out->set_text(unicode::sanitize_utf8(s.text));
            out->mutable_token_ids()->Add(s.tokens.begin(), s.tokens.end());
            out->set_finish_reason(finish_of(s.finish));
            out->set_cumulative_logprob(s.cumulative_logprob);
            if (plan->params.logprobs) add_logprobs(tok, s.logprobs, out->mutable_logprobs());
          }
        }
        fill_usage(summary, resp->mutable_usage());
        r->finish(grpc::Status::OK);
      },
      [r](const std::exception& e) { r->finish(r->call.error_status(e)); });
}

// --- GenerateStream ---------------------------------------------------------------------------

// Writes a call's messages one at a time, in order, and finishes after the last.
class StreamReactor final : public grpc::ServerWriteReactor<v1::GenerateStreamResponse> {
 public:
  StreamReactor(GrpcContext& ctx, grpc::CallbackServerContext* sctx, const v1::GenerateRequest* req)
      : ctx_(ctx),
        sctx_(sctx),
        call_(ctx, sctx, kService, "GenerateStream", "server_stream"),
        host_(std::make_shared<GrpcCallHost>(ctx.pool)) {
    // The reactor lives until OnDone, which follows the Finish that end() starts.
    prepare_call(ctx, *host_, *call_.record, [this, req] {
      try {
        start(*req);
      } catch (const std::exception& e) {
        end(call_.error_status(e));
      }
    });
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock lock(mu_);
    writing_ = false;
    if (!ok) {  // the client is gone: nothing more can be written
      broken_ = true;
      queue_.clear();
    }
    next(lock);
  }
  void OnCancel() override { host_->cancelled(); }
  void OnDone() override { delete this; }

 private:
  void start(const v1::GenerateRequest& req) {
    call_.admit();
    bool chat = false;
    const json body = openai_body_of(req, /*stream=*/true, chat);
    const std::string id = random_id(chat ? "chatcmpl-" : "cmpl-");
    auto plan = std::make_shared<GenerationPlan>(plan_generation(
        ctx_.state, body, chat, call_.header_fn(), *call_.record, id, call_.time_limit()));
    sctx_->AddInitialMetadata("x-model-version", std::to_string(plan->model->version));
    const Tokenizer* tok = plan->model->tok();
    const int32_t n = plan->choices_per_prompt;
    const bool logprobs = plan->params.logprobs.has_value();
    GenerationJob::EventFn on_event = [this, tok, n, logprobs](size_t, const RequestOutput& out) {
      if (out.index >= n) return;  // beams beyond the returned ones
      if (out.token_ids.empty() && out.text.empty() && out.finish == FinishReason::kNone) return;
      v1::GenerateStreamResponse msg;
      v1::GenerationStep* step = msg.mutable_step();
      step->set_index(out.index);
      step->mutable_token_ids()->Add(out.token_ids.begin(), out.token_ids.end());
      step->set_text(unicode::sanitize_utf8(out.text));
      if (logprobs) add_logprobs(tok, out.logprobs, step->mutable_logprobs());
      step->set_finish_reason(finish_of(out.finish));
      send(std::move(msg));
    };
    auto record = call_.record;
    start_job(
        ctx_, plan, record, host_, std::move(on_event),
        [this, plan, id](const GenerationJob& job, const JobSummary& summary, bool client_gone) {
          if (client_gone) return end(client_gone_status(sctx_));
          v1::GenerateStreamResponse msg;
          v1::GenerationEnd* e = msg.mutable_end();
          e->set_id(id);
          e->set_model(plan->model->name);
          e->set_model_version(plan->model->version);
          for (size_t i = 0; i < job.num_prompts(); ++i) {
            const auto& seqs = job.results()[i];
            for (size_t k : summary.returned[i]) e->add_finish_reasons(finish_of(seqs[k].finish));
          }
          fill_usage(summary, e->mutable_usage());
          send(std::move(msg));
          end(end_status(summary, plan->time_limit));
        },
        [this](const std::exception& e) { end(call_.error_status(e)); });
  }

  void send(v1::GenerateStreamResponse msg) {
    std::unique_lock lock(mu_);
    if (broken_ || finishing_) return;
    queue_.push_back(std::move(msg));
    next(lock);
  }

  // Finishes with status once the queued messages are written.
  void end(grpc::Status status) {
    std::unique_lock lock(mu_);
    if (finishing_) return;
    finishing_ = true;
    status_ = std::move(status);
    next(lock);
  }

  // Starts the next write, or the finish after the last; called with mu_ held (released here,
  // so that a reaction run inline by gRPC cannot deadlock on it).
  void next(std::unique_lock<std::mutex>& lock) {
    if (writing_ || finished_) return;
    if (!queue_.empty()) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      lock.unlock();
      StartWrite(&current_);
      return;
    }
    if (!finishing_) return;
    finished_ = true;
    const grpc::Status status = status_;
    lock.unlock();
    call_.finish(status);
    Finish(status);
  }

  GrpcContext& ctx_;
  grpc::CallbackServerContext* sctx_;
  GrpcCall call_;
  std::shared_ptr<GrpcCallHost> host_;
  std::mutex mu_;
  std::deque<v1::GenerateStreamResponse> queue_;
  v1::GenerateStreamResponse current_;  // the message being written
  bool writing_ = false, broken_ = false, finishing_ = false, finished_ = false;
  grpc::Status status_;
};

}  // namespace

json openai_body_of(const v1::GenerateRequest& req, bool stream, bool& chat) {
  json body = json::object();
  if (!req.model().empty()) body["model"] = req.model();
  chat = false;
  switch (req.prompt_case()) {
    case v1::GenerateRequest::kText:
      body["prompt"] = req.text();
      break;
    case v1::GenerateRequest::kTokenIds:
      if (req.token_ids().ids().empty())
        throw HttpError(400, "'token_ids' must not be empty", "", "token_ids");
      body["prompt"] = ids_json(req.token_ids().ids());
      break;
    case v1::GenerateRequest::kChat:
      chat = true;
      body.update(chat_json(req.chat()));
      break;
    default:
      throw HttpError(400, "a prompt is required: set 'text', 'token_ids' or 'chat'", "", "prompt");
  }
  if (stream) body["stream"] = true;
  const v1::SamplingParameters& s = req.sampling();
#define TF_OPTIONAL(field) \
  if (s.has_##field()) body[#field] = s.field()
  TF_OPTIONAL(max_tokens);
  TF_OPTIONAL(min_tokens);
  TF_OPTIONAL(temperature);
  TF_OPTIONAL(top_k);
  TF_OPTIONAL(top_p);
  TF_OPTIONAL(min_p);
  TF_OPTIONAL(typical_p);
  TF_OPTIONAL(seed);
  TF_OPTIONAL(repetition_penalty);
  TF_OPTIONAL(presence_penalty);
  TF_OPTIONAL(frequency_penalty);
  TF_OPTIONAL(no_repeat_ngram_size);
  TF_OPTIONAL(n);
  TF_OPTIONAL(best_of);
  TF_OPTIONAL(length_penalty);
  TF_OPTIONAL(skip_special_tokens);
#undef TF_OPTIONAL
  if (s.has_logprobs()) {
    if (chat) {  // the chat body's shape: a flag and a count
      body["logprobs"] = true;
      body["top_logprobs"] = s.logprobs();
    } else {
      body["logprobs"] = s.logprobs();
    }
  }
  if (!s.logit_bias().empty()) {
    json bias = json::object();
    for (const auto& [id, v] : s.logit_bias()) bias[std::to_string(id)] = v;
    body["logit_bias"] = bias;
  }
  if (!s.bad_words_ids().empty()) {
    json words = json::array();
    for (const auto& w : s.bad_words_ids()) words.push_back(ids_json(w.ids()));
    body["bad_words_ids"] = words;
  }
  if (!s.stop().empty()) body["stop"] = std::vector<std::string>(s.stop().begin(), s.stop().end());
  if (!s.stop_token_ids().empty()) body["stop_token_ids"] = ids_json(s.stop_token_ids());
  if (s.ignore_eos()) body["ignore_eos"] = true;
  if (s.include_stop_str_in_output()) body["include_stop_str_in_output"] = true;
  if (s.use_beam_search()) body["use_beam_search"] = true;
  if (s.early_stopping()) body["early_stopping"] = true;
  if (req.has_add_special_tokens()) body["add_special_tokens"] = req.add_special_tokens();
  if (!req.user().empty()) body["user"] = req.user();
  if (req.priority() != 0) body["priority"] = req.priority();
  if (!req.cache_salt().empty()) body["cache_salt"] = req.cache_salt();
  return body;
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Generate(grpc::CallbackServerContext* context,
                                                          const v1::GenerateRequest* request,
                                                          v1::GenerateResponse* response) {
  auto* r = new UnaryJobCall(ctx_, context, kService, "Generate");
  // Nothing ends the call before r->finish, so r and the request outlive the preparation.
  prepare_call(ctx_, *r->host, *r->call.record, [this, r, request, response] {
    try {
      start_generate(ctx_, r, *request, response);
    } catch (const std::exception& e) {
      r->finish(r->call.error_status(e));
    }
  });
  return r;
}

grpc::ServerWriteReactor<v1::GenerateStreamResponse>* GenerationServiceImpl::GenerateStream(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return new StreamReactor(ctx_, context, request);
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Tokenize(grpc::CallbackServerContext* context,
                                                          const v1::TokenizeRequest* request,
                                                          v1::TokenizeResponse* response) {
  return answer_now(ctx_, context, kService, "Tokenize", [&](GrpcCall& call) {
    auto m = resolve_model(call, ctx_.state, request->model());
    const Tokenizer* tok = m->tok();
    if (!tok) throw HttpError(400, "this model has no tokenizer");
    std::vector<int32_t> ids;
    try {
      if (request->has_chat()) {
        ids = parse_chat_prompt(chat_json(request->chat()), m->tokenizer, m->config());
      } else if (request->has_text()) {
        ids = tok->encode(request->text(),
                          request->has_add_special_tokens() ? request->add_special_tokens() : true);
      } else {
        throw HttpError(400, "set 'text' or 'chat'", "", "text");
      }
    } catch (const HttpError&) {
      throw;
    } catch (const Cancelled&) {
      throw;
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kInternal) throw;
      throw HttpError(400, e.what());
    }
    response->mutable_token_ids()->Add(ids.begin(), ids.end());
    if (request->return_tokens())
      for (int32_t id : ids) response->add_tokens(token_bytes(tok, id));
    response->set_count(static_cast<int32_t>(ids.size()));
    response->set_max_model_len(m->config().max_seq_len);
    call.record->prompt_tokens = static_cast<int64_t>(ids.size());
  });
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Detokenize(grpc::CallbackServerContext* context,
                                                            const v1::DetokenizeRequest* request,
                                                            v1::DetokenizeResponse* response) {
  return answer_now(ctx_, context, kService, "Detokenize", [&](GrpcCall& call) {
    auto m = resolve_model(call, ctx_.state, request->model());
    const Tokenizer* tok = m->tok();
    if (!tok) throw HttpError(400, "this model has no tokenizer");
    const int64_t vocab = m->config().vocab_size;
    for (int32_t id : request->token_ids()) {
      if (id < 0 || id >= vocab)
        throw HttpError(400,
                        fmt::format("token id {} is outside the vocabulary (0..{})", id, vocab - 1),
                        "", "token_ids");
    }
    const std::vector<int32_t> ids(request->token_ids().begin(), request->token_ids().end());
    const bool skip = request->has_skip_special_tokens() ? request->skip_special_tokens() : true;
    response->set_text(unicode::sanitize_utf8(tok->decode(ids, skip)));
  });
}

grpc::ServerUnaryReactor* GenerationServiceImpl::ListModels(grpc::CallbackServerContext* context,
                                                            const v1::ListModelsRequest*,
                                                            v1::ListModelsResponse* response) {
  return answer_now(ctx_, context, kService, "ListModels", [&](GrpcCall& call) {
    // The REST listing, typed: every id a request (with this key) can use.
    const json list = openai_model_list(ctx_.state, call.record->key);
    for (const auto& m : list["data"]) {
      v1::ModelInfo* info = response->add_models();
      info->set_id(m["id"].get<std::string>());
      const bool child = m["parent"].is_string();
      info->set_parent(child ? m["parent"].get<std::string>() : "");
      info->set_name(child ? info->parent() : info->id());
      info->set_version(m["version"].get<int64_t>());
      info->set_created(m["created"].get<int64_t>());
      info->set_max_model_len(m["max_model_len"].get<int64_t>());
      info->set_root(m["root"].get<std::string>());
    }
  });
}

}  // namespace tf
