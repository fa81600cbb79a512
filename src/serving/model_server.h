#pragma once
// The whole server as one object: the model registry and its version manager, the preparation
// pool, the HTTP front door and (optionally) the gRPC one, with the invariants that hold them
// together: the memory estimate of a version, the order things start in and the order they
// stop in (front doors drain, then jobs, then engines). `tokenflow serve` only turns flags into
// ModelServerOptions, prints the startup lines and waits for signals.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "kernels/weights.h"
#include "serving/core/serving_state.h"
#include "serving/grpc/grpc_server.h"
#include "serving/http/server.h"
#include "serving/models/lora_adapters.h"
#include "serving/models/server_config.h"
#include "serving/models/version_manager.h"

namespace tf {

struct ModelServerOptions {
  // What to serve: entries (--model) or a config file, not both.
  std::vector<ModelEntryConfig> entries;
  std::vector<LoraSpec> loras;  // --lora: adapters requests may name (loaded on first use)
  size_t max_loras = 0;         // --max-loras: resident adapters per version (0: no limit)
  std::string model_config_file;
  double model_config_file_poll_s = 0;
  double file_system_poll_s = 1;
  std::string tokenizer;  // a tokenizer for every model (empty: each model's own)
  kernels::WeightType dtype = kernels::WeightType::kF32;
  EngineConfig engine;        // per version
  int64_t memory_budget = 0;  // bytes for all versions; 0: none
  ServingLimits limits;
  bool config_body_reloads = false;
  std::vector<std::string> model_roots;  // canonical; the config's base paths are added
  std::string api_keys_file;
  bool metrics_require_key = false;
  bool playground = true;        // the chat page at / (web/)
  std::string access_log = "-";  // "off": none
  bool log_prompts = false;
  int prepare_threads = 2;
  HttpServerConfig http;
  bool serve_http = true;       // false: gRPC only (TF Serving's --rest_api_port=0)
  std::string prometheus_path;  // metrics also here (TF Serving's --monitoring_config_file)
  std::optional<ToolFormat> tool_format;  // --tool-call-parser (nullopt: from the template)
  // --chat-template (a built-in name, a file or the template; "": each model's own) and
  // --chat-template-kwargs (a JSON object; ""): a model config's own fields win.
  std::string chat_template, chat_template_kwargs;
  // --task and --pooling: "VALUE" for every model, or "NAME=VALUE" for the model served as NAME
  // (a named one wins). Tasks: generate, embed, score, classify (model_tasks.h); poolings: cls,
  // mean, max, last.
  std::vector<std::string> tasks, poolings;
  std::optional<GrpcServerConfig> grpc;  // nullopt: no gRPC
};

class ModelServer {
 public:
  // Loads the first versions and binds the ports (nothing is served until start()). Throws
  // Error for a bad option or config, a port in use, or (with entries) a model that does not
  // load; with a config file, a model that does not load is reported and the others serve.
  explicit ModelServer(ModelServerOptions options);
  // What --check answers: the options' rules, the model config file, the API keys file, the
  // TLS files and --model paths checked without loading a model or binding a port; a one-line
  // summary, or an Error naming the problem.
  static std::string check(const ModelServerOptions& options);
  ~ModelServer();  // shutdown(0) if it was not shut down
  ModelServer(const ModelServer&) = delete;
  ModelServer& operator=(const ModelServer&) = delete;

  void start();
  uint16_t http_port() const;
  std::optional<uint16_t> grpc_port() const;
  // Re-reads the model config file (SIGHUP); done("") once applied, else with the reason.
  void reload_config_file(std::function<void(const std::string&)> done);
  // Graceful stop: both front doors drain at once for up to grace (new requests get 503), calls
  // still running then are cut, then the jobs, the versions and their engines go. True if
  // nothing was cut off. Idempotent.
  bool shutdown(std::chrono::milliseconds grace);

  ServingState& state() { return *state_; }

 private:
  ModelServerOptions options_;
  std::unique_ptr<ServingState> state_;
  std::unique_ptr<VersionManager> manager_;
  std::unique_ptr<Server> http_;
  std::unique_ptr<GrpcServer> grpc_;
  bool stopped_ = false;
  bool clean_ = true;
};

}  // namespace tf
