#include "serving/model_server.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "serving/anthropic/anthropic_routes.h"
#include "serving/grpc/grpc_generation.h"
#include "serving/models/model_tasks.h"
#include "serving/models/served_model.h"
#include "serving/ollama/ollama_routes.h"
#include "serving/openai/openai_routes.h"
#include "serving/tfserving/grpc_model_service.h"
#include "serving/tfserving/grpc_prediction_service.h"
#include "serving/tfserving/tfserving_routes.h"

namespace tf {
namespace {

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
    default:  // a GGUF block format: its bits per weight
      return static_cast<double>(kernels::block_bytes(t)) / kernels::block_size(t) / 4.0;
  }
}

}  // namespace

namespace {

// The options' own rules and the config file, checked before anything loads (both the server
// and --check run them). Returns the directories a reload's config may point into:
// --model-root, and the base paths the server starts with (re-pointing a model at its own
// directory is always allowed). names: the models configured.
std::vector<std::string> checked_roots(const ModelServerOptions& o,
                                       std::vector<std::string>* names = nullptr) {
  if (o.entries.empty() == o.model_config_file.empty())
    fail("give --model (repeatable) or --model_config_file, not both");
  if (!(o.limits.max_request_time.count() > 0)) fail("--request-timeout must be > 0");
  if (o.limits.max_prompt_tokens < 0 || o.limits.max_tokens_cap < 0)
    fail("--max-prompt-tokens and --max-tokens-cap must be >= 0");
  std::vector<std::string> roots = o.model_roots;
  if (!o.model_config_file.empty()) {
    const tfs::ModelServerConfig startup = load_model_server_config(o.model_config_file);
    for (const auto& m : startup.model_config_list().config()) {
      roots.push_back(m.base_path());
      if (names) names->push_back(m.name());
    }
  }
  for (const auto& e : o.entries) {
    roots.push_back(e.config.base_path());
    if (names) names->push_back(e.config.name());
  }
  for (std::string& r : roots) {
    std::error_code ec;
    r = std::filesystem::weakly_canonical(r, ec).string();
  }
  return roots;
}

}  // namespace

namespace {

// The value of a per-model flag (--task, --pooling: "VALUE" or "NAME=VALUE") for the model
// served as name ("": not given).
std::string per_model_value(const std::vector<std::string>& values, const std::string& name) {
  std::string all, named;
  for (const std::string& v : values) {
    const size_t eq = v.find('=');
    if (eq == std::string::npos) {
      all = v;
    } else if (v.substr(0, eq) == name) {
      named = v.substr(eq + 1);
    }
  }
  return named.empty() ? all : named;
}

// --task and --pooling values, each "VALUE" or "NAME=VALUE" with a value they know.
void check_model_flags(const ModelServerOptions& o) {
  for (const auto& [flag, values] : {std::pair{"--task", &o.tasks}, {"--pooling", &o.poolings}}) {
    for (const std::string& v : *values) {
      const size_t eq = v.find('=');
      const std::string value = eq == std::string::npos ? v : v.substr(eq + 1);
      try {
        if (std::string_view(flag) == "--task") {
          (void)parse_task(value);
        } else if (!pooling_named(value)) {
          fail(ErrorKind::kInvalidArgument, "not one of cls, mean, max, last");
        }
      } catch (const Error& e) {
        fail(ErrorKind::kInvalidArgument, "{} '{}': {}", flag, v, e.what());
      }
    }
  }
}

// --chat-template and --chat-template-kwargs, checked before anything loads.
void check_chat_flags(const ModelServerOptions& o) {
  check_model_flags(o);
  try {
    if (!o.chat_template.empty()) (void)chat_template_from_spec(o.chat_template);
  } catch (const Error& e) {
    fail(ErrorKind::kInvalidArgument, "--chat-template: {}", e.what());
  }
  if (!o.chat_template_kwargs.empty())
    (void)chat_template_kwargs_from_text(o.chat_template_kwargs, "--chat-template-kwargs");
}

}  // namespace

std::string ModelServer::check(const ModelServerOptions& o) {
  check_chat_flags(o);
  std::vector<std::string> names;
  (void)checked_roots(o, &names);
  if (!o.api_keys_file.empty()) (void)ApiKeys::load(o.api_keys_file);
  for (const std::string& f : {o.http.tls_cert, o.http.tls_key}) {
    if (f.empty()) continue;
    std::ifstream in(f);
    if (!in) fail("cannot read '{}' (--tls-cert / --tls-key)", f);
  }
  for (const auto& e : o.entries) {
    std::error_code ec;
    if (!std::filesystem::exists(e.config.base_path(), ec))
      fail("model '{}': '{}' does not exist", e.config.name(), e.config.base_path());
  }
  std::string ports = o.serve_http ? fmt::format("HTTP {}:{}", o.http.host, o.http.port) : "";
  if (o.grpc)
    ports += fmt::format("{}gRPC {}:{}", ports.empty() ? "" : ", ", o.grpc->host, o.grpc->port);
  return fmt::format("ok: {} model{} ({}); {}", names.size(), names.size() == 1 ? "" : "s",
                     fmt::join(names, ", "), ports);
}

ModelServer::ModelServer(ModelServerOptions options) : options_(std::move(options)) {
  const ModelServerOptions& o = options_;
  check_chat_flags(o);
  const std::vector<std::string> roots = checked_roots(o);

  // A version's memory: its weights as they will be held, and its KV cache.
  const EngineConfig ec = o.engine;
  const kernels::WeightType dtype = o.dtype;
  ModelRegistry::Options ro;
  ro.memory_budget = o.memory_budget;
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
  const std::optional<ToolFormat> tool_format = o.tool_format;
  const std::string chat_template = o.chat_template, chat_kwargs = o.chat_template_kwargs;
  const std::vector<std::string> tasks = o.tasks, poolings = o.poolings;
  const size_t max_loras = o.max_loras;
  state_ = std::make_unique<ServingState>(
      [ec, tokenizer, dtype, tool_format, chat_template, chat_kwargs, tasks, poolings, max_loras](
          const std::string& name, int64_t version, const std::string& path,
          const tfs::ModelConfig& config) {
        // The model config's own batching settings over the server's.
        EngineConfig model_ec = ec;
        if (config.max_batch_size() > 0) model_ec.scheduler.max_num_seqs = config.max_batch_size();
        if (config.batch_timeout_micros() > 0)
          model_ec.batch_timeout_micros = config.batch_timeout_micros();
        if (!config.speculative().empty()) set_speculative(model_ec, config.speculative());
        if (config.num_speculative_tokens() > 0)
          model_ec.ngram.num_tokens = config.num_speculative_tokens();
        // Blocks on disk belong to this version of this model, with these weights.
        model_ec.kv_disk.namespace_id =
            fmt::format("{}\n{}\n{}\n{}", name, version, path, kernels::weight_type_name(dtype));
        std::shared_ptr<ServedModel> m = load_served_model(name, path, model_ec, tokenizer, dtype);
        m->max_loras = max_loras;
        apply_signature_config(m->generate, config.generate_signature());
        // The operator's task and pooling for it (--task, --pooling).
        if (const std::string task = per_model_value(tasks, name); !task.empty())
          apply_task(*m, parse_task(task));
        if (const std::string pooling = per_model_value(poolings, name); !pooling.empty())
          m->pooling = pooling_named(pooling);  // checked at start (check_model_flags)
        // The conversation format, built once: the config's template over the server's over the
        // model's own, the same for the kwargs.
        const std::string& spec =
            config.chat_template().empty() ? chat_template : config.chat_template();
        const std::string& kwargs =
            config.chat_template_kwargs().empty() ? chat_kwargs : config.chat_template_kwargs();
        m->chat = ChatFormat::from_source(
            spec.empty() ? chat_template_source(m->tokenizer, m->config())
                         : chat_template_from_spec(spec),
            tool_format,
            kwargs.empty() ? nlohmann::json::object()
                           : chat_template_kwargs_from_text(kwargs, "chat_template_kwargs"));
        if (!m->chat->error().empty() && m->tokenizer.tokenizer)
          log::warn(
              "model '{}' version {}: its chat template does not parse, so chat requests "
              "are refused: {}",
              name, version, m->chat->error());
        m->version = version;
        log::info("loaded '{}' version {} from {} in {:.2f} s ({}, {}; {} KV blocks in {})",
                  m->name, version, m->path, m->load_seconds, m->config().architecture,
                  tasks_text(m->tasks), m->engine->kv_blocks(), m->engine->kv_layout().describe());
        return m;
      },
      std::move(ro));
  ServingState& state = *state_;
  state.limits = o.limits;
  state.config_body_reloads = o.config_body_reloads;
  state.model_roots = roots;
  if (!o.api_keys_file.empty()) {
    state.api_keys = std::make_unique<ApiKeys>(ApiKeys::load(o.api_keys_file));
    state.metrics_need_key = o.metrics_require_key;
    log::info("API keys required ({} keys from {})", state.api_keys->size(), o.api_keys_file);
  }
  state.prometheus_path = o.prometheus_path;
  state.playground = o.playground;
  if (!ec.kv_disk.dir.empty()) state.cache_secret = KvDiskCache::directory_secret(ec.kv_disk.dir);
  for (const LoraSpec& l : o.loras) {
    state.registry.loras().add(l);
    log::info("LoRA adapter '{}' of '{}' from {}", l.name, l.base, l.path);
  }
  if (o.access_log != "off")
    state.access_log = std::make_unique<AccessLog>(o.access_log, o.log_prompts);

  manager_ = std::make_unique<VersionManager>(
      state.registry, VersionManager::Options{o.model_config_file, o.model_config_file_poll_s,
                                              o.file_system_poll_s});
  manager_->start(o.entries);
  state.reload = [m = manager_.get()](std::optional<tfs::ModelServerConfig> config,
                                      std::function<void(const std::string&)> done) {
    m->reload(std::move(config), std::move(done));
  };
  if (o.model_config_file.empty()) {
    // --model names models that exist now: one that does not load ends the command. (With a
    // config file, versions may appear later, and one bad model must not stop the others.)
    for (const std::string& name : state.registry.names()) {
      std::string why = state.registry.model_error(name);
      for (const auto& v : state.registry.status(name).value_or(std::vector<VersionStatus>{}))
        if (!v.error.empty()) why = v.error;
      if (!why.empty()) {
        shutdown(std::chrono::milliseconds(0));
        fail("model '{}': {}", name, why);
      }
    }
  } else if (state.registry.available().empty()) {
    log::warn("no model version is available yet: requests get 404 until one loads");
  }
  state.prepare_pool.start(o.prepare_threads);
  // The protocols: each door's HTTP routes and gRPC services, on the shared state.
  if (o.serve_http) {
    http_ = std::make_unique<Server>(state, o.http);
    add_openai_routes(http_->routes(), state);
    add_tfserving_routes(http_->routes(), state);
    add_anthropic_routes(http_->routes(), state);
    add_ollama_routes(http_->routes(), state);
  }
  if (o.grpc) {
    auto service = [](auto* tag) {
      using S = std::remove_pointer_t<decltype(tag)>;
      return [](GrpcContext& ctx) -> std::unique_ptr<grpc::Service> {
        return std::make_unique<S>(ctx);
      };
    };
    grpc_ = std::make_unique<GrpcServer>(
        state, *o.grpc,
        std::vector<GrpcServiceSpec>{{service(static_cast<GenerationServiceImpl*>(nullptr)),
                                      "tokenflow.v1.GenerationService", true},
                                     {service(static_cast<ModelServiceImpl*>(nullptr)),
                                      "tensorflow.serving.ModelService", false},
                                     {service(static_cast<PredictionServiceImpl*>(nullptr)),
                                      "tensorflow.serving.PredictionService", true}});
  }
}

ModelServer::~ModelServer() {
  shutdown(std::chrono::milliseconds(0));
}

void ModelServer::start() {
  if (http_) http_->start();
}

uint16_t ModelServer::http_port() const {
  return http_ ? http_->port() : 0;
}

std::optional<uint16_t> ModelServer::grpc_port() const {
  if (!grpc_) return std::nullopt;
  return grpc_->port();
}

void ModelServer::reload_config_file(std::function<void(const std::string&)> done) {
  state_->reload(std::nullopt, std::move(done));
}

bool ModelServer::shutdown(std::chrono::milliseconds grace) {
  if (stopped_) return clean_;
  stopped_ = true;
  // Both front doors drain at once; calls still running at the deadline are cancelled while the
  // engines still run, so that they end.
  state_->draining = true;
  std::thread grpc_drain;
  if (grpc_) {
    grpc_drain =
        std::thread([this, grace] { grpc_->shutdown(std::chrono::steady_clock::now() + grace); });
  }
  if (http_) clean_ = http_->shutdown(grace);
  if (grpc_drain.joinable()) grpc_drain.join();
  state_->prepare_pool.stop();  // what was still being prepared starts no job after this
  // Jobs and engines go before the front doors' I/O contexts (their responders hold
  // connections).
  if (manager_) manager_->stop();
  state_->jobs.clear();
  state_->registry.apply({});
  state_->registry.sync();
  grpc_.reset();
  http_.reset();
  return clean_;
}

}  // namespace tf
