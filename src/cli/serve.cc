// `tokenflow serve`: loads a model, starts its engine and the HTTP server (OpenAI and TF Serving
// REST APIs), and runs until SIGINT or SIGTERM, then shuts down gracefully.

#include <csignal>
#include <cstdio>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "core/log.h"
#include "serving/server.h"

namespace tf::cli {
namespace {

struct ServeOptions {
  std::vector<std::string> models;
  std::vector<std::string> names;
  std::string tokenizer;
  std::string host = "127.0.0.1";
  int port = 8080;
  int http_threads = 1;
  EngineOptions engine;
  std::string dtype = "f32";
  int64_t max_body_bytes = 8 << 20;
  int64_t max_waiting_requests = 1024;
  double read_timeout_s = 30, idle_timeout_s = 60, shutdown_timeout_s = 30;
};

int run_serve(const ServeOptions& o) {
  if (o.port < 0 || o.port > 65535) fail("--port must be in 0..65535, got {}", o.port);
  if (o.http_threads < 1) fail("--http-threads must be at least 1");
  if (o.max_body_bytes < 1024) fail("--max-body-bytes must be at least 1024");
  if (!o.names.empty() && o.names.size() != o.models.size())
    fail("give one --served-model-name per --model");
  // The signals are taken by this thread only (sigwait below): block them before any thread
  // (engine, compute pool, I/O) starts, so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  ServingState state;
  EngineConfig ec = o.engine.config();
  ec.max_queued_requests = o.max_waiting_requests;
  for (size_t i = 0; i < o.models.size(); ++i) {
    const std::string name = o.names.empty() ? default_served_name(o.models[i]) : o.names[i];
    if (state.find(name)) fail("two models are served as '{}': give --served-model-name", name);
    state.models.push_back(
        load_served_model(name, o.models[i], ec, o.tokenizer, kernels::parse_weight_type(o.dtype)));
    const ServedModel& m = *state.models.back();
    log::info("loaded '{}' from {} in {:.2f} s ({}, {} KV blocks)", m.name, m.path, m.load_seconds,
              m.config().architecture, m.engine->kv_blocks());
  }
  {
    HttpServerConfig hc;
    hc.host = o.host;
    hc.port = static_cast<uint16_t>(o.port);
    hc.threads = o.http_threads;
    hc.max_body_bytes = static_cast<size_t>(o.max_body_bytes);
    hc.read_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.read_timeout_s * 1000));
    hc.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.idle_timeout_s * 1000));
    Server server(state, hc);
    server.start();
    // One line on stdout, for people and scripts (a test reads the port from it).
    std::printf("tokenflow serving %s on http://%s:%u\n", state.models.front()->name.c_str(),
                o.host.c_str(), server.port());
    std::printf(
        "try: curl -s http://%s:%u/v1/completions -H 'Content-Type: application/json' -d "
        "'{\"prompt\": \"Once upon a time\", \"max_tokens\": 64}'\n",
        o.host.c_str(), server.port());
    std::fflush(stdout);
    int sig = 0;
    sigwait(&signals, &sig);
    log::warn("{}: shutting down (up to {:.0f} s for requests in progress)",
              sig == SIGINT ? "SIGINT" : "SIGTERM", o.shutdown_timeout_s);
    server.shutdown(std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout_s * 1000)));
    // Jobs and engines go before the server's I/O context (their responders hold connections).
    state.jobs.clear();
    state.models.clear();
  }
  std::printf("tokenflow stopped\n");
  return 0;
}

}  // namespace

Action add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  app.add_option("--model,-m", o->models,
                 "model directory or file to serve (repeatable; the first is the default)")
      ->required();
  app.add_option("--served-model-name", o->names,
                 "the name clients use (default: the directory's name); one per --model");
  app.add_option("--tokenizer", o->tokenizer,
                 "tokenizer file or directory (default: found beside the model)");
  app.add_option("--host", o->host, "address to listen on")->capture_default_str();
  app.add_option("--port,-p", o->port, "port to listen on (0: any free port)")
      ->capture_default_str();
  app.add_option("--http-threads", o->http_threads, "I/O threads for HTTP")->capture_default_str();
  add_engine_options(app, o->engine);
  app.add_option("--dtype", o->dtype, "weights in memory: f32, bf16, f16, int8 or q4")
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
