#include "serving/http/admin_routes.h"

#include <fmt/format.h>

#include <map>
#include <optional>

#include "core/memory.h"
#include "serving/core/metrics.h"
#include "serving/models/server_config.h"

namespace tf {
namespace {

// The engines' figures, described once for both pages: the key /v1/admin/stats gives one (""
// none: Prometheus only), its Prometheus series (name, help, type; "" none: the stats page
// only) and how to read it.
struct EngineStatField {
  const char* key;
  const char* metric;
  const char* help;
  const char* type;
  double (*get)(const EngineStats&);
};
using D = double;
constexpr EngineStatField kEngineStatFields[] = {
    {"steps", "", "", "", [](const EngineStats& s) { return D(s.steps); }},
    {"running", "tokenflow_num_requests_running", "Sequences in the running batch", "gauge",
     [](const EngineStats& s) { return D(s.running); }},
    {"waiting", "tokenflow_num_requests_waiting", "Sequences waiting to be scheduled", "gauge",
     [](const EngineStats& s) { return D(s.waiting); }},
    {"grammar_jobs", "", "", "", [](const EngineStats& s) { return D(s.grammar_jobs); }},
    {"kv_blocks_used", "tokenflow_kv_cache_blocks_used", "KV cache blocks in use", "gauge",
     [](const EngineStats& s) { return D(s.kv_blocks_used); }},
    {"kv_blocks_total", "tokenflow_kv_cache_capacity_blocks", "KV cache blocks in the pool",
     "gauge", [](const EngineStats& s) { return D(s.kv_blocks_total); }},
    {"", "tokenflow_kv_cache_usage_ratio", "Fraction of the KV cache blocks in use (0-1)", "gauge",
     [](const EngineStats& s) {
       return s.kv_blocks_total ? D(s.kv_blocks_used) / D(s.kv_blocks_total) : 0.0;
     }},
    {"prefix_queried_tokens", "tokenflow_prefix_cache_queries_total",
     "Prompt tokens looked up in the prefix cache (hit rate: rate(hits) / rate(queries))",
     "counter", [](const EngineStats& s) { return D(s.prefix_queried_tokens); }},
    {"prefix_hit_tokens", "tokenflow_prefix_cache_hits_total",
     "Prompt tokens found in the prefix cache", "counter",
     [](const EngineStats& s) { return D(s.prefix_hit_tokens); }},
    {"preemptions", "tokenflow_preemptions_total",
     "Sequences preempted because the KV cache ran out (recomputed later): the OOM count",
     "counter", [](const EngineStats& s) { return D(s.preemptions); }},
    {"", "tokenflow_engine_steps_total", "Forward passes (engine steps)", "counter",
     [](const EngineStats& s) { return D(s.steps); }},
    {"kv_window_releases", "", "", "",
     [](const EngineStats& s) { return D(s.kv_window_releases); }},
    {"requests_finished", "", "", "", [](const EngineStats& s) { return D(s.requests_finished); }},
    {"requests_failed", "", "", "", [](const EngineStats& s) { return D(s.requests_failed); }},
    {"prompt_tokens", "", "", "", [](const EngineStats& s) { return D(s.prompt_tokens); }},
    {"generated_tokens", "", "", "", [](const EngineStats& s) { return D(s.generated_tokens); }},
    {"", "tokenflow_spec_decode_num_drafts_total",
     "Speculative decoding: verification steps of sequences with proposals", "counter",
     [](const EngineStats& s) { return D(s.spec_drafts); }},
    {"", "tokenflow_spec_decode_num_draft_tokens_total", "Speculative decoding: tokens proposed",
     "counter", [](const EngineStats& s) { return D(s.spec_draft_tokens); }},
    {"", "tokenflow_spec_decode_num_accepted_tokens_total",
     "Speculative decoding: proposed tokens accepted (acceptance rate: ratio to proposed)",
     "counter", [](const EngineStats& s) { return D(s.spec_accepted_tokens); }},
    {"", "tokenflow_spec_decode_num_emitted_tokens_total",
     "Speculative decoding: tokens emitted by verification steps (accepted + one each)", "counter",
     [](const EngineStats& s) { return D(s.spec_emitted_tokens); }},
    // The prefix cache's disk tier (--kv-cache-dir; all 0 without it).
    {"kv_disk_lookups", "tokenflow_kv_disk_lookups_total",
     "Requests whose prompt prefix went past the RAM prefix cache to the disk tier", "counter",
     [](const EngineStats& s) { return D(s.disk.lookups); }},
    {"kv_disk_hit_blocks", "tokenflow_kv_disk_hits_total",
     "KV blocks read from the disk tier (whole and verified)", "counter",
     [](const EngineStats& s) { return D(s.disk.hit_blocks); }},
    {"kv_disk_miss_blocks", "tokenflow_kv_disk_misses_total",
     "Disk lookups that stopped at a block the directory does not have", "counter",
     [](const EngineStats& s) { return D(s.disk.miss_blocks); }},
    {"kv_disk_prompt_tokens", "tokenflow_kv_disk_prompt_tokens_total",
     "Prompt tokens whose K/V came from disk instead of being computed (the time it saved)",
     "counter", [](const EngineStats& s) { return D(s.disk_loaded_tokens); }},
    {"kv_disk_read_bytes", "tokenflow_kv_disk_read_bytes_total", "Bytes read from the disk tier",
     "counter", [](const EngineStats& s) { return D(s.disk.read_bytes); }},
    {"kv_disk_written_bytes", "tokenflow_kv_disk_written_bytes_total",
     "Bytes written to the disk tier", "counter",
     [](const EngineStats& s) { return D(s.disk.written_bytes); }},
    {"kv_disk_written_blocks", "", "", "",
     [](const EngineStats& s) { return D(s.disk.written_blocks); }},
    {"kv_disk_evictions", "tokenflow_kv_disk_evictions_total",
     "Disk tier entries removed to stay under --kv-cache-dir-size (least recently used)", "counter",
     [](const EngineStats& s) { return D(s.disk.evictions); }},
    {"kv_disk_corrupt", "tokenflow_kv_disk_corrupt_total",
     "Disk tier entries that failed their checks (truncated, corrupted): misses, removed",
     "counter", [](const EngineStats& s) { return D(s.disk.corrupt); }},
    {"kv_disk_dropped", "tokenflow_kv_disk_dropped_total",
     "Blocks not written to disk because the write queue was full", "counter",
     [](const EngineStats& s) { return D(s.disk.dropped); }},
    {"kv_disk_bytes", "tokenflow_kv_disk_usage_bytes",
     "Bytes of the disk tier's entries, as this version last counted them", "gauge",
     [](const EngineStats& s) { return D(s.disk.bytes); }},
    {"", "tokenflow_engine_busy_seconds_total",
     "Seconds the version's compute pool spent in engine steps; rate() is its utilization "
     "(0-1), the CPU counterpart of GPU utilization",
     "counter", [](const EngineStats& s) { return s.busy_seconds; }},
};

// The cache groups of a version's KV layout (CacheLayout) and the blocks each holds now.
nlohmann::json kv_groups_json(const EngineStats& s) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& g : s.kv_groups) {
    out.push_back({{"kind", g.kind},
                   {"window", g.window},
                   {"layers", g.layers},
                   {"blocks_used", g.blocks_used},
                   {"bytes_per_token", g.bytes_per_token},
                   {"dtype", s.kv_dtype}});
  }
  return out;
}

// The process's memory as the OS and malloc see it (core/memory.h), for the stats page.
nlohmann::json memory_json() {
  const MemoryStats m = memory_stats();
  return {{"rss_bytes", m.rss},
          {"heap_in_use_bytes", m.heap_in_use},
          {"heap_free_bytes", m.heap_free},
          {"heap_mmapped_bytes", m.heap_mmapped},
          {"heap_arena_bytes", m.arena}};
}

// POST /v1/admin/reload: applies a new model config (the body, or the config file).
void handle_reload(ServingState& state_, const HttpRequest& req,
                   std::shared_ptr<HttpResponder> responder,
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
  state_.reload(std::move(config), [&state_, responder, record](const std::string& error) {
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

}  // namespace

std::string render_metrics(const ServingState& state_, const AdminSources& sources,
                           bool tf_serving_names) {
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
    ServedModel::LoraCounts lora;
  };
  std::vector<Row> rows;
  for (const auto& v : state_.registry.available()) {
    rows.push_back({{{"model", v->name}, {"version", std::to_string(v->version)}},
                    v->engine->stats(),
                    v->load_seconds,
                    v->lora_counts()});
  }
  auto family = [&](const char* name, const char* help, const char* type, auto value) {
    append_header(out, name, help, type);
    for (const auto& r : rows) append_sample(out, name, r.labels, value(r));
  };
  using D = double;
  for (const EngineStatField& f : kEngineStatFields) {
    if (*f.metric) family(f.metric, f.help, f.type, [&f](const Row& r) { return f.get(r.s); });
  }
  // LoRA adapters resident over each version (--max-loras bounds them), their bytes, and how
  // often one was loaded and evicted.
  family("tokenflow_lora_adapters_resident", "LoRA adapters loaded in compute form", "gauge",
         [](const Row& r) { return D(r.lora.resident); });
  family("tokenflow_lora_adapter_bytes", "Bytes of the resident LoRA adapters", "gauge",
         [](const Row& r) { return D(r.lora.bytes); });
  family("tokenflow_lora_loads_total",
         "LoRA adapters loaded (first use, or again after "
         "eviction)",
         "counter", [](const Row& r) { return D(r.lora.loads); });
  family("tokenflow_lora_evictions_total", "LoRA adapters evicted to stay within --max-loras",
         "counter", [](const Row& r) { return D(r.lora.evictions); });
  // Per cache group (one for a plain decoder stack; sliding-window layers beside global ones
  // have groups of their own that release blocks): what share of the pool each holds, and the
  // bytes a token takes there.
  const auto per_group = [&](const char* name, const char* help, bool dtype,
                             double (*value)(const Row&, const EngineStats::KvGroup&)) {
    append_header(out, name, help, "gauge");
    for (const auto& r : rows) {
      for (size_t g = 0; g < r.s.kv_groups.size(); ++g) {
        Labels l = r.labels;
        l.emplace_back("group", std::to_string(g));
        l.emplace_back("kind", r.s.kv_groups[g].kind);
        if (dtype) l.emplace_back("dtype", r.s.kv_dtype);
        append_sample(out, name, l, value(r, r.s.kv_groups[g]));
      }
    }
  };
  per_group("tokenflow_kv_cache_group_usage_ratio",
            "Fraction of the KV cache blocks held by the cache group (0-1); the groups sum to "
            "tokenflow_kv_cache_usage_ratio",
            false, [](const Row& r, const EngineStats::KvGroup& g) {
              return r.s.kv_blocks_total ? D(g.blocks_used) / D(r.s.kv_blocks_total) : 0.0;
            });
  per_group("tokenflow_kv_cache_bytes_per_token",
            "Bytes of KV cache one token takes in the cache group (its layers' keys and values "
            "in --kv-cache-dtype; 0 for a recurrent group)",
            true, [](const Row&, const EngineStats::KvGroup& g) { return D(g.bytes_per_token); });
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
  append_sample(out, "tokenflow_open_connections", {}, D(sources.open_connections()));
  append_header(out, "tokenflow_slow_reader_streams_total",
                "Streams (SSE and gRPC) ended because their client read too slowly "
                "(--max-unsent-bytes)",
                "counter");
  append_sample(out, "tokenflow_slow_reader_streams_total", {}, D(sources.slow_reader_streams()));
  append_process_metrics(out);
  return out;
}

void add_admin_routes(RouteTable& routes, ServingState& state_, AdminSources sources) {
  routes.add("GET", "/healthz",
             [](RouteCall& c) { c.responder->send(200, R"({"status": "ok"})"); });
  routes.add("GET", "/readyz", [&state_](RouteCall& c) {
    auto& responder = c.responder;
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
  });
  routes.add("GET", "/v1/admin/stats", [&state_, sources](RouteCall& c) {
    auto& responder = c.responder;
    auto& record = c.record;
    state_.require_admin(*record);
    // ?trim=1: free heap pages go back to the OS first (malloc_trim), so that the memory figures
    // are what the process holds rather than what malloc happens to keep resident.
    if (c.req.query == "trim=1") release_free_memory();
    // The engines' counters per model (summed over its versions) and per version (the metrics
    // issue exports them to Prometheus).
    nlohmann::json models = nlohmann::json::object();
    for (const auto& m : state_.registry.available()) {
      const EngineStats s = m->engine->stats();
      nlohmann::json v = nlohmann::json::object();
      for (const EngineStatField& f : kEngineStatFields)
        if (*f.key) v[f.key] = static_cast<int64_t>(f.get(s));
      nlohmann::json& total = models[m->name];
      if (total.is_null()) total = nlohmann::json::object();
      for (auto it = v.begin(); it != v.end(); ++it)
        total[it.key()] = total.value(it.key(), int64_t{0}) + it->get<int64_t>();
      v["kv_groups"] = kv_groups_json(s);  // per version: versions may differ in layout
      total["versions"][std::to_string(m->version)] = v;
    }
    responder->send(200,
                    dump_json(nlohmann::json{{"models", models},
                                             {"memory_in_use", state_.registry.memory_in_use()},
                                             {"memory", memory_json()},
                                             {"open_connections", sources.open_connections()},
                                             {"slow_reader_streams", sources.slow_reader_streams()},
                                             {"jobs_in_flight", state_.jobs.size()},
                                             {"preparing", state_.prepare_pool.in_progress()}}));
  });
  // TF Serving's names only at its monitoring path, where its dashboards look for them.
  routes.add("GET", "/metrics", [&state_, sources](RouteCall& c) {
    c.responder->send(200, render_metrics(state_, sources, false),
                      "text/plain; version=0.0.4; charset=utf-8");
  });
  if (!state_.prometheus_path.empty() && state_.prometheus_path != "/metrics") {
    routes.add("GET", state_.prometheus_path, [&state_, sources](RouteCall& c) {
      c.responder->send(200, render_metrics(state_, sources, true),
                        "text/plain; version=0.0.4; charset=utf-8");
    });
  }
  routes.add("POST", "/v1/admin/reload", [&state_](RouteCall& c) {
    state_.require_admin(*c.record);
    handle_reload(state_, c.req, c.responder, c.record);
  });
}

}  // namespace tf
