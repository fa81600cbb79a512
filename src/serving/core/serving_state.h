#pragma once
// What every route of one server shares: the model registry (models, versions, labels), the
// generation jobs in flight, the server-wide limits, and the way to ask for a config reload.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/tool_calls.h"
#include "serving/core/api_common.h"
#include "serving/core/auth.h"
#include "serving/core/generation_job.h"
#include "serving/core/metrics.h"
#include "serving/core/prepare_pool.h"
#include "serving/models/model_registry.h"

namespace tf {

struct ServingLimits {
  std::chrono::milliseconds max_step_time{30000};  // a step longer than this: not ready
  // Longest a request may take, queue time included (a request's "timeout" may be shorter);
  // past it, it ends with finish_reason "abort" (504 when nothing was sent yet).
  std::chrono::milliseconds max_request_time{600000};
  int64_t max_prompt_tokens = 0;  // 0: the model's context
  int64_t max_tokens_cap = 0;     // largest max_tokens a request may ask for; 0: the context
  // Sequences one request may ask for in all (prompts x max(n, best_of, beams)); 0: no limit.
  int64_t max_sequences_per_request = 256;
  // A stream's output queued and not yet taken by its client (gRPC: messages not yet written to
  // the transport): past it the client reads too slowly and the stream is ended (its request
  // cancelled), so that memory stays flat (--max-unsent-bytes; 0: no limit).
  int64_t max_unsent_bytes = 8 << 20;
};

// Whether path, made canonical (symlinks and '..' resolved as far as it exists), is one of the
// canonical roots or inside one.
bool path_is_under(const std::string& path, const std::vector<std::string>& roots);

struct ServingState {
  explicit ServingState(ModelRegistry::Loader loader, ModelRegistry::Options options = {})
      : registry(std::move(loader), std::move(options)) {}

  JobRegistry jobs;
  // gRPC streams ended for max_unsent_bytes (the HTTP server counts its own).
  std::atomic<int64_t> grpc_slow_reader_streams{0};
  ServerMetrics metrics;
  std::unique_ptr<AccessLog> access_log;  // nullptr: requests go to the debug log only
  std::unique_ptr<ApiKeys> api_keys;      // nullptr: no authentication
  bool metrics_need_key = false;          // GET /metrics behind the keys too
  bool playground = true;                 // GET / serves the playground (web/)
  std::string prometheus_path;            // TF Serving's monitoring path beside /metrics ("": none)
  KeyLimiter limiter;
  // Keys the tenants' prefix-cache salts (prefix_cache_salt): new for every process, or the
  // --kv-cache-dir's own (KvDiskCache::directory_secret), so that a tenant's blocks on disk are
  // its own in every process sharing the directory. Set before any request is served.
  std::array<uint8_t, 32> cache_secret = random_secret();
  // Declared last, so destroyed first: the engines' threads end (and with them every job's last
  // callback) while the jobs, metrics, access log and limits those callbacks use still exist.
  ModelRegistry registry;

  // The API key of a request from its authorization value ("Bearer KEY", an HTTP header or gRPC
  // metadata; nullptr when absent): nullptr when keys are off; throws HttpError 401 when the
  // key is missing or unknown.
  const KeyPolicy* authenticate(const std::string* authorization) const;

  // Admin authority. With keys on, only a key granted `admin` may read server-wide state and
  // reload; without keys the admin routes are as open as the rest (bind to 127.0.0.1, or use
  // keys). A reload that carries a config (a body, or gRPC's config field) can point models at
  // any directory, so it is off unless the operator enables it, and then only for base paths
  // under model_roots (canonical: no '..' or symlink escapes).
  bool config_body_reloads = false;
  std::vector<std::string> model_roots;  // canonical directories
  // Throws HttpError 403 unless the request may use the admin routes.
  void require_admin(const RequestRecord& record) const;
  // Throws HttpError 403 when the request's key may not use the model (listings skip it).
  void require_model_access(const RequestRecord& record, const std::string& model) const;
  // Throws HttpError 403 when config reloads are off, 400 for a base path outside the roots;
  // the message never says whether a path exists.
  void check_reload_config(const tfs::ModelServerConfig& config) const;

  // The server's rules, applied alike by every API to a request's engine requests: the prompt
  // and max_tokens limits (400; a max_tokens the client did not give is lowered to the cap),
  // the deadline (arrival + time_limit, within max_request_time), the prefix-cache salt of the
  // tenant (the API key's name) and cache_salt, and admission under the key's model list and
  // rates (403, 429). The returned handle releases the admission when the last copy goes (keep
  // it in the job's callbacks; set_used records the tokens really used); nullptr without keys.
  // model: the name the key must allow (a LoRA adapter's own, not its base's).
  std::shared_ptr<Admission> prepare(const RequestRecord& record, const std::string& model,
                                     std::vector<GenerationRequest>& requests,
                                     bool max_tokens_given, std::chrono::milliseconds time_limit,
                                     const std::string& cache_salt = "");
  ServingLimits limits;
  std::atomic<bool> draining{false};
  // Reloads the config (nullopt: the config file) and calls done with "" once the new state is
  // loaded, or with the reason it was refused. Unset: the server takes no reloads.
  std::function<void(std::optional<tfs::ModelServerConfig>,
                     std::function<void(const std::string&)>)>
      reload;
  // Parses and tokenizes requests off the I/O threads (started by `serve`; inline until then).
  // Last, so that it stops (waiting for the work in it) before what that work uses goes.
  PreparePool prepare_pool;
};

}  // namespace tf
