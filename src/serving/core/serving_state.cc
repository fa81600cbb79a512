#include "serving/core/serving_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>

namespace tf {

namespace {

void check_request_limits(const ServingLimits& limits, const GenerationRequest& r) {
  if (limits.max_prompt_tokens > 0 &&
      static_cast<int64_t>(r.prompt.size()) > limits.max_prompt_tokens) {
    throw HttpError(400,
                    fmt::format("the prompt has {} tokens; this server takes at most {}",
                                r.prompt.size(), limits.max_prompt_tokens),
                    "prompt_too_long", "prompt");
  }
  if (limits.max_tokens_cap > 0 && r.params.max_tokens > limits.max_tokens_cap) {
    throw HttpError(400,
                    fmt::format("'max_tokens' is {}; this server allows at most {}",
                                r.params.max_tokens, limits.max_tokens_cap),
                    "", "max_tokens");
  }
}

}  // namespace

bool path_is_under(const std::string& path, const std::vector<std::string>& roots) {
  if (path.empty()) return false;
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
  if (ec) return false;
  for (const std::string& root : roots) {
    const auto rel = p.lexically_relative(root);
    if (!rel.empty() && *rel.begin() != ".." && !rel.is_absolute()) return true;
  }
  return false;
}

void ServingState::require_admin(const RequestRecord& record) const {
  if (!api_keys) return;
  if (!record.key || !record.key->admin)
    throw HttpError(403, "this API key may not use the admin API (grant it 'admin')",
                    "admin_required");
}

void ServingState::require_model_access(const RequestRecord& record,
                                        const std::string& model) const {
  if (record.key && !record.key->allows(model))
    throw HttpError(403, fmt::format("this API key may not use model '{}'", model),
                    "model_not_allowed");
}

void ServingState::check_reload_config(const tfs::ModelServerConfig& config) const {
  if (!config_body_reloads) {
    throw HttpError(403,
                    "reloading with a config in the request is disabled on this server "
                    "(--allow-config-reload-body); an empty request re-reads the config file",
                    "config_reload_disabled");
  }
  for (const auto& m : config.model_config_list().config()) {
    if (!path_is_under(m.base_path(), model_roots)) {
      throw HttpError(400,
                      fmt::format("model '{}': base_path is not under a directory this server "
                                  "allows (--model-root)",
                                  m.name()),
                      "invalid_config", "base_path");
    }
  }
}

const KeyPolicy* ServingState::authenticate(const std::string* auth) const {
  if (!api_keys) return nullptr;
  std::string_view token;
  if (auth && auth->size() > 7 &&
      (auth->compare(0, 7, "Bearer ") == 0 || auth->compare(0, 7, "bearer ") == 0)) {
    token = std::string_view(*auth).substr(7);
    while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
    while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  }
  const KeyPolicy* key = token.empty() ? nullptr : api_keys->find(token);
  if (!key) {
    throw HttpError(401,
                    auth ? "Incorrect API key provided"
                         : "An API key is required: send 'Authorization: Bearer KEY'",
                    "invalid_api_key");
  }
  return key;
}

std::shared_ptr<Admission> ServingState::prepare(
    const RequestRecord& record, const std::string& model, std::vector<GenerationRequest>& requests,
    bool max_tokens_given, std::chrono::milliseconds time_limit, const std::string& cache_salt) {
  const auto deadline = record.received + std::min(time_limit, limits.max_request_time);
  const std::string tenant = record.key ? record.key->name : "";
  const uint64_t salt = tenant.empty() && cache_salt.empty()
                            ? 0
                            : prefix_cache_salt(cache_secret, tenant, cache_salt);
  // Every prompt of this API request takes its tenant's turns as one group (engine_request.h).
  static std::atomic<uint64_t> next_group{1};
  const uint64_t group = next_group.fetch_add(1, std::memory_order_relaxed);
  // For the key's token rate: prompt tokens plus the most the sequences may generate.
  double tokens = 0;
  int64_t sequences = 0;
  for (auto& r : requests) {
    if (!max_tokens_given && limits.max_tokens_cap > 0)
      r.params.max_tokens =
          static_cast<int32_t>(std::min<int64_t>(r.params.max_tokens, limits.max_tokens_cap));
    check_request_limits(limits, r);
    r.deadline = deadline;
    r.cache_salt = salt;
    r.tenant = tenant.empty() ? 0 : std::hash<std::string>{}(tenant) | 1;  // turns, not security
    r.group = group;
    const int32_t seqs = std::max({r.params.n, r.params.best_of.value_or(1), r.params.num_beams});
    tokens += static_cast<double>(r.prompt.size()) +
              static_cast<double>(r.params.max_tokens) * static_cast<double>(seqs);
    sequences += seqs;
  }
  // One request may not hold the engine with thousands of sequences (64 prompts x n=128).
  if (limits.max_sequences_per_request > 0 && sequences > limits.max_sequences_per_request) {
    throw HttpError(400,
                    fmt::format("the request asks for {} sequences (prompts x n, best_of or "
                                "beams); this server takes at most {} per request",
                                sequences, limits.max_sequences_per_request),
                    "too_many_sequences", "n");
  }
  if (!record.key) return nullptr;
  const KeyPolicy& key = *record.key;
  require_model_access(record, model);
  if (key.max_concurrent > 0 && sequences > key.max_concurrent) {
    throw HttpError(400,
                    fmt::format("the request asks for {} sequences; API key '{}' runs at most {} "
                                "at once",
                                sequences, key.name, key.max_concurrent),
                    "too_many_sequences", "n");
  }
  const double wait = limiter.admit(key, tokens, sequences);
  if (wait > 0) {
    throw HttpError(
        429, fmt::format("rate limit of API key '{}' reached: retry in {:.1f} s", key.name, wait),
        "rate_limit_exceeded")
        .retry_after(static_cast<int>(std::ceil(wait)));
  }
  return std::make_shared<Admission>(limiter, key, tokens, sequences);
}

}  // namespace tf
