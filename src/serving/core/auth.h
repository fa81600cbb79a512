#pragma once
// API keys and per-key limits (--api-keys-file). A request shows its key as
// "Authorization: Bearer KEY"; the server keeps only SHA-256 digests and compares them in
// constant time, and never logs a key (a key's `name` stands for it in logs and metrics).
//
// File format, one key per line ('#' starts a comment):
//   KEY [name=team-a] [models=chat,summarizer] [rpm=600] [tpm=200000] [concurrency=8] [admin]
//   sha256:HEX64 [options...]        (the key's SHA-256, so the file holds no secret)
// admin (or admin=true): the key may use the admin routes (stats, reloads); no key has it
// unless the file grants it.
// models: the models the key may use (default all); rpm / tpm: requests and tokens (prompt +
// max_tokens, corrected to the tokens really generated) per minute, as token buckets; concurrency:
// requests in flight at once. A limit of 0 or absent is no limit.

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/sha256.h"

namespace tf {

struct KeyPolicy {
  std::string name;                  // shown in logs and metrics instead of the key
  std::array<uint8_t, 32> digest{};  // SHA-256 of the key
  std::vector<std::string> models;   // empty: every model
  double requests_per_minute = 0, tokens_per_minute = 0;
  int64_t max_concurrent = 0;
  bool admin = false;  // may read server-wide stats and reload the model config

  bool allows(const std::string& model) const;
};

// The prefix-cache salt of a tenant (an API key's name) and a request's cache_salt: the first 8
// bytes of HMAC-SHA-256 under secret, never 0 (0 is the shared, unsalted namespace). Without
// the secret nobody can pick a cache_salt that lands in another tenant's namespace.
uint64_t prefix_cache_salt(const std::array<uint8_t, 32>& secret, std::string_view tenant,
                           std::string_view cache_salt);

class ApiKeys {
 public:
  // Parses the file; throws Error naming the line on anything malformed (unknown option, bad
  // number, bad digest, duplicate key or name).
  static ApiKeys parse(std::string_view text, const std::string& source);
  static ApiKeys load(const std::string& path);

  // The policy of a presented key, or nullptr. Every digest is compared, in constant time.
  const KeyPolicy* find(std::string_view key) const;
  size_t size() const { return keys_.size(); }

 private:
  std::vector<KeyPolicy> keys_;
};

class KeyLimiter;

// One admitted request: released (with the tokens it really used) when destroyed.
class Admission {
 public:
  Admission(KeyLimiter& limiter, const KeyPolicy& key, double estimate, int64_t sequences = 1)
      : limiter_(limiter), key_(key), estimate_(estimate), used_(estimate), sequences_(sequences) {}
  ~Admission();
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;
  void set_used(double tokens) { used_ = tokens; }

 private:
  KeyLimiter& limiter_;
  const KeyPolicy& key_;
  double estimate_, used_;
  int64_t sequences_;
};

// Token buckets and in-flight counts per key. Thread-safe.
class KeyLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  // Admits a request that may use `tokens` tokens in `sequences` sequences (the key's
  // concurrency counts sequences: one request of n=64 is 64). Returns 0 and counts it (call
  // release() when it ends), or the seconds after which it could be admitted (HTTP 429,
  // Retry-After); a concurrency refusal returns 1.
  double admit(const KeyPolicy& key, double tokens, int64_t sequences = 1);
  // The request ended; used_tokens corrects the tokens estimated at admission.
  void release(const KeyPolicy& key, double estimated_tokens, double used_tokens,
               int64_t sequences = 1);

 private:
  struct State {
    double requests = 0, tokens = 0;  // bucket levels
    Clock::time_point last;
    int64_t in_flight = 0;
    bool init = false;
  };
  void refill(const KeyPolicy& key, State& s, Clock::time_point now);
  std::mutex mu_;
  std::map<std::string, State> states_;  // by key name
};

}  // namespace tf
