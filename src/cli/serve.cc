// `tokenflow serve`: loads the models (--model, or TF Serving's --model_config_file with versions
// and labels), starts the version manager, the HTTP server (OpenAI and TF Serving REST APIs) and,
// with --grpc-port, the gRPC server, and runs until SIGINT or SIGTERM, then shuts down
// gracefully. SIGHUP re-reads the model config file.

#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdio>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "core/log.h"
#include "serving/model_server.h"
#include "serving/models/server_config.h"

namespace tf::cli {
namespace {

struct ServeOptions {
  std::vector<std::string> models;
  std::vector<std::string> loras;
  std::vector<int> lora_models;  // per --lora: the index of the --model before it (-1: none)
  int max_loras = 0;
  std::vector<std::string> names;
  std::string tokenizer;
  std::string host = "127.0.0.1";
  int port = 8080;
  int grpc_port = -1;  // -1: no gRPC server
  bool http = true;    // false: gRPC only
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
  bool no_playground = false;
  bool allow_config_reload_body = false;
  int64_t max_connections = 4096;
  bool http_half_close = false;
  int64_t max_unsent_bytes = 8 << 20;
  int64_t max_sequences_per_request = 256;
  std::vector<std::string> model_roots;
  std::string prometheus_path;   // TF Serving's monitoring path ("": none)
  std::string tool_call_parser;  // "": told from each model's chat template
  std::string chat_template, chat_template_kwargs;
  std::vector<std::string> tasks, poolings;
  bool check = false;  // validate and exit (no model loads, no port binds)
  // gRPC only (TF Serving's --ssl_config_file, --grpc_channel_arguments, --grpc_max_threads,
  // --grpc_socket_path).
  std::string grpc_tls_cert_pem, grpc_tls_key_pem, grpc_tls_client_ca_pem;
  bool grpc_tls_client_verify = false;
  std::vector<std::pair<std::string, std::string>> grpc_channel_arguments;
  int grpc_max_threads = 0;
  std::string grpc_unix_socket;
};

int run_serve(const ServeOptions& o) {
  if (o.port < 0 || o.port > 65535) fail("--port must be in 0..65535, got {}", o.port);
  if (!o.http && o.grpc_port < 0) fail("neither an HTTP nor a gRPC port to serve on");
  if (o.grpc_port < -1 || o.grpc_port > 65535)
    fail("--grpc-port must be in 0..65535 (or -1 for none), got {}", o.grpc_port);
  if (o.http_threads < 1) fail("--http-threads must be at least 1");
  if (o.prepare_threads < 1 || o.prepare_threads > 256) fail("--prepare-threads must be in 1..256");
  if (o.max_body_bytes < 1024) fail("--max-body-bytes must be at least 1024");
  if (!(o.request_timeout_s > 0)) fail("--request-timeout must be > 0");
  ModelServerOptions so;
  // Checked before anything loads: a bad config file or --model value ends here.
  if (!o.models.empty()) so.entries = model_entries_from_flags(o.models, o.names);
  std::vector<std::string> served;
  for (const auto& e : so.entries) served.push_back(e.config.name());
  for (size_t i = 0; i < o.loras.size(); ++i) {
    const int m = i < o.lora_models.size() ? o.lora_models[i] : -1;
    const std::string base = m >= 0 && static_cast<size_t>(m) < served.size() ? served[m]
                             : served.size() == 1                             ? served[0]
                                                                              : "";
    so.loras.push_back(parse_lora_flag(o.loras[i], base, served));
  }
  if (o.max_loras < 0) fail("--max-loras must be >= 0 (0: no limit)");
  so.max_loras = static_cast<size_t>(o.max_loras);
  so.model_config_file = o.model_config_file;
  so.model_config_file_poll_s = o.model_config_file_poll_s;
  so.file_system_poll_s = o.file_system_poll_s;
  so.tokenizer = o.tokenizer;
  so.dtype = kernels::parse_weight_type(o.dtype);
  so.engine = o.engine.config(so.dtype);
  so.engine.max_queued_requests = o.max_waiting_requests;
  if (!o.memory_budget.empty()) so.memory_budget = parse_memory_budget(o.memory_budget);
  so.limits.max_request_time =
      std::chrono::milliseconds(static_cast<int64_t>(o.request_timeout_s * 1000));
  so.limits.max_prompt_tokens = o.max_prompt_tokens;
  so.limits.max_tokens_cap = o.max_tokens_cap;
  so.limits.max_sequences_per_request = o.max_sequences_per_request;
  so.config_body_reloads = o.allow_config_reload_body;
  so.model_roots = o.model_roots;
  so.api_keys_file = o.api_keys_file;
  so.metrics_require_key = o.metrics_require_key;
  so.playground = !o.no_playground;
  so.access_log = o.access_log;
  so.log_prompts = o.log_prompts;
  so.prepare_threads = o.prepare_threads;
  so.serve_http = o.http;
  so.prometheus_path = o.prometheus_path;
  if (!o.tool_call_parser.empty()) so.tool_format = tool_format_named(o.tool_call_parser);
  so.chat_template = o.chat_template;
  so.chat_template_kwargs = o.chat_template_kwargs;
  so.tasks = o.tasks;
  so.poolings = o.poolings;
  so.http.host = o.host;
  so.http.port = static_cast<uint16_t>(o.port);
  so.http.threads = o.http_threads;
  so.http.max_body_bytes = static_cast<size_t>(o.max_body_bytes);
  so.http.read_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.read_timeout_s * 1000));
  so.http.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.idle_timeout_s * 1000));
  so.http.tls_cert = o.tls_cert;
  so.http.tls_key = o.tls_key;
  so.http.max_connections = o.max_connections;
  so.http.half_close = o.http_half_close;
  if (o.max_unsent_bytes < 0) fail("--max-unsent-bytes must be >= 0 (0: no limit)");
  so.http.max_unsent_bytes = static_cast<size_t>(o.max_unsent_bytes);
  so.limits.max_unsent_bytes = o.max_unsent_bytes;
  if (o.grpc_port >= 0) {
    GrpcServerConfig gc;
    gc.host = o.host;
    gc.port = static_cast<uint16_t>(o.grpc_port);
    gc.max_message_bytes = static_cast<int>(o.max_body_bytes);
    gc.tls_cert = o.tls_cert;
    gc.tls_key = o.tls_key;
    gc.tls_cert_pem = o.grpc_tls_cert_pem;
    gc.tls_key_pem = o.grpc_tls_key_pem;
    gc.tls_client_ca_pem = o.grpc_tls_client_ca_pem;
    gc.tls_client_verify = o.grpc_tls_client_verify;
    gc.channel_arguments = o.grpc_channel_arguments;
    gc.max_threads = o.grpc_max_threads;
    gc.unix_socket = o.grpc_unix_socket;
    so.grpc = gc;
  }
  if (o.check) {
    std::printf("tokenflow serve --check: %s\n", ModelServer::check(so).c_str());
    return 0;
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
  {
    ModelServer server(std::move(so));
    server.start();
    ServingState& state = server.state();
    // One line on stdout, for people and scripts (a test reads the port from it).
    const auto names = state.registry.names();
    const char* scheme = o.tls_cert.empty() ? "http" : "https";
    const std::string served = names.empty() ? "-" : fmt::format("{}", fmt::join(names, ", "));
    if (o.http) {
      std::printf("tokenflow serving %s on %s://%s:%u\n", served.c_str(), scheme, o.host.c_str(),
                  server.http_port());
      std::printf(
          "try: curl -s%s %s://%s:%u/v1/completions -H 'Content-Type: application/json' -d "
          "'{\"prompt\": \"Once upon a time\", \"max_tokens\": 64}'\n",
          o.tls_cert.empty() ? "" : "k", scheme, o.host.c_str(), server.http_port());
    } else {
      std::printf("tokenflow serving %s (no HTTP/REST API)\n", served.c_str());
    }
    if (const auto grpc_port = server.grpc_port()) {
      std::printf(
          "tokenflow gRPC on %s:%u (tokenflow.v1.GenerationService, "
          "TF Serving's ModelService and PredictionService, health, reflection)%s\n",
          o.host.c_str(), *grpc_port,
          o.tls_cert.empty() && o.grpc_tls_cert_pem.empty() ? "" : " with TLS");
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
      server.reload_config_file([](const std::string& why) {
        if (why.empty()) {
          log::info("SIGHUP: model config reloaded");
        } else {
          log::error("SIGHUP: model config not reloaded: {}", why);
        }
      });
    }
    log::warn("{}: shutting down (up to {:.0f} s for requests in progress)",
              sig == SIGINT ? "SIGINT" : "SIGTERM", o.shutdown_timeout_s);
    server.shutdown(std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout_s * 1000)));
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
  app.add_option("--lora", o->loras,
                 "NAME=PATH or NAME=MODEL:PATH: a LoRA adapter (a PEFT directory) of the --model "
                 "given before it (or of MODEL), which requests name as their model; repeatable");
  app.add_option("--max-loras", o->max_loras,
                 "LoRA adapters kept loaded per model version; the least recently used idle one "
                 "is evicted past it and reloaded when named again (0: no limit)")
      ->capture_default_str();
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
  app.add_flag("--no-playground", o->no_playground,
               "do not serve the playground page at / (the APIs are unchanged)");
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
  app.add_option(
         "--dtype", o->dtype,
         "weights in memory: f32, bf16, f16, int8 or q4 (a GGUF keeps its own types under f32)")
      ->capture_default_str();
  app.add_flag("--check", o->check,
               "check the flags, the model config and the files they name (API keys, TLS, "
               "--model paths) without loading a model or binding a port; print a summary and "
               "exit 0, or the problem and exit 1");
  app.add_option("--tool-call-parser", o->tool_call_parser,
                 "the format models write tool calls in: hermes (Qwen, Hermes), llama3_json, "
                 "mistral or json (default: told from each model's chat template)")
      ->check(CLI::IsMember({"hermes", "llama3_json", "mistral", "json"}));
  app.add_option("--chat-template", o->chat_template,
                 "every model's chat template over its own: a built-in template's name (chatml, "
                 "llama2, llama3, mistral, zephyr, gemma, gemma3, tinyllama, qwen3, phi4), a "
                 "file, or the template itself (a model config's chat_template wins)");
  app.add_option("--chat-template-kwargs", o->chat_template_kwargs,
                 "template variables every chat request gets unless it sets them, as a JSON "
                 "object (e.g. '{\"enable_thinking\": false}'; a model config's "
                 "chat_template_kwargs wins)");
  app.add_option("--task", o->tasks,
                 "TASK or NAME=TASK: what a model serves (generate, embed, score, classify; "
                 "default: told from its config); score on a generator makes it a yes/no "
                 "reranker (Qwen3-Reranker); repeatable");
  app.add_option("--pooling", o->poolings,
                 "POOLING or NAME=POOLING: how embeddings are pooled (cls, mean, max, last; "
                 "default: the model's files); repeatable");
  app.add_option("--max-sequences-per-request", o->max_sequences_per_request,
                 "sequences one request may ask for: prompts x max(n, best_of, beams) (400 above; "
                 "0: no limit)")
      ->capture_default_str();
  app.add_option("--max-connections", o->max_connections,
                 "HTTP connections open at once; more are answered 503 and closed (0: no cap; "
                 "keep it under the process's file descriptor limit)")
      ->capture_default_str();
  app.add_option("--max-unsent-bytes", o->max_unsent_bytes,
                 "a stream (SSE or gRPC) whose client leaves more than this many bytes unread is "
                 "ended and its request cancelled: memory stays flat under slow readers (0: no "
                 "limit)")
      ->capture_default_str();
  app.add_flag("--http-half-close", o->http_half_close,
               "a client's EOF after its request is a half-close (the answer is still sent) "
               "instead of a disconnect that cancels the request");
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
  return [o, &app] {
    // Each --lora belongs to the --model given before it on the command line.
    int model = -1;
    o->lora_models.clear();
    for (const CLI::Option* opt : app.parse_order()) {
      if (opt->get_name() == "--model") ++model;
      if (opt->get_name() == "--lora") o->lora_models.push_back(model);
    }
    return run_serve(*o);
  };
}

// `tokenflow tensorflow_model_server` (or the binary called through a symlink of that name):
// TF Serving's command line, with its names and defaults, onto `serve`.
struct TfServingFlags {
  int port = 8500;        // gRPC
  int rest_api_port = 0;  // 0: no REST API
  int rest_api_num_threads = 0;
  int64_t rest_api_timeout_in_ms = 30000;
  std::string model_name = "default", model_base_path;
  bool enable_batching = false, version = false;
  std::string batching_parameters_file, monitoring_config_file, ssl_config_file;
  int intra_op_parallelism = 0, inter_op_parallelism = 0, session_parallelism = 0;
  bool enable_model_warmup = true;
  std::string grpc_channel_arguments, grpc_socket_path, saved_model_tags = "serve";
  int grpc_max_threads = 0, num_load_threads = 0, num_unload_threads = 0;
  int max_num_load_retries = 5;
  int64_t load_retry_interval_micros = 60 * 1000 * 1000;
  bool flush_filesystem_caches = true, enable_grpc_healthcheck_service = false;
  bool allow_version_labels_for_unavailable_models = false, rest_api_enable_cors_support = false;
};

// --grpc_channel_arguments: "key=value,key=value" (TF Serving's form).
std::vector<std::pair<std::string, std::string>> channel_arguments(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      fail("--grpc_channel_arguments: '{}' is not key=value", item);
    out.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    start = end + 1;
  }
  return out;
}

Action add_tf_model_server(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto t = std::make_shared<TfServingFlags>();
  app.add_option("--port", t->port,
                 "port for the gRPC API (TF Serving's PredictionService, ...; 0: no gRPC API)")
      ->capture_default_str();
  app.add_option("--rest_api_port", t->rest_api_port,
                 "port for the HTTP/REST API (0: no REST API, as TF Serving)")
      ->capture_default_str();
  app.add_option("--rest_api_num_threads", t->rest_api_num_threads,
                 "HTTP I/O threads (0: tokenflow's default)");
  app.add_option("--rest_api_timeout_in_ms", t->rest_api_timeout_in_ms,
                 "the longest a request may take")
      ->capture_default_str();
  app.add_option("--model_name", t->model_name, "the model's name (without a config file)")
      ->capture_default_str();
  app.add_option("--model_base_path", t->model_base_path,
                 "the model's base path: integer-named version directories (without a config "
                 "file)");
  app.add_option("--model_config_file", o->model_config_file,
                 "a text ModelServerConfig (models, versions, labels; overrides --model_name and "
                 "--model_base_path)");
  app.add_option("--model_config_file_poll_wait_seconds", o->model_config_file_poll_s,
                 "re-read the model config file this often (0: never)")
      ->capture_default_str();
  app.add_option("--file_system_poll_wait_seconds", o->file_system_poll_s,
                 "scan base paths for new versions this often")
      ->capture_default_str();
  app.add_flag("--enable_batching", t->enable_batching,
               "batch requests (tokenflow always batches continuously)");
  app.add_option("--batching_parameters_file", t->batching_parameters_file,
                 "TF Serving's BatchingParameters (with --enable_batching): max_batch_size, "
                 "batch_timeout_micros, max_enqueued_batches, num_batch_threads onto the engine");
  app.add_option("--monitoring_config_file", t->monitoring_config_file,
                 "TF Serving's MonitoringConfig: Prometheus text at its path (on the REST port), "
                 "with TF Serving's metric names beside tokenflow's");
  app.add_option("--ssl_config_file", t->ssl_config_file,
                 "TF Serving's SSLConfig: TLS for the gRPC API (PEM key, certificate and client "
                 "CA inline; client_verify)");
  app.add_option("--grpc_channel_arguments", t->grpc_channel_arguments,
                 "gRPC channel arguments, key=value,... (integers as integers)");
  app.add_option("--grpc_max_threads", t->grpc_max_threads,
                 "the most threads gRPC may use (0: its default)");
  app.add_option("--grpc_socket_path", t->grpc_socket_path, "also serve gRPC on this UNIX socket");
  app.add_option("--saved_model_tags", t->saved_model_tags,
                 "the SavedModel meta graph to read (only 'serve')")
      ->capture_default_str();
  app.add_option("--num_load_threads", t->num_load_threads,
                 "accepted; tokenflow loads one version at a time");
  app.add_option("--num_unload_threads", t->num_unload_threads,
                 "accepted; unloads happen when a version's last request ends");
  app.add_option("--max_num_load_retries", t->max_num_load_retries,
                 "accepted; a failed load is retried when the config is applied again")
      ->capture_default_str();
  app.add_option("--load_retry_interval_micros", t->load_retry_interval_micros,
                 "accepted (see --max_num_load_retries)");
  app.add_option("--flush_filesystem_caches", t->flush_filesystem_caches,
                 "accepted (weights are memory-mapped)");
  app.add_option("--enable_grpc_healthcheck_service", t->enable_grpc_healthcheck_service,
                 "accepted: grpc.health.v1 is always served, per model");
  app.add_option("--allow_version_labels_for_unavailable_models",
                 t->allow_version_labels_for_unavailable_models,
                 "false only: labels move only to available versions");
  app.add_option("--rest_api_enable_cors_support", t->rest_api_enable_cors_support,
                 "false only: tokenflow's REST API sends no CORS headers");
  app.add_option("--tensorflow_intra_op_parallelism", t->intra_op_parallelism,
                 "compute threads (0: one per core)");
  app.add_option("--tensorflow_inter_op_parallelism", t->inter_op_parallelism,
                 "accepted; tokenflow has one compute pool per model");
  app.add_option("--tensorflow_session_parallelism", t->session_parallelism,
                 "accepted; tokenflow has one compute pool per model");
  app.add_option("--enable_model_warmup", t->enable_model_warmup,
                 "accepted (a tokenflow model needs no warmup records)");
  app.add_flag("--version", t->version, "print the version and exit");
  // As TF Serving's flag parser: a flag given twice takes its last value (an image's entrypoint
  // sets --port and the manifest's args may set it again).
  for (CLI::Option* opt : app.get_options())
    if (opt->get_expected_min() > 0) opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_engine_options(app, o->engine);  // tokenflow's own engine flags, beside TF Serving's
  return [o, t] {
    if (t->version) {
      std::printf("TensorFlow ModelServer: tokenflow %s (TF Serving's command line and APIs)\n",
                  TOKENFLOW_VERSION);
      return 0;
    }
    if (!t->ssl_config_file.empty()) {  // TLS for the gRPC API, as TF Serving
      const tfs::SSLConfig ssl = load_ssl_config(t->ssl_config_file);
      o->grpc_tls_key_pem = ssl.server_key();
      o->grpc_tls_cert_pem = ssl.server_cert();
      o->grpc_tls_client_ca_pem = ssl.custom_ca();
      o->grpc_tls_client_verify = ssl.client_verify();
    }
    if (!t->grpc_channel_arguments.empty()) {
      for (auto& [key, value] : channel_arguments(t->grpc_channel_arguments)) {
        // The message size limits are the server's own (--max-body-bytes), both ways.
        if (key == "grpc.max_receive_message_length" || key == "grpc.max_send_message_length") {
          int64_t bytes = 0;
          const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), bytes);
          if (ec != std::errc() || end != value.data() + value.size() || bytes < 1024)
            fail("--grpc_channel_arguments: {} must be a byte count >= 1024", key);
          o->max_body_bytes = std::max(o->max_body_bytes, bytes);
          continue;
        }
        o->grpc_channel_arguments.emplace_back(std::move(key), std::move(value));
      }
    }
    if (t->grpc_max_threads < 0) fail("--grpc_max_threads must be >= 0");
    o->grpc_max_threads = t->grpc_max_threads;
    o->grpc_unix_socket = t->grpc_socket_path;
    if (t->saved_model_tags != "serve")
      fail("--saved_model_tags={}: tokenflow reads the 'serve' meta graph only",
           t->saved_model_tags);
    if (t->allow_version_labels_for_unavailable_models)
      fail(
          "--allow_version_labels_for_unavailable_models is not supported: tokenflow moves a "
          "label only to an available version");
    if (t->rest_api_enable_cors_support)
      fail(
          "--rest_api_enable_cors_support is not supported: tokenflow's REST API sends no "
          "CORS headers");
    if (!t->batching_parameters_file.empty()) {
      // As TF Serving: the file is read with --enable_batching only. Read either way, so that a
      // broken file is found now rather than when batching is turned on.
      const BatchingSettings b = load_batching_parameters(t->batching_parameters_file);
      if (!t->enable_batching) {
        log::warn("{}: not applied without --enable_batching (as TF Serving)",
                  t->batching_parameters_file);
      } else {
        EngineOptions& e = o->engine;
        if (b.max_num_seqs) e.max_num_seqs = *b.max_num_seqs;
        if (b.batch_timeout_micros) e.batch_timeout_micros = *b.batch_timeout_micros;
        if (b.max_enqueued_batches) {  // saturating: a huge queue is no queue limit
          const int64_t seqs = std::max<int64_t>(e.max_num_seqs, 1);
          o->max_waiting_requests = *b.max_enqueued_batches > INT64_MAX / seqs
                                        ? INT64_MAX
                                        : *b.max_enqueued_batches * seqs;
        }
        // Compute threads, unless the TF or tokenflow thread flag set them.
        if (b.threads && e.threads == 0 && t->intra_op_parallelism == 0)
          e.threads = static_cast<int>(*b.threads);
        for (const auto& note : b.notes) log::warn("{}: {}", t->batching_parameters_file, note);
      }
    }
    if (!t->monitoring_config_file.empty()) {
      o->prometheus_path = load_prometheus_path(t->monitoring_config_file);
      if (!o->prometheus_path.empty() && t->rest_api_port == 0)
        log::warn("{}: the metrics are served on the REST port, and --rest_api_port is 0",
                  t->monitoring_config_file);
    }
    if (t->port < 0 || t->port > 65535) fail("--port must be in 0..65535, got {}", t->port);
    if (t->rest_api_port < 0 || t->rest_api_port > 65535)
      fail("--rest_api_port must be in 0..65535, got {}", t->rest_api_port);
    if (t->rest_api_timeout_in_ms <= 0) fail("--rest_api_timeout_in_ms must be > 0");
    if (o->model_config_file.empty()) {
      // TF Serving's own message for this case.
      if (t->model_base_path.empty())
        fail(
            "Both server_options.model_base_path and server_options.model_config_file are "
            "empty!");
      o->models = {t->model_name + "=" + t->model_base_path};
    } else if (!t->model_base_path.empty()) {
      log::warn("--model_config_file given: --model_name and --model_base_path are ignored");
    }
    o->host = "0.0.0.0";                         // TF Serving listens on every interface
    o->grpc_port = t->port == 0 ? -1 : t->port;  // TF Serving: 0 serves no gRPC API
    o->http = t->rest_api_port != 0;
    o->port = t->rest_api_port;
    if (t->rest_api_num_threads > 0) o->http_threads = t->rest_api_num_threads;
    o->request_timeout_s = static_cast<double>(t->rest_api_timeout_in_ms) / 1000.0;
    if (t->intra_op_parallelism > 0) o->engine.threads = t->intra_op_parallelism;
    return run_serve(*o);
  };
}

}  // namespace tf::cli
