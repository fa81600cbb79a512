#include "serving/grpc/grpc_generation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>

#include "core/cancel.h"
#include "core/log.h"
#include "serving/core/generation_job.h"
#include "serving/core/model_list.h"
#include "serving/core/planner.h"
#include "serving/core/prompt.h"
#include "tokenizer/unicode.h"

namespace tf {
namespace {

using json = nlohmann::json;
constexpr const char* kGenerationService = "tokenflow.v1.GenerationService";

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

// Usage over the returned sequences; cached prompt tokens from the engine's timings.
void fill_usage(const JobSummary& s, v1::Usage* u) {
  u->set_prompt_tokens(s.prompt_tokens);
  u->set_completion_tokens(s.completion_tokens);
  u->set_total_tokens(s.prompt_tokens + s.completion_tokens);
  u->set_cached_prompt_tokens(s.cached_prompt_tokens);
}

// The model a tokenize / detokenize request names (nullptr: throws 404).
std::shared_ptr<ServedModel> resolve_call_model(GrpcCall& call, ServingState& state,
                                                const std::string& field) {
  auto m = resolve_model(state, *call.record, field, {}, call.header_fn());
  call.record->model = m->name;
  call.record->version = m->version;
  return m;
}

// --- Generate (unary) ---------------------------------------------------------------------

void start_generate(GrpcContext& ctx, UnaryJobCall* r, const v1::GenerateRequest& req,
                    v1::GenerateResponse* resp) {
  r->call.admit();
  const CompletionRequest request =
      read_generate_request(req, /*stream=*/false, logs_prompts(*r->call.record));
  const std::string id = random_id(request.chat ? "chatcmpl-" : "cmpl-");
  auto plan = std::make_shared<GenerationPlan>(plan_generation(
      ctx.state, request, r->call.header_fn(), *r->call.record, id, r->call.time_limit()));
  r->server_ctx->AddInitialMetadata("x-model-version", std::to_string(plan->model->version));
  const Tokenizer* tok = plan->model->tok();
  resp->set_id(id);
  resp->set_model(plan->name);
  resp->set_model_version(plan->model->version);
  auto record = r->call.record;
  run_job(ctx.state, plan, r->host, record,
          std::make_shared<GrpcJobSink>(
              nullptr,
              [r, plan, tok, resp](const JobEnd& end, const GenerationJob& job) {
                if (!end.ok()) return r->finish(grpc_status(end, r->server_ctx));
                generate_response_proto(job.results(), end.summary,
                                        plan->params.logprobs.has_value(), tok, resp);
                r->finish(grpc::Status::OK);
              },
              [r](const std::exception& e) { r->finish(r->call.error_status(e)); }));
}

// --- GenerateStream ---------------------------------------------------------------------------

// Writes a call's messages one at a time, in order, and finishes after the last.
class StreamReactor final : public grpc::ServerWriteReactor<v1::GenerateStreamResponse> {
 public:
  StreamReactor(GrpcContext& ctx, grpc::CallbackServerContext* sctx, const v1::GenerateRequest* req)
      : ctx_(ctx),
        sctx_(sctx),
        call_(ctx, sctx, kGenerationService, "GenerateStream", "server_stream"),
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
    GrpcCallbackScope scope;
    std::unique_lock lock(mu_);
    writing_ = false;
    if (!ok) {  // the client is gone: nothing more can be written
      broken_ = true;
      queue_.clear();
    }
    next(lock);
  }
  void OnCancel() override {
    GrpcCallbackScope scope;
    host_->cancelled();
  }
  void OnDone() override {
    grpc_handoff_acquire();
    delete this;
  }

 private:
  void start(const v1::GenerateRequest& req) {
    call_.admit();
    const CompletionRequest request =
        read_generate_request(req, /*stream=*/true, logs_prompts(*call_.record));
    const std::string id = random_id(request.chat ? "chatcmpl-" : "cmpl-");
    auto plan = std::make_shared<GenerationPlan>(plan_generation(
        ctx_.state, request, call_.header_fn(), *call_.record, id, call_.time_limit()));
    sctx_->AddInitialMetadata("x-model-version", std::to_string(plan->model->version));
    const Tokenizer* tok = plan->model->tok();
    const int32_t n = plan->choices_per_prompt;
    const bool logprobs = plan->params.logprobs.has_value();
    run_job(ctx_.state, plan, host_, call_.record,
            std::make_shared<GrpcJobSink>(
                [this, tok, n, logprobs](size_t, const RequestOutput& out) {
                  if (auto msg = stream_step_proto(out, n, logprobs, tok)) send(std::move(*msg));
                },
                [this, plan, id](const JobEnd& job_end, const GenerationJob& job) {
                  if (job_end.outcome == JobOutcome::kClientGone)
                    return end(grpc_status(job_end, sctx_));
                  send(stream_end_proto(id, plan->name, plan->model->version, job.results(),
                                        job_end.summary));
                  end(grpc_status(job_end, sctx_));
                },
                [this](const std::exception& e) { end(call_.error_status(e)); }));
  }

  void send(v1::GenerateStreamResponse msg) {
    std::unique_lock lock(mu_);
    if (broken_ || finishing_) return;
    unsent_ += msg.ByteSizeLong();
    queue_.push_back(std::move(msg));
    const int64_t cap = ctx_.state.limits.max_unsent_bytes;
    if (cap > 0 && static_cast<int64_t>(unsent_) > cap) {
      // The client takes messages slower than they are made (HTTP/2 flow control holds the
      // writes): the stream ends with RESOURCE_EXHAUSTED and its request is cancelled, rather
      // than queue without bound.
      log::warn(
          "request {}: {} bytes of a stream are unsent (over --max-unsent-bytes {}): the "
          "client reads too slowly; the stream is ended",
          call_.record->id, unsent_, cap);
      ++ctx_.state.grpc_slow_reader_streams;
      queue_.clear();
      unsent_ = 0;
      finishing_ = true;
      status_ = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                             "the client reads the stream too slowly: over --max-unsent-bytes of "
                             "it were waiting; the request was cancelled");
      lock.unlock();
      host_->cancelled();
      lock.lock();
    }
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
      unsent_ -= std::min(unsent_, current_.ByteSizeLong());
      writing_ = true;
      lock.unlock();
      grpc_handoff_release();
      StartWrite(&current_);
      return;
    }
    if (!finishing_) return;
    finished_ = true;
    const grpc::Status status = status_;
    lock.unlock();
    call_.finish(status);
    grpc_handoff_release();
    Finish(status);
  }

  GrpcContext& ctx_;
  grpc::CallbackServerContext* sctx_;
  GrpcCall call_;
  std::shared_ptr<GrpcCallHost> host_;
  std::mutex mu_;
  std::deque<v1::GenerateStreamResponse> queue_;
  size_t unsent_ = 0;                   // the bytes of queue_
  v1::GenerateStreamResponse current_;  // the message being written
  bool writing_ = false, broken_ = false, finishing_ = false, finished_ = false;
  grpc::Status status_;
};

}  // namespace

// What a finished job ends with: INTERNAL when the engine failed on it, DEADLINE_EXCEEDED when it
// ran past its deadline and a sequence was stopped for it, else OK.
namespace {

// A float parameter as REST takes it: finite and within float's range.
float finite(const char* name, float v) {
  if (!std::isfinite(v)) fail_field(name, "'{}' is out of range", name);
  return v;
}

std::vector<int32_t> ids_of(const google::protobuf::RepeatedField<int32_t>& ids, const char* key) {
  std::vector<int32_t> out;
  for (int32_t id : ids) {
    if (id < 0) fail_field(key, "'{}' holds {}, which is not a token id (0..2147483647)", key, id);
    out.push_back(id);
  }
  return out;
}

void read_sampling(const v1::SamplingParameters& s, CompletionRequest& r) {
  SamplingParams& p = r.params;
  if (s.has_max_tokens()) {
    p.max_tokens = s.max_tokens();
    r.max_tokens_given = true;
  }
  if (s.has_min_tokens()) p.min_tokens = s.min_tokens();
  if (s.has_temperature()) p.temperature = finite("temperature", s.temperature());
  if (s.has_top_p()) p.top_p = finite("top_p", s.top_p());
  if (s.has_top_k()) p.top_k = s.top_k() == -1 ? 0 : s.top_k();  // vLLM's "off"
  if (s.has_min_p()) p.min_p = finite("min_p", s.min_p());
  if (s.has_typical_p()) p.typical_p = finite("typical_p", s.typical_p());
  if (s.has_repetition_penalty())
    p.repetition_penalty = finite("repetition_penalty", s.repetition_penalty());
  if (s.has_presence_penalty())
    p.presence_penalty = finite("presence_penalty", s.presence_penalty());
  if (s.has_frequency_penalty())
    p.frequency_penalty = finite("frequency_penalty", s.frequency_penalty());
  if (s.has_no_repeat_ngram_size()) p.no_repeat_ngram_size = s.no_repeat_ngram_size();
  if (s.has_n()) p.n = s.n();
  if (s.has_best_of()) p.best_of = s.best_of();
  if (s.has_seed()) p.seed = static_cast<uint64_t>(s.seed());
  if (s.has_length_penalty()) p.length_penalty = finite("length_penalty", s.length_penalty());
  if (s.has_skip_special_tokens()) p.skip_special_tokens = s.skip_special_tokens();
  if (s.has_logprobs()) p.logprobs = s.logprobs();
  p.ignore_eos = s.ignore_eos();
  p.include_stop_str_in_output = s.include_stop_str_in_output();
  p.early_stopping = s.early_stopping();
  p.stop.assign(s.stop().begin(), s.stop().end());
  p.stop_token_ids = ids_of(s.stop_token_ids(), "stop_token_ids");
  for (const auto& w : s.bad_words_ids())
    p.bad_words_ids.push_back(ids_of(w.ids(), "bad_words_ids"));
  // A map's order is unspecified: sorted, so that equal requests are equal.
  for (const auto& [id, v] : s.logit_bias()) {
    if (id < 0) fail_field("logit_bias", "'logit_bias' key '{}' is not a token id", id);
    if (!std::isfinite(v) || std::fabs(v) > 1e6)
      fail_field("logit_bias", "'logit_bias' values must be finite numbers");
    p.logit_bias.emplace_back(id, v);
  }
  std::sort(p.logit_bias.begin(), p.logit_bias.end());
}

void read_structured_output(const v1::StructuredOutput& s, OutputConstraint& c) {
  c.field = "structured_output";
  switch (s.kind_case()) {
    case v1::StructuredOutput::kJsonSchema: {
      const auto schema = nlohmann::ordered_json::parse(s.json_schema(), nullptr, false);
      if (schema.is_discarded())
        throw HttpError(400, "'structured_output.json_schema' is not valid JSON", "",
                        "structured_output");
      c.kind = OutputConstraint::kJsonSchema;
      c.text = schema.dump();
      break;
    }
    case v1::StructuredOutput::kJsonObject:
      if (s.json_object()) c.kind = OutputConstraint::kJsonObject;
      break;
    case v1::StructuredOutput::kRegex:
      c.kind = OutputConstraint::kRegex;
      c.text = s.regex();
      break;
    case v1::StructuredOutput::kChoice:
      if (s.choice().choices().empty())
        throw HttpError(400, "'structured_output.choice' must not be empty", "",
                        "structured_output");
      c.kind = OutputConstraint::kChoice;
      c.choices.assign(s.choice().choices().begin(), s.choice().choices().end());
      break;
    case v1::StructuredOutput::kGrammar:
      c.kind = OutputConstraint::kGrammar;
      c.text = s.grammar();
      break;
    case v1::StructuredOutput::KIND_NOT_SET:
      break;
  }
  if (!s.whitespace_pattern().empty()) {
    if (c.kind != OutputConstraint::kJsonSchema && c.kind != OutputConstraint::kJsonObject)
      throw HttpError(400, "'structured_output.whitespace_pattern' applies to JSON output only", "",
                      "structured_output");
    c.whitespace_pattern = s.whitespace_pattern();
  }
}

void read_generate(const v1::GenerateRequest& req, bool stream, CompletionRequest& r) {
  r.model = req.model();
  r.user = req.user();
  r.priority = req.priority();
  r.cache_salt = req.cache_salt();
  r.stream = stream;
  if (req.has_structured_output()) read_structured_output(req.structured_output(), r.output);
  if (req.has_add_special_tokens()) r.add_special_tokens = req.add_special_tokens();
  if (req.has_speculative()) r.speculative = req.speculative();
  switch (req.prompt_case()) {
    case v1::GenerateRequest::kText:
      r.prompts.push_back({true, req.text(), {}});
      r.logged_prompt = req.text();
      break;
    case v1::GenerateRequest::kTokenIds:
      if (req.token_ids().ids().empty())
        throw HttpError(400, "'token_ids' must not be empty", "", "token_ids");
      r.prompts.push_back({false, {}, ids_of(req.token_ids().ids(), "prompt")});
      r.logged_prompt = dump_json(json(r.prompts[0].ids));
      break;
    case v1::GenerateRequest::kChat: {
      r.chat = true;
      json logged = json::array();
      for (const auto& m : req.chat().messages()) {
        r.messages.push_back({m.role(), m.content()});
        logged.push_back({{"role", m.role()}, {"content", m.content()}});
      }
      if (r.messages.empty()) fail_field("messages", "'messages' must be a non-empty list");
      if (req.chat().has_add_generation_prompt())
        r.add_generation_prompt = req.chat().add_generation_prompt();
      r.logged_prompt = dump_json(logged);
      break;
    }
    default:
      throw HttpError(400, "a prompt is required: set 'text', 'token_ids' or 'chat'", "", "prompt");
  }
  read_sampling(req.sampling(), r);
  apply_request_rules(r, req.sampling().use_beam_search());
}

}  // namespace

CompletionRequest read_generate_request(const v1::GenerateRequest& req, bool stream,
                                        bool log_prompt) {
  CompletionRequest r;
  try {
    read_generate(req, stream, r);
    if (!log_prompt) r.logged_prompt.clear();
  } catch (const HttpError&) {
    throw;
  } catch (const FieldError& e) {
    throw HttpError(400, e.what(), "", e.field());
  }
  return r;
}

void generate_response_proto(const std::vector<std::vector<GeneratedSequence>>& results,
                             const JobSummary& summary, bool logprobs, const Tokenizer* tok,
                             v1::GenerateResponse* resp) {
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& picks = summary.returned.at(i);
    for (size_t k = 0; k < picks.size(); ++k) {
      const GeneratedSequence& s = results[i][picks[k]];
      v1::Sequence* out = resp->add_sequences();
      out->set_index(static_cast<int32_t>(k));
      out->set_text(unicode::sanitize_utf8(s.text));
      out->mutable_token_ids()->Add(s.tokens.begin(), s.tokens.end());
      out->set_finish_reason(finish_of(s.finish));
      out->set_cumulative_logprob(s.cumulative_logprob);
      if (logprobs) add_logprobs(tok, s.logprobs, out->mutable_logprobs());
    }
  }
  fill_usage(summary, resp->mutable_usage());
}

std::optional<v1::GenerateStreamResponse> stream_step_proto(const RequestOutput& out, int32_t n,
                                                            bool logprobs, const Tokenizer* tok) {
  if (out.index >= n) return std::nullopt;  // beams beyond the returned ones
  if (out.token_ids.empty() && out.text.empty() && out.finish == FinishReason::kNone)
    return std::nullopt;
  v1::GenerateStreamResponse msg;
  v1::GenerationStep* step = msg.mutable_step();
  step->set_index(out.index);
  step->mutable_token_ids()->Add(out.token_ids.begin(), out.token_ids.end());
  step->set_text(unicode::sanitize_utf8(out.text));
  if (logprobs) add_logprobs(tok, out.logprobs, step->mutable_logprobs());
  step->set_finish_reason(finish_of(out.finish));
  return msg;
}

v1::GenerateStreamResponse stream_end_proto(
    const std::string& id, const std::string& model, int64_t version,
    const std::vector<std::vector<GeneratedSequence>>& results, const JobSummary& summary) {
  v1::GenerateStreamResponse msg;
  v1::GenerationEnd* e = msg.mutable_end();
  e->set_id(id);
  e->set_model(model);
  e->set_model_version(version);
  for (size_t i = 0; i < results.size(); ++i) {
    for (size_t k : summary.returned.at(i)) e->add_finish_reasons(finish_of(results[i][k].finish));
  }
  fill_usage(summary, e->mutable_usage());
  return msg;
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Generate(grpc::CallbackServerContext* context,
                                                          const v1::GenerateRequest* request,
                                                          v1::GenerateResponse* response) {
  GrpcCallbackScope scope;
  auto* r = new UnaryJobCall(ctx_, context, kGenerationService, "Generate");
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
  GrpcCallbackScope scope;
  return new StreamReactor(ctx_, context, request);
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Tokenize(grpc::CallbackServerContext* context,
                                                          const v1::TokenizeRequest* request,
                                                          v1::TokenizeResponse* response) {
  return answer_now(ctx_, context, kGenerationService, "Tokenize", [&](GrpcCall& call) {
    auto m = resolve_call_model(call, ctx_.state, request->model());
    const Tokenizer* tok = m->tok();
    if (!tok) throw HttpError(400, "this model has no tokenizer");
    std::vector<int32_t> ids;
    try {
      if (request->has_chat()) {
        std::vector<ChatMessage> messages;
        for (const auto& msg : request->chat().messages())
          messages.push_back({msg.role(), msg.content()});
        if (messages.empty()) fail_field("messages", "'messages' must be a non-empty list");
        const bool add =
            !request->chat().has_add_generation_prompt() || request->chat().add_generation_prompt();
        ids = render_chat_prompt(*m->chat_format(), messages, add, m->tokenizer,
                                 m->config().max_seq_len);
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
  return answer_now(ctx_, context, kGenerationService, "Detokenize", [&](GrpcCall& call) {
    auto m = resolve_call_model(call, ctx_.state, request->model());
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
  return answer_now(ctx_, context, kGenerationService, "ListModels", [&](GrpcCall& call) {
    // The REST listing, typed: every id a request (with this key) can use.
    const json list = model_list_json(ctx_.state, call.record->key);
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
