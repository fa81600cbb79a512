// `tokenflow serve`: loads the models (--model, or TF Serving's --model_config_file with versions
// and labels), starts the version manager, the HTTP server (OpenAI and TF Serving REST APIs) and,
// with --grpc-port, the gRPC server, and runs until SIGINT or SIGTERM, then shuts down
// gracefully. SIGHUP re-reads the model config file.

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "core/log.h"
#include "serving/grpc_server.h"
#include "serving/server.h"
#include "serving/version_manager.h"

namespace tf::cli {
namespace {

struct ServeOptions {
  std::vector<std::string> models;
  std::vector<std::string> names;
  std::string tokenizer;
  std::string host = "127.0.0.1";
  int port = 8080;
  int grpc_port = -1;  // -1: no gRPC server
  int http_threads = 1;
  int prepare_threads = 2;
  EngineOptions engine;
  std::string dtype = "f32";
  int64_t max_body_bytes = 8 << 20;
  int64_t max_waiting_requests = 1024;
  double read_timeout_s = 30, idle_timeout_s = 60, shutdown_timeout_s = 30;
  std::string model_config_file;
  double model_config_file_poll_s = 0;
  double file_system_poll_s = 1;
  std::string memory_budget;
  std::string access_log = "-";
  bool log_prompts = false;
  std::string api_keys_file;
  double request_timeout_s = 600;
  int64_t max_prompt_tokens = 0, max_tokens_cap = 0;
  std::string tls_cert, tls_key;
  bool metrics_require_key = false;
  bool allow_config_reload_body = false;
  int64_t max_connections = 4096;
  int64_t max_sequences_per_request = 256;
  std::vector<std::string> model_roots;
};

// Bytes of the files under a version's path (a directory or one file).
int64_t path_bytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return static_cast<int64_t>(fs::file_size(path, ec));
  int64_t sum = 0;
  for (const auto& e : fs::recursive_directory_iterator(path, ec)) {
    if (e.is_regular_file(ec)) sum += static_cast<int64_t>(e.file_size(ec));
  }
  return sum;
}

// Bytes per weight of a dtype relative to the f32 most checkpoints hold (q4: 4.5 bits).
double dtype_ratio(kernels::WeightType t) {
  switch (t) {
    case kernels::WeightType::kF32:
      return 1.0;
    case kernels::WeightType::kBF16:
    case kernels::WeightType::kF16:
      return 0.5;
    case kernels::WeightType::kI8:
      return 0.25;
    case kernels::WeightType::kQ4:
      return 4.5 / 32;
  }
  return 1.0;
}

int run_serve(const ServeOptions& o) {
  if (o.port < 0 || o.port > 65535) fail("--port must be in 0..65535, got {}", o.port);
  if (o.grpc_port < -1 || o.grpc_port > 65535)
    fail("--grpc-port must be in 0..65535 (or -1 for none), got {}", o.grpc_port);
  if (o.http_threads < 1) fail("--http-threads must be at least 1");
  if (o.prepare_threads < 1 || o.prepare_threads > 256) fail("--prepare-threads must be in 1..256");
  if (o.max_body_bytes < 1024) fail("--max-body-bytes must be at least 1024");
  if (o.models.empty() == o.model_config_file.empty())
    fail("give --model (repeatable) or --model_config_file, not both");
  // Checked before anything loads: a bad config file or --model value ends here.
  std::vector<ModelEntryConfig> entries;
  if (o.model_config_file.empty()) entries = model_entries_from_flags(o.models, o.names);
  // The directories a reload's config may point into: --model-root, and the base paths the
  // server starts with (re-pointing a model at its own directory is always allowed).
  std::vector<std::string> roots = o.model_roots;
  if (!o.model_config_file.empty()) {
    const tfs::ModelServerConfig startup = load_model_server_config(o.model_config_file);
    for (const auto& m : startup.model_config_list().config()) roots.push_back(m.base_path());
  }
  for (const auto& e : entries) roots.push_back(e.config.base_path());
  for (std::string& r : roots) {
    std::error_code ec;
    r = std::filesystem::weakly_canonical(r, ec).string();
  }
  // The signals are taken by this thread only (sigwait below): block them before any thread
  // (engine, compute pool, I/O) starts, so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  EngineConfig ec = o.engine.config();
  ec.max_queued_requests = o.max_waiting_requests;
  const kernels::WeightType dtype = kernels::parse_weight_type(o.dtype);
  ModelRegistry::Options ro;
  if (!o.memory_budget.empty()) ro.memory_budget = parse_memory_budget(o.memory_budget);
  ro.estimate = [ec, dtype](const std::string& path) {
    return static_cast<int64_t>(static_cast<double>(path_bytes(path)) * dtype_ratio(dtype)) +
           ec.kv_cache_bytes;
  };
  ro.measure = [ec, dtype](const ServedModel& m) {
    const auto& w = m.model->weights();
    const size_t weights = dtype == kernels::WeightType::kF32
                               ? w.stored_bytes() + w.converted_bytes()
                               : w.converted_bytes();
    return static_cast<int64_t>(weights) + ec.kv_cache_bytes;
  };
  const std::string tokenizer = o.tokenizer;
  ServingState state(
      [ec, tokenizer, dtype](const std::string& name, int64_t version, const std::string& path) {
        std::shared_ptr<ServedModel> m = load_served_model(name, path, ec, tokenizer, dtype);
        m->version = version;
        log::info("loaded '{}' version {} from {} in {:.2f} s ({}, {} KV blocks)", m->name, version,
                  m->path, m->load_seconds, m->config().architecture, m->engine->kv_blocks());
        return m;
      },
      std::move(ro));
  if (!(o.request_timeout_s > 0)) fail("--request-timeout must be > 0");
  state.limits.max_request_time =
      std::chrono::milliseconds(static_cast<int64_t>(o.request_timeout_s * 1000));
  if (o.max_prompt_tokens < 0 || o.max_tokens_cap < 0)
    fail("--max-prompt-tokens and --max-tokens-cap must be >= 0");
  state.limits.max_prompt_tokens = o.max_prompt_tokens;
  state.limits.max_tokens_cap = o.max_tokens_cap;
  state.limits.max_sequences_per_request = o.max_sequences_per_request;
  state.config_body_reloads = o.allow_config_reload_body;
  state.model_roots = roots;
  if (!o.api_keys_file.empty()) {
    state.api_keys = std::make_unique<ApiKeys>(ApiKeys::load(o.api_keys_file));
    state.metrics_need_key = o.metrics_require_key;
    log::info("API keys required ({} keys from {})", state.api_keys->size(), o.api_keys_file);
  }
  if (o.access_log != "off")
    state.access_log = std::make_unique<AccessLog>(o.access_log, o.log_prompts);
  VersionManager manager(state.registry,
                         {o.model_config_file, o.model_config_file_poll_s, o.file_system_poll_s});
  manager.start(std::move(entries));
  state.reload = [&manager](std::optional<tfs::ModelServerConfig> config,
                            std::function<void(const std::string&)> done) {
    manager.reload(std::move(config), std::move(done));
  };
  if (o.model_config_file.empty()) {
    // --model names models that exist now: one that does not load ends the command, as before
    // there was a registry. (With a config file, versions may appear later, and one bad model
    // must not stop the others.)
    for (const std::string& name : state.registry.names()) {
      std::string why = state.registry.model_error(name);
      for (const auto& v : state.registry.status(name).value_or(std::vector<VersionStatus>{}))
        if (!v.error.empty()) why = v.error;
      if (!why.empty()) fail("model '{}': {}", name, why);
    }
  } else if (state.registry.available().empty()) {
    log::warn("no model version is available yet: requests get 404 until one loads");
  }
  {
    HttpServerConfig hc;
    hc.host = o.host;
    hc.port = static_cast<uint16_t>(o.port);
    hc.threads = o.http_threads;
    hc.max_body_bytes = static_cast<size_t>(o.max_body_bytes);
    hc.read_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.read_timeout_s * 1000));
    hc.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.idle_timeout_s * 1000));
    hc.tls_cert = o.tls_cert;
    hc.tls_key = o.tls_key;
    hc.max_connections = o.max_connections;
    state.prepare_pool.start(o.prepare_threads);
    Server server(state, hc);
    server.start();
    std::optional<GrpcServer> grpc;
    if (o.grpc_port >= 0) {
      GrpcServerConfig gc;
      gc.host = o.host;
      gc.port = static_cast<uint16_t>(o.grpc_port);
      gc.max_message_bytes = static_cast<int>(o.max_body_bytes);
      gc.tls_cert = o.tls_cert;
      gc.tls_key = o.tls_key;
      grpc.emplace(state, gc);
    }
    // One line on stdout, for people and scripts (a test reads the port from it).
    const auto names = state.registry.names();
    const char* scheme = o.tls_cert.empty() ? "http" : "https";
    std::printf("tokenflow serving %s on %s://%s:%u\n",
                names.empty() ? "-" : fmt::format("{}", fmt::join(names, ", ")).c_str(), scheme,
                o.host.c_str(), server.port());
    std::printf(
        "try: curl -s%s %s://%s:%u/v1/completions -H 'Content-Type: application/json' -d "
        "'{\"prompt\": \"Once upon a time\", \"max_tokens\": 64}'\n",
        o.tls_cert.empty() ? "" : "k", scheme, o.host.c_str(), server.port());
    if (grpc) {
      std::printf(
          "tokenflow gRPC on %s:%u (tokenflow.v1.GenerationService, "
          "TF Serving's ModelService and PredictionService, health, reflection)%s\n",
          o.host.c_str(), grpc->port(), o.tls_cert.empty() ? "" : " with TLS");
    }
    std::fflush(stdout);
    int sig = 0;
    // SIGHUP re-reads the model config, as the empty-bodied reload does (a terminal that closes,
    // or a supervisor's reload, never cuts requests off); SIGINT and SIGTERM drain and stop.
    while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
      if (o.model_config_file.empty()) {
        log::warn("SIGHUP: no --model_config_file to re-read; ignored");
        continue;
      }
      log::info("SIGHUP: re-reading {}", o.model_config_file);
      state.reload(std::nullopt, [](const std::string& why) {
        if (why.empty()) {
          log::info("SIGHUP: model config reloaded");
        } else {
          log::error("SIGHUP: model config not reloaded: {}", why);
        }
      });
    }
    log::warn("{}: shutting down (up to {:.0f} s for requests in progress)",
              sig == SIGINT ? "SIGINT" : "SIGTERM", o.shutdown_timeout_s);
    const auto grace = std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout_s * 1000));
    // Both front doors drain at once; calls still running at the deadline are cancelled while
    // the engines still run, so that they end.
    std::thread grpc_drain;
    if (grpc) {
      state.draining = true;
      grpc_drain =
          std::thread([&grpc, grace] { grpc->shutdown(std::chrono::steady_clock::now() + grace); });
    }
    server.shutdown(grace);
    if (grpc_drain.joinable()) grpc_drain.join();
    state.prepare_pool.stop();  // what was still being prepared starts no job after this
    // Jobs and engines go before the server's I/O context (their responders hold connections).
    manager.stop();
    state.jobs.clear();
    state.registry.apply({});
    state.registry.sync();
  }
  std::printf("tokenflow stopped\n");
  return 0;
}

}  // namespace

Action add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  app.add_option("--model,-m", o->models,
                 "NAME=PATH or PATH: a model directory or file, or a base path of integer-named "
                 "version directories (latest served); repeatable, the first is the default");
  app.add_option("--served-model-name", o->names,
                 "the name clients use (default: the directory's name); one per --model");
  app.add_option("--model_config_file,--model-config-file", o->model_config_file,
                 "TF Serving model config (text ModelServerConfig): models, base paths, version "
                 "policies, labels, tokenflow's traffic_split");
  app.add_option("--model_config_file_poll_wait_seconds,--model-config-file-poll-wait-seconds",
                 o->model_config_file_poll_s,
                 "re-read the model config file this often (0: at start and on "
                 "POST /v1/admin/reload only)")
      ->capture_default_str();
  app.add_option("--file_system_poll_wait_seconds,--file-system-poll-wait-seconds",
                 o->file_system_poll_s,
                 "scan base paths for new and removed versions this often (0: at start and on "
                 "reload only)")
      ->capture_default_str();
  app.add_option("--access-log", o->access_log,
                 "one JSON line per request (id, model, version, tokens, time to first token, "
                 "duration, status, finish reason): a file, '-' for stderr, or 'off'")
      ->capture_default_str();
  app.add_flag("--log-prompts", o->log_prompts, "write each request's prompt in the access log");
  app.add_option("--api-keys-file", o->api_keys_file,
                 "require 'Authorization: Bearer KEY' on every route but /healthz, /readyz and "
                 "/metrics; one key (or sha256:HEX) per line with optional name=, models=, rpm=, "
                 "tpm=, concurrency= (docs/api.md)");
  app.add_option("--max-prompt-tokens", o->max_prompt_tokens,
                 "longest prompt in tokens (0: the model's context)")
      ->capture_default_str();
  app.add_option("--max-tokens-cap", o->max_tokens_cap,
                 "largest max_tokens a request may ask for (0: up to the context)")
      ->capture_default_str();
  app.add_option("--tls-cert", o->tls_cert, "serve HTTPS: PEM certificate (chain) file");
  app.add_option("--tls-key", o->tls_key, "serve HTTPS: PEM private key file");
  app.add_option("--request-timeout", o->request_timeout_s,
                 "longest a request may take, queue time included, in seconds (a request's "
                 "\"timeout\" may ask for less); then it ends with finish_reason abort, or 504")
      ->capture_default_str();
  app.add_flag("--allow-config-reload-body", o->allow_config_reload_body,
               "accept a ModelServerConfig in POST /v1/admin/reload and gRPC "
               "HandleReloadConfigRequest (admin keys only; base paths under --model-root)");
  app.add_option("--model-root", o->model_roots,
                 "a directory whose subdirectories a reloaded config may serve (repeatable; the "
                 "startup base paths are always allowed)");
  app.add_flag("--metrics-require-key", o->metrics_require_key,
               "with --api-keys-file: /metrics needs a key too");
  app.add_option("--memory-budget", o->memory_budget,
                 "versions that would take more memory (weights + KV cache) in all are not "
                 "loaded: bytes, 8GiB, or a fraction of available memory");
  app.add_option("--tokenizer", o->tokenizer,
                 "tokenizer file or directory (default: found beside the model)");
  app.add_option("--host", o->host, "address to listen on")->capture_default_str();
  app.add_option("--port,-p", o->port, "port to listen on (0: any free port)")
      ->capture_default_str();
  app.add_option("--grpc-port", o->grpc_port,
                 "also serve gRPC on this port (tokenflow.v1.GenerationService, TF Serving's "
                 "ModelService and PredictionService, health, reflection; 0: any free port; -1: "
                 "no gRPC)")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // scripts/run.sh gives one
  app.add_option("--http-threads", o->http_threads, "I/O threads for HTTP")->capture_default_str();
  app.add_option("--prepare-threads", o->prepare_threads,
                 "threads that parse requests and tokenize prompts (off the I/O threads)")
      ->capture_default_str();
  add_engine_options(app, o->engine);
  app.add_option("--dtype", o->dtype, "weights in memory: f32, bf16, f16, int8 or q4")
      ->capture_default_str();
  app.add_option("--max-sequences-per-request", o->max_sequences_per_request,
                 "sequences one request may ask for: prompts x max(n, best_of, beams) (400 above; "
                 "0: no limit)")
      ->capture_default_str();
  app.add_option("--max-connections", o->max_connections,
                 "HTTP connections open at once; more are answered 503 and closed (0: no cap; "
                 "keep it under the process's file descriptor limit)")
      ->capture_default_str();
  app.add_option("--max-body-bytes", o->max_body_bytes, "largest request body (413 above)")
      ->capture_default_str();
  app.add_option("--max-waiting-requests", o->max_waiting_requests,
                 "queued requests per model at which new ones get 503")
      ->capture_default_str();
  app.add_option("--read-timeout", o->read_timeout_s, "seconds to receive a whole request")
      ->capture_default_str();
  app.add_option("--idle-timeout", o->idle_timeout_s, "seconds a keep-alive connection may idle")
      ->capture_default_str();
  app.add_option("--shutdown-timeout", o->shutdown_timeout_s,
                 "seconds requests in progress get to finish on SIGTERM/SIGINT")
      ->capture_default_str();
  return [o] { return run_serve(*o); };
}

}  // namespace tf::cli
