#include "serving/openai_api.h"

#include <fmt/format.h>

#include <functional>
#include <unordered_set>

#include "core/cancel.h"
#include "serving/openai_render.h"
#include "serving/openai_request.h"

namespace tf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

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
    "service_tier", "metadata", "store"};
const std::unordered_set<std::string> kCompletionFields = {"prompt", "echo", "suffix"};
const std::unordered_set<std::string> kChatFields = {
    "messages", "max_completion_tokens", "top_logprobs",        "response_format",
    "tools",    "tool_choice",           "parallel_tool_calls", "add_generation_prompt"};

void check_fields(const json& body, bool chat) {
  if (!body.is_object()) throw HttpError(400, "the request body must be a JSON object");
  const auto& own = chat ? kChatFields : kCompletionFields;
  for (const auto& [key, value] : body.items()) {
    if (!kCommonFields.count(key) && !own.count(key)) {
      throw HttpError(400, fmt::format("Unrecognized request argument supplied: {}", key),
                      "unknown_parameter", key);
    }
  }
  auto present = [&](const char* k) { return body.contains(k) && !body[k].is_null(); };
  if (present("suffix") && body["suffix"] != "") {
    throw HttpError(400, "'suffix' is not supported", "unsupported_parameter", "suffix");
  }
  if (present("tools") && !(body["tools"].is_array() && body["tools"].empty())) {
    throw HttpError(400, "'tools' is not supported: this server does not call tools",
                    "unsupported_parameter", "tools");
  }
  if (present("response_format")) {
    const json& f = body["response_format"];
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string() || f["type"] != "text") {
      throw HttpError(400, "'response_format' supports only {\"type\": \"text\"}",
                      "unsupported_parameter", "response_format");
    }
  }
  for (const char* k : {"stream", "echo", "use_beam_search", "add_special_tokens"}) {
    if (present(k) && !body[k].is_boolean())
      throw HttpError(400, fmt::format("'{}' must be true or false", k), "", k);
  }
  if (present("stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object())
      throw HttpError(400, "'stream_options' must be an object", "", "stream_options");
    if (so.contains("include_usage") && !so["include_usage"].is_boolean() &&
        !so["include_usage"].is_null())
      throw HttpError(400, "'stream_options.include_usage' must be true or false", "",
                      "stream_options");
  }
  if (present("user") && !body["user"].is_string())
    throw HttpError(400, "'user' must be a string", "", "user");
}

// The body field an error message is about: a leading 'quoted' name or first word that the body
// holds ("temperature must be >= 0" -> temperature).
std::string field_of(const std::string& message, const json& body) {
  size_t b = message[0] == '\'' ? 1 : 0, e = b;
  while (e < message.size() &&
         (std::islower(static_cast<unsigned char>(message[e])) || message[e] == '_'))
    ++e;
  const std::string word = message.substr(b, e - b);
  return body.is_object() && body.contains(word) ? word : std::string();
}

void parse_body(ServingState& state, const json& body, bool chat,
                const ModelRegistry::HeaderFn& header, GenerationPlan& p);
void parse_generation_fields(const json& body, bool chat, const LoadedTokenizer& tokenizer,
                             const ModelConfig& cfg, GenerationPlan& p);

// Runs fn, turning a plain Error (a parameter's check) into HttpError 400 naming its field.
template <typename Fn>
void with_fields(const json& body, Fn fn) {
  try {
    fn();
  } catch (const HttpError&) {
    throw;
  } catch (const Cancelled&) {
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
}

void parse(ServingState& state, const json& body, bool chat, const ModelRegistry::HeaderFn& header,
           GenerationPlan& p) {
  with_fields(body, [&] { parse_body(state, body, chat, header, p); });
}

void parse_body(ServingState& state, const json& body, bool chat,
                const ModelRegistry::HeaderFn& header, GenerationPlan& p) {
  check_fields(body, chat);
  std::string name;
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) throw HttpError(400, "'model' must be a string", "", "model");
    name = body["model"].get<std::string>();
  }
  // "name", "name:version" or "name@label"; a traffic split keeps one "user" on one version.
  const ModelRequestSpec spec = state.registry.parse_model_field(name);
  std::string user;
  if (body.contains("user") && body["user"].is_string()) user = body["user"].get<std::string>();
  p.model = state.registry.resolve(spec, user, header);
  if (!p.model) {
    throw HttpError(404, state.registry.unavailable_reason(spec), "model_not_found", "model");
  }
  parse_generation_fields(body, chat, p.model->tokenizer, p.model->config(), p);
}

}  // namespace

void parse_generation_body(const json& body, bool chat, const LoadedTokenizer& tokenizer,
                           const ModelConfig& cfg, GenerationPlan& p) {
  with_fields(body, [&] {
    check_fields(body, chat);
    parse_generation_fields(body, chat, tokenizer, cfg, p);
  });
}

namespace {

void parse_generation_fields(const json& body, bool chat, const LoadedTokenizer& tokenizer,
                             const ModelConfig& cfg, GenerationPlan& p) {
  p.params = parse_sampling_params(body, chat, chat ? static_cast<int32_t>(cfg.max_seq_len) : 16);
  p.stream = body.value("stream", false);
  if (p.stream && body.contains("stream_options") && body["stream_options"].is_object()) {
    const json& iu = body["stream_options"].value("include_usage", json());
    p.include_usage = iu.is_boolean() && iu.get<bool>();
  }
  p.echo = !chat && body.value("echo", false);
  if (body.value("use_beam_search", false)) {
    // vLLM's beam search: best_of (or n) beams, the n best returned.
    p.params.num_beams = std::max(p.params.best_of.value_or(p.params.n), 2);
    p.params.num_return_sequences = p.params.n;
    p.params.best_of.reset();
  }
  if (p.stream && p.params.best_of && *p.params.best_of > p.params.n) {
    throw HttpError(400, "'best_of' greater than 'n' cannot stream: the best are known at the end",
                    "", "best_of");
  }
  if (p.echo && p.params.logprobs) {
    throw HttpError(400, "'echo' with 'logprobs' is not supported (no prompt logprobs yet)",
                    "unsupported_parameter", "echo");
  }
  p.choices_per_prompt = p.params.n;
  p.rule = {p.params.n, p.params.best_of, p.params.beam_search()};
  p.params.validate(cfg.vocab_size);
  if (chat) {
    p.prompts.push_back(parse_chat_prompt(body, tokenizer, cfg));
  } else {
    p.prompts = parse_completion_prompts(body, tokenizer.tokenizer.get(),
                                         body.value("add_special_tokens", true), cfg.max_seq_len);
  }
  for (auto& prompt : p.prompts) {
    if (static_cast<int64_t>(prompt.size()) >= cfg.max_seq_len) {
      throw HttpError(400,
                      fmt::format("This model's maximum context length is {} tokens, the prompt "
                                  "has {} tokens",
                                  cfg.max_seq_len, prompt.size()),
                      "context_length_exceeded", chat ? "messages" : "prompt");
    }
  }
}

}  // namespace

std::vector<GenerationRequest> engine_requests(const GenerationPlan& p, const json& body,
                                               const std::string& id, int64_t ctx, bool max_given) {
  std::vector<GenerationRequest> out;
  int32_t priority = 0;
  if (body.contains("priority") && !body["priority"].is_null()) {
    const json& v = body["priority"];
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT32_MAX) ||
        (!v.is_number_unsigned() && (v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)))
      throw HttpError(400, "'priority' must be a 32-bit integer", "", "priority");
    priority = static_cast<int32_t>(v.get<int64_t>());
  }
  for (size_t i = 0; i < p.prompts.size(); ++i) {
    GenerationRequest r;
    r.id = p.prompts.size() == 1 ? id : fmt::format("{}-{}", id, i);
    r.prompt = p.prompts[i];
    r.params = p.params;
    r.priority = priority;
    const int64_t room = fit_max_tokens(r.params, r.prompt.size(), ctx, max_given);
    if (static_cast<int64_t>(r.params.max_tokens) > room) {
      throw HttpError(400,
                      fmt::format("This model's maximum context length is {} tokens; the prompt "
                                  "({} tokens) and max_tokens ({}) exceed it",
                                  ctx, r.prompt.size(), r.params.max_tokens),
                      "context_length_exceeded", "max_tokens");
    }
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

std::string sse(const ojson& j) {
  return "data: " + dump_json(j) + "\n\n";
}

}  // namespace

JobSummary summarize(const GenerationPlan& plan, const GenerationJob& job,
                     const RequestRecord& record) {
  return summarize_job(job, plan.rule, record.received, record.received + plan.time_limit);
}

GenerationPlan plan_generation(ServingState& state, const json& body, bool chat,
                               const ModelRegistry::HeaderFn& header, RequestRecord& record,
                               const std::string& id,
                               std::optional<std::chrono::milliseconds> time_limit) {
  GenerationPlan p;
  // The deadline: the request's "timeout" (seconds), else the caller's, within the server's.
  auto limit = time_limit.value_or(state.limits.max_request_time);
  if (body.contains("timeout") && !body["timeout"].is_null()) {
    if (!body["timeout"].is_number() || !(body["timeout"].get<double>() > 0))
      throw HttpError(400, "'timeout' must be a number of seconds > 0", "", "timeout");
    // Within the server's maximum before converting: 1e300 s is not a negative deadline.
    const double ms = body["timeout"].get<double>() * 1000;
    limit = ms >= static_cast<double>(state.limits.max_request_time.count())
                ? state.limits.max_request_time
                : std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(ms)));
  }
  // Preparing the prompt (below) stops at that deadline too.
  if (CancelToken* token = current_cancel_token())
    token->limit_deadline(record.received + std::min(limit, state.limits.max_request_time));
  parse(state, body, chat, header, p);
  const ServedModel& model = *p.model;
  record.model = model.name;
  record.version = model.version;
  if (record.access_log && record.access_log->log_prompts()) {
    const char* field = chat ? "messages" : "prompt";
    if (body.contains(field))
      record.prompt =
          body[field].is_string() ? body[field].get<std::string>() : dump_json(body[field]);
  }
  p.max_tokens_given =
      (body.contains("max_tokens") && !body["max_tokens"].is_null()) ||
      (chat && body.contains("max_completion_tokens") && !body["max_completion_tokens"].is_null());
  p.requests = engine_requests(p, body, id, model.config().max_seq_len, p.max_tokens_given);
  std::string cache_salt;  // prefix-cache blocks are shared within one key and cache_salt
  if (body.contains("cache_salt") && !body["cache_salt"].is_null()) {
    if (!body["cache_salt"].is_string())
      throw HttpError(400, "'cache_salt' must be a string", "", "cache_salt");
    cache_salt = body["cache_salt"].get<std::string>();
  }
  p.admission =
      state.prepare(record, model.name, p.requests, p.max_tokens_given, limit, cache_salt);
  p.time_limit = std::min(limit, state.limits.max_request_time);
  for (const auto& r : p.requests) record.prompt_tokens += static_cast<int64_t>(r.prompt.size());
  return p;
}

json openai_model_object(const ServedModel& m, const std::string& id, const std::string& parent) {
  return {{"id", id.empty() ? m.name : id},
          {"object", "model"},
          {"created", m.created},
          {"owned_by", "tokenflow"},
          {"root", m.path},
          {"parent", parent.empty() ? json() : json(parent)},
          {"version", m.version},
          {"max_model_len", m.config().max_seq_len}};
}

json openai_model_list(const ServingState& state, const KeyPolicy* key) {
  // Each model by name (the version a request naming only it would get), then, where a model
  // has several versions or labels, each as "name:version" and "name@label" with the name as
  // parent.
  json data = json::array();
  const auto available = state.registry.available();
  for (const std::string& name : state.registry.names()) {
    if (key && !key->allows(name)) continue;             // a key sees only the models it may use
    std::vector<std::shared_ptr<ServedModel>> versions;  // ascending: the latest is last
    for (const auto& m : available)
      if (m->name == name) versions.push_back(m);
    if (versions.empty()) continue;
    data.push_back(openai_model_object(*versions.back()));
    if (versions.size() > 1) {
      for (const auto& m : versions)
        data.push_back(openai_model_object(*m, fmt::format("{}:{}", name, m->version), name));
    }
    for (const auto& [label, v] : state.registry.labels(name)) {
      if (auto m = state.registry.resolve({name, v, {}}))
        data.push_back(openai_model_object(*m, fmt::format("{}@{}", name, label), name));
    }
  }
  return {{"object", "list"}, {"data", data}};
}

void handle_openai_generation(ServingState& state, const HttpRequest& req,
                              std::shared_ptr<HttpResponder> responder,
                              std::shared_ptr<RequestRecord> record, bool chat) {
  const json body = parse_json_body(req.body);
  const std::string id = random_id(chat ? "chatcmpl-" : "cmpl-");
  auto parsed = std::make_shared<GenerationPlan>(plan_generation(
      state, body, chat,
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
  const auto limit = parsed->time_limit;
  OpenAiShape shape;
  shape.id = id;
  shape.model = model.name;
  shape.created = unix_seconds();
  shape.chat = chat;
  shape.logprobs = parsed->params.logprobs.has_value();
  shape.choices_per_prompt = parsed->choices_per_prompt;
  shape.tokenizer = model.tok();
  if (parsed->echo) {
    for (const auto& pr : parsed->prompts)
      shape.echo.push_back(shape.tokenizer ? shape.tokenizer->decode(pr, false) : std::string());
  }
  auto shared = std::make_shared<const OpenAiShape>(std::move(shape));

  if (parsed->stream) {
    const int32_t n = parsed->choices_per_prompt;
    auto echoed = std::make_shared<std::vector<bool>>(reqs.size() * n, false);
    GenerationJob::EventFn on_event = [=](size_t i, const RequestOutput& out) {
      const size_t index = i * static_cast<size_t>(n) + static_cast<size_t>(out.index);
      const bool echo = parsed->echo && index < echoed->size() && !(*echoed)[index];
      if (auto chunk = openai_stream_chunk(*shared, i, out, echo)) {
        if (echo) (*echoed)[index] = true;
        responder->write(sse(*chunk));
      }
    };
    GenerationJob::DoneFn on_done = [=](const GenerationJob& job, bool client_gone) {
      const JobSummary summary = summarize(*parsed, job, *record);
      record_job(summary, *record, parsed->admission.get());
      if (client_gone) return log_request(*record, 499);
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

  GenerationJob::DoneFn on_done = [=](const GenerationJob& job, bool client_gone) {
    const JobSummary summary = summarize(*parsed, job, *record);
    record_job(summary, *record, parsed->admission.get());
    if (client_gone) return log_request(*record, 499);
    if (summary.timed_out) {
      responder->send(504, openai_error_body(504, deadline_message(limit), "timeout"));
      return log_request(*record, 504);
    }
    responder->send(200, dump_json(openai_response(*shared, job.results(), summary)));
    log_request(*record, 200);
  };
  GenerationJob::start(*model.engine, std::move(reqs), responder, state.jobs, nullptr, on_done,
                       observer);
}

}  // namespace tf
