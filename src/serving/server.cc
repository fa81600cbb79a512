#include "serving/server.h"

#include <fmt/format.h>

#include <map>

#include "core/log.h"
#include "core/memory.h"
#include "serving/api_common.h"
#include "serving/openai_api.h"
#include "serving/responses_api.h"
#include "serving/tfserving_api.h"
#include "serving/utility_api.h"
#include "serving/web_assets.h"

namespace tf {
namespace {

// %XX escapes of a path segment (model names may hold '/' or ':' written as %2F, %3A).
// The process's memory as the OS and malloc see it (core/memory.h), for the stats page.
nlohmann::json memory_json() {
  const MemoryStats m = memory_stats();
  return {{"rss_bytes", m.rss},
          {"heap_in_use_bytes", m.heap_in_use},
          {"heap_free_bytes", m.heap_free},
          {"heap_mmapped_bytes", m.heap_mmapped},
          {"heap_arena_bytes", m.arena}};
}

std::string url_decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

Server::Server(ServingState& state, HttpServerConfig config)
    : state_(state),
      http_(
          std::move(config),
          [this](HttpRequest req, std::shared_ptr<HttpResponder> r) {
            handle(std::move(req), std::move(r));
          },
          [](int status, std::string message) {
            return std::pair<std::string, std::string>{openai_error_body(status, message),
                                                       "application/json"};
          }) {}

bool Server::shutdown(std::chrono::milliseconds grace) {
  state_.draining = true;
  http_.stop_accepting();
  const bool clean = http_.drain(std::chrono::steady_clock::now() + grace);
  if (!clean) {
    log::warn("shutdown: {} responses still in progress after {} ms; closing them",
              http_.responses_in_progress(), grace.count());
  }
  http_.stop();
  return clean;
}

void Server::handle(HttpRequest req, std::shared_ptr<HttpResponder> responder) {
  auto record = std::make_shared<RequestRecord>();
  const std::string* given = req.header("x-request-id");
  record->id = request_id(given);
  record->method = req.method;
  record->path = req.path;
  record->remote = req.remote;
  record->received = req.received;
  responder->add_header("X-Request-Id", record->id);
  // Probes and scrapes are not requests of the service.
  if (!is_metrics_path(req.path) && req.path != "/healthz" && req.path != "/readyz") {
    // The playground's files are logged, not counted as requests of the service.
    if (!(state_.playground && find_web_asset(req.path))) record->metrics = &state_.metrics;
    record->access_log = state_.access_log.get();
  }
  // A POST carries a body to parse and, for generation, a prompt to tokenize: work that grows
  // with the request, done on the preparation pool under a token that the client's departure
  // and the server's time limit cancel (the request's own timeout tightens it there). GETs are
  // answered here, on the I/O thread.
  if (req.method == "POST") {
    auto token = std::make_shared<CancelToken>();
    token->limit_deadline(record->received + state_.limits.max_request_time);
    responder->on_disconnect([token] { token->cancel(); });
    state_.prepare_pool.run(
        token, [this, req = std::move(req), responder, record] { serve(req, responder, record); });
    return;
  }
  serve(req, responder, record);
}

void Server::serve(const HttpRequest& req, std::shared_ptr<HttpResponder> responder,
                   std::shared_ptr<RequestRecord> record) {
  try {
    authenticate(req, *record);
    route(req, responder, record);
  } catch (const std::exception& e) {
    answer_error(e, ErrorShape::kOpenAi, *responder, *record);
  }
}

void Server::answer_error(const std::exception& e, ErrorShape shape, HttpResponder& responder,
                          const RequestRecord& record) {
  const int status = http_status_of(e);
  if (status >= 500 && status != 504) log::error("request {} failed: {}", record.id, e.what());
  HttpHeaders headers;
  if (status == 503 || status == 429) {
    const auto* he = dynamic_cast<const HttpError*>(&e);
    const int retry = he && he->retry_after_seconds() > 0 ? he->retry_after_seconds() : 1;
    headers.emplace_back("Retry-After", std::to_string(retry));
  }
  if (status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  std::string body;
  if (shape == ErrorShape::kTfServing) {
    body = tfserving_error_body(status == 500 ? fmt::format("internal error: {}", e.what())
                                              : std::string(e.what()));
  } else {
    body = openai_error_body(e);
  }
  // Counted and logged before the answer goes out: this may run off the connection's strand (on
  // the preparation pool), and a client that has its answer may already read the metrics.
  log_request(record, status);
  responder.send(status, body, "application/json", std::move(headers));
}

void Server::authenticate(const HttpRequest& req, RequestRecord& record) const {
  if (!state_.api_keys) return;
  const std::string& p = req.path;
  if (p == "/healthz" || p == "/readyz" || (is_metrics_path(p) && !state_.metrics_need_key)) return;
  // The playground's page and files hold no data: the page asks for a key and sends it with
  // every API request it makes.
  if (state_.playground && req.method == "GET" && find_web_asset(p)) return;
  record.key = state_.authenticate(req.header("authorization"));
}

void Server::route(const HttpRequest& req, std::shared_ptr<HttpResponder> responder,
                   std::shared_ptr<RequestRecord> record) {
  const std::string& p = req.path;
  auto only = [&](const char* method) {
    if (req.method != method)
      throw HttpError(405, fmt::format("{} takes {} requests", p, method), "method_not_allowed");
  };
  if (state_.playground && req.method == "GET") {
    if (const WebAsset* asset = find_web_asset(p)) {
      // Only the page's own files may run or load; it talks to this origin only, and no
      // other site may frame it.
      responder->send(200, std::string(asset->body), std::string(asset->content_type),
                      {{"Content-Security-Policy",
                        "default-src 'none'; script-src 'self'; style-src 'self'; "
                        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                        "form-action 'none'; frame-ancestors 'none'"},
                       {"X-Content-Type-Options", "nosniff"},
                       {"X-Frame-Options", "DENY"},
                       {"Referrer-Policy", "no-referrer"},
                       {"Cache-Control", "no-cache"}});
      log_request(*record, 200);
      return;
    }
  }
  if (p == "/healthz") {
    only("GET");
    responder->send(200, R"({"status": "ok"})");
    return;
  }
  if (p == "/readyz") {
    only("GET");
    // Ready when not draining and every model's engine is idle or stepping.
    std::string why;
    if (state_.draining) why = "draining";
    const auto versions = state_.registry.available();
    for (const auto& m : versions) {
      if (why.empty() && !m->engine->responsive(state_.limits.max_step_time))
        why = fmt::format("model '{}' version {} is not making progress", m->name, m->version);
    }
    if (versions.empty()) why = "no model loaded";
    if (why.empty()) {
      responder->send(200, R"({"status": "ready"})");
    } else {
      responder->send(503, dump_json(nlohmann::json{{"status", "not ready"}, {"reason", why}}),
                      "application/json", {{"Retry-After", "1"}});
    }
    return;
  }
  if (p == "/v1/admin/stats") {
    only("GET");
    state_.require_admin(*record);
    // The engines' counters per model (summed over its versions) and per version (the metrics
    // issue exports them to Prometheus).
    nlohmann::json models = nlohmann::json::object();
    for (const auto& m : state_.registry.available()) {
      const EngineStats s = m->engine->stats();
      const nlohmann::json v = {{"steps", s.steps},
                                {"running", s.running},
                                {"waiting", s.waiting},
                                {"kv_blocks_total", s.kv_blocks_total},
                                {"kv_blocks_used", s.kv_blocks_used},
                                {"prefix_queried_tokens", s.prefix_queried_tokens},
                                {"prefix_hit_tokens", s.prefix_hit_tokens},
                                {"preemptions", s.preemptions},
                                {"kv_window_releases", s.kv_window_releases},
                                {"requests_finished", s.requests_finished},
                                {"prompt_tokens", s.prompt_tokens},
                                {"generated_tokens", s.generated_tokens}};
      nlohmann::json& total = models[m->name];
      if (total.is_null()) total = nlohmann::json::object();
      for (auto it = v.begin(); it != v.end(); ++it)
        total[it.key()] = total.value(it.key(), int64_t{0}) + it->get<int64_t>();
      total["versions"][std::to_string(m->version)] = v;
    }
    responder->send(200,
                    dump_json(nlohmann::json{{"models", models},
                                             {"memory_in_use", state_.registry.memory_in_use()},
                                             {"memory", memory_json()},
                                             {"open_connections", http_.open_connections()},
                                             {"slow_reader_streams", slow_reader_streams()},
                                             {"jobs_in_flight", state_.jobs.size()}}));
    return;
  }
  if (is_metrics_path(p)) {
    only("GET");
    // TF Serving's names only at its monitoring path, where its dashboards look for them.
    responder->send(200, render_metrics(p != "/metrics"),
                    "text/plain; version=0.0.4; charset=utf-8");
    return;
  }
  if (p == "/v1/admin/reload") {
    only("POST");
    state_.require_admin(*record);
    handle_reload(req, responder, record);
    return;
  }
  if (p == "/v1/completions" || p == "/v1/chat/completions") {
    only("POST");
    handle_openai_generation(state_, req, responder, record, p == "/v1/chat/completions");
    return;
  }
  if (p == "/v1/responses") {
    only("POST");
    handle_responses(state_, req, responder, record);
    return;
  }
  if (p.starts_with("/v1/responses/"))
    throw HttpError(404,
                    "this server stores no responses (it answers /v1/responses statelessly): "
                    "nothing to retrieve, cancel or delete",
                    "not_found");
  if (p == "/tokenize" || p == "/v1/tokenize") {
    only("POST");
    handle_tokenize(state_, req, responder, *record);
    return;
  }
  if (p == "/detokenize" || p == "/v1/detokenize") {
    only("POST");
    handle_detokenize(state_, req, responder, *record);
    return;
  }
  if (p == "/v1/embeddings") {
    only("POST");
    handle_embeddings(state_, req, responder, record);
    return;
  }
  if (p == "/v1/models" || p == "/v1/models/") {
    only("GET");
    responder->send(200, dump_json(openai_model_list(state_, record->key)));
    log_request(*record, 200);
    return;
  }
  static const std::string kModels = "/v1/models/";
  if (p.compare(0, kModels.size(), kModels) == 0) {
    const std::string rest = url_decode(p.substr(kModels.size()));
    // OpenAI's "retrieve model" for ids TF Serving paths cannot hold ("name:3", "name@stable")
    // or that are not TF Serving paths at all ("org/model").
    auto openai_retrieve = [&] {
      if (req.method != "GET" || rest.empty()) return false;
      const ModelRequestSpec spec = state_.registry.parse_model_field(rest);
      state_.require_model_access(*record, spec.name);
      // A fixed sticky key: a model with a traffic split answers the same version every time.
      auto m = state_.registry.resolve(spec, "listing");
      if (!m) {
        // "name:3" and "name@label" are model ids, not TF Serving verbs: nothing answers them.
        const size_t colon = rest.rfind(':');
        const bool version = colon != std::string::npos && colon + 1 < rest.size() &&
                             rest.find_first_not_of("0123456789", colon + 1) == std::string::npos;
        if (version || rest.find('@') != std::string::npos)
          throw HttpError(404, state_.registry.unavailable_reason(spec), "model_not_found",
                          "model");
        return false;
      }
      responder->send(200,
                      dump_json(openai_model_object(*m, rest, rest == spec.name ? "" : spec.name)));
      log_request(*record, 200);
      return true;
    };
    if (rest.find_first_of(":@") != std::string::npos && req.method == "GET" && openai_retrieve())
      return;
    // TF Serving's paths answer errors in TF Serving's shape ({"error": "..."}).
    auto tf_serving = [&](auto fn) {
      try {
        fn();
      } catch (const std::exception& e) {
        answer_error(e, ErrorShape::kTfServing, *responder, *record);
      }
    };
    if (auto mp = parse_model_path(rest)) {
      tf_serving([&] { handle_tfserving(state_, *mp, req, responder, record); });
      return;
    }
    if (openai_retrieve()) return;
    tf_serving(
        [&] { throw HttpError(404, fmt::format("Malformed request: {} {}", req.method, p)); });
    return;
  }
  throw HttpError(404, fmt::format("no route for {} {}", req.method, p), "not_found");
}

std::string Server::render_metrics(bool tf_serving_names) const {
  std::string out;
  const ServerMetrics& m = state_.metrics;
  m.requests.render(out);
  m.key_tokens.render(out);
  m.request_duration.render(out);
  m.ttft.render(out);
  m.itl.render(out);
  m.queue_time.render(out);
  m.prompt_tokens.render(out);
  m.generation_tokens.render(out);
  m.grpc_started.render(out);
  m.grpc_handled.render(out);
  if (tf_serving_names) {
    m.tf_request_count.render(out);
    m.tf_request_latency.render(out);
  }

  // The engines' figures, per available version, read now.
  struct Row {
    Labels labels;
    EngineStats s;
    double load_seconds;
  };
  std::vector<Row> rows;
  for (const auto& v : state_.registry.available()) {
    rows.push_back({{{"model", v->name}, {"version", std::to_string(v->version)}},
                    v->engine->stats(),
                    v->load_seconds});
  }
  auto family = [&](const char* name, const char* help, const char* type, auto value) {
    append_header(out, name, help, type);
    for (const auto& r : rows) append_sample(out, name, r.labels, value(r));
  };
  using D = double;
  family("tokenflow_num_requests_running", "Sequences in the running batch", "gauge",
         [](const Row& r) { return D(r.s.running); });
  family("tokenflow_num_requests_waiting", "Sequences waiting to be scheduled", "gauge",
         [](const Row& r) { return D(r.s.waiting); });
  family("tokenflow_kv_cache_blocks_used", "KV cache blocks in use", "gauge",
         [](const Row& r) { return D(r.s.kv_blocks_used); });
  family("tokenflow_kv_cache_capacity_blocks", "KV cache blocks in the pool", "gauge",
         [](const Row& r) { return D(r.s.kv_blocks_total); });
  family("tokenflow_kv_cache_usage_ratio", "Fraction of the KV cache blocks in use (0-1)", "gauge",
         [](const Row& r) {
           return r.s.kv_blocks_total ? D(r.s.kv_blocks_used) / D(r.s.kv_blocks_total) : 0.0;
         });
  family("tokenflow_prefix_cache_queries_total",
         "Prompt tokens looked up in the prefix cache (hit rate: rate(hits) / rate(queries))",
         "counter", [](const Row& r) { return D(r.s.prefix_queried_tokens); });
  family("tokenflow_prefix_cache_hits_total", "Prompt tokens found in the prefix cache", "counter",
         [](const Row& r) { return D(r.s.prefix_hit_tokens); });
  family("tokenflow_preemptions_total",
         "Sequences preempted because the KV cache ran out (recomputed later): the OOM count",
         "counter", [](const Row& r) { return D(r.s.preemptions); });
  family("tokenflow_engine_steps_total", "Forward passes (engine steps)", "counter",
         [](const Row& r) { return D(r.s.steps); });
  family("tokenflow_spec_decode_num_drafts_total",
         "Speculative decoding: verification steps of sequences with proposals", "counter",
         [](const Row& r) { return D(r.s.spec_drafts); });
  family("tokenflow_spec_decode_num_draft_tokens_total", "Speculative decoding: tokens proposed",
         "counter", [](const Row& r) { return D(r.s.spec_draft_tokens); });
  family("tokenflow_spec_decode_num_accepted_tokens_total",
         "Speculative decoding: proposed tokens accepted (acceptance rate: ratio to proposed)",
         "counter", [](const Row& r) { return D(r.s.spec_accepted_tokens); });
  family("tokenflow_spec_decode_num_emitted_tokens_total",
         "Speculative decoding: tokens emitted by verification steps (accepted + one each)",
         "counter", [](const Row& r) { return D(r.s.spec_emitted_tokens); });
  append_header(out, "tokenflow_spec_decode_num_accepted_tokens_per_pos_total",
                "Speculative decoding: proposals accepted at each position (0: the first)",
                "counter");
  for (const auto& r : rows) {
    if (r.s.spec_drafts == 0) continue;
    for (size_t i = 0; i < EngineStats::kSpecPositions; ++i) {
      Labels l = r.labels;
      l.emplace_back("position", std::to_string(i));
      append_sample(out, "tokenflow_spec_decode_num_accepted_tokens_per_pos_total", l,
                    D(r.s.spec_accepted_per_position[i]));
    }
  }
  family("tokenflow_engine_busy_seconds_total",
         "Seconds the version's compute pool spent in engine steps; rate() is its utilization "
         "(0-1), the CPU counterpart of GPU utilization",
         "counter", [](const Row& r) { return r.s.busy_seconds; });
  // Out of memory, by model and reason: requests whose prompt plus max_tokens can never fit the
  // KV cache (refused), steps that failed to allocate (their requests failed), model loads the
  // memory budget refused or that failed to allocate. Preemptions (the KV cache full for now,
  // the sequence recomputed later) are counted apart.
  {
    std::map<std::pair<std::string, std::string>, double> ooms = {};
    for (const auto& r : rows) {
      const std::string& model = r.labels[0].second;
      ooms[{model, "kv_cache_exhausted"}] += D(r.s.oom_kv_refused);
      ooms[{model, "allocation_failure"}] += D(r.s.oom_alloc_failures);
    }
    for (const auto& [key, n] : state_.registry.load_ooms()) ooms[key] += D(n);
    append_header(out, "tokenflow_oom_total",
                  "Out-of-memory events by model and reason (kv_cache_exhausted, "
                  "allocation_failure, model_load_memory_budget)",
                  "counter");
    for (const auto& [key, n] : ooms)
      append_sample(out, "tokenflow_oom_total", {{"model", key.first}, {"reason", key.second}}, n);
  }
  family("tokenflow_model_load_duration_seconds", "Seconds the version took to load", "gauge",
         [](const Row& r) { return r.load_seconds; });
  const char* batch = "tokenflow_batch_size";
  append_header(out, batch, "Sequences per engine step", "histogram");
  for (const auto& r : rows) {
    int64_t cumulative = 0;
    for (size_t i = 0; i < EngineStats::kBatchBuckets.size(); ++i) {
      cumulative += r.s.batch_size_steps[i];
      Labels l = r.labels;
      l.emplace_back("le", std::to_string(EngineStats::kBatchBuckets[i]));
      append_sample(out, std::string(batch) + "_bucket", l, D(cumulative));
    }
    Labels l = r.labels;
    l.emplace_back("le", "+Inf");
    append_sample(out, std::string(batch) + "_bucket", l, D(r.s.steps));
    append_sample(out, std::string(batch) + "_sum", r.labels, D(r.s.batch_seqs));
    append_sample(out, std::string(batch) + "_count", r.labels, D(r.s.steps));
  }

  // Every version the registry knows, one series per state (1 for the current one).
  append_header(out, "tokenflow_model_version_state",
                "1 for the version's current state (START, LOADING, AVAILABLE, UNLOADING, END)",
                "gauge");
  for (const std::string& name : state_.registry.names()) {
    for (const auto& v : state_.registry.status(name).value_or(std::vector<VersionStatus>{})) {
      append_sample(out, "tokenflow_model_version_state",
                    {{"model", name},
                     {"version", std::to_string(v.version)},
                     {"state", version_state_name(v.state)}},
                    1);
    }
  }
  append_header(out, "tokenflow_requests_preparing",
                "Requests being parsed and tokenized (or waiting for a preparation thread)",
                "gauge");
  append_sample(out, "tokenflow_requests_preparing", {}, D(state_.prepare_pool.in_progress()));
  append_header(out, "tokenflow_open_connections", "HTTP connections open now", "gauge");
  append_sample(out, "tokenflow_open_connections", {}, D(http_.open_connections()));
  append_header(out, "tokenflow_slow_reader_streams_total",
                "Streams (SSE and gRPC) ended because their client read too slowly "
                "(--max-unsent-bytes)",
                "counter");
  append_sample(out, "tokenflow_slow_reader_streams_total", {}, D(slow_reader_streams()));
  append_process_metrics(out);
  return out;
}

void Server::handle_reload(const HttpRequest& req, std::shared_ptr<HttpResponder> responder,
                           std::shared_ptr<RequestRecord> record) {
  if (!state_.reload) throw HttpError(400, "this server takes no reloads", "reload_unsupported");
  // An empty body re-reads --model_config_file; a body is a ModelServerConfig in text format
  // (the message of TF Serving's HandleReloadConfigRequest). A bad one is refused here, before
  // anything changes.
  std::optional<tfs::ModelServerConfig> config;
  if (req.body.find_first_not_of(" \t\r\n") != std::string::npos) {
    config = parse_model_server_config(req.body, "request body");
    state_.check_reload_config(*config);
  }
  // Answered from the manager thread once the new config is loaded (or refused); logged before
  // the answer goes out, as every answer sent off the connection's strand is.
  state_.reload(std::move(config), [this, responder, record](const std::string& error) {
    if (!error.empty()) {
      log_request(*record, 400);
      responder->send(400, openai_error_body(400, error, "invalid_config"));
      return;
    }
    nlohmann::json models = nlohmann::json::object();
    for (const std::string& name : state_.registry.names()) {
      nlohmann::json versions = nlohmann::json::array();
      for (const auto& v : state_.registry.status(name).value_or(std::vector<VersionStatus>{})) {
        versions.push_back(
            {{"version", v.version}, {"state", version_state_name(v.state)}, {"error", v.error}});
      }
      models[name] = {{"versions", versions}, {"error", state_.registry.model_error(name)}};
    }
    log_request(*record, 200);
    responder->send(200, dump_json(nlohmann::json{{"status", "ok"}, {"models", models}}));
  });
}

}  // namespace tf
