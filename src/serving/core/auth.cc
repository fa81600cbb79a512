#include "serving/core/auth.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"

namespace tf {
namespace {

double limit_number(const std::string& v, const std::string& where) {
  double d = 0;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), d);
  if (r.ec != std::errc() || r.ptr != v.data() + v.size() || d < 0)
    fail(ErrorKind::kInvalidArgument, "{}: '{}' is not a number >= 0", where, v);
  return d;
}

}  // namespace

bool KeyPolicy::allows(const std::string& model) const {
  return models.empty() || std::find(models.begin(), models.end(), model) != models.end();
}

uint64_t prefix_cache_salt(const std::array<uint8_t, 32>& secret, std::string_view tenant,
                           std::string_view cache_salt) {
  // Length-prefixed, so that no (tenant, salt) pair can be re-split into another.
  std::string msg = fmt::format("{}:", tenant.size());
  msg.append(tenant);
  msg.append(cache_salt);
  std::array<uint8_t, 32> mac{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), mac.data(), &len);
  uint64_t v = 0;
  std::memcpy(&v, mac.data(), sizeof v);
  return v | 1;
}

ApiKeys ApiKeys::parse(std::string_view text, const std::string& source) {
  ApiKeys keys;
  std::set<std::array<uint8_t, 32>> digests;
  std::set<std::string> names;
  std::istringstream in{std::string(text)};
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string key;
    if (!(words >> key)) continue;
    const std::string where = fmt::format("{}:{}", source, n);
    KeyPolicy p;
    if (key.rfind("sha256:", 0) == 0) {
      auto d = parse_hex_digest(key.substr(7));
      if (!d) fail(ErrorKind::kInvalidArgument, "{}: sha256: needs 64 hex digits", where);
      p.digest = *d;
    } else {
      p.digest = sha256(key);
    }
    p.name = fmt::format("key-{}", n);
    std::string opt;
    while (words >> opt) {
      if (opt == "admin") opt = "admin=true";
      const size_t eq = opt.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == opt.size())
        fail(ErrorKind::kInvalidArgument, "{}: expected name=value, got '{}'", where, opt);
      const std::string k = opt.substr(0, eq), v = opt.substr(eq + 1);
      if (k == "name") {
        p.name = v;
      } else if (k == "models") {
        std::istringstream list(v);
        for (std::string m; std::getline(list, m, ',');)
          if (!m.empty()) p.models.push_back(m);
      } else if (k == "rpm") {
        p.requests_per_minute = limit_number(v, where);
      } else if (k == "tpm") {
        p.tokens_per_minute = limit_number(v, where);
      } else if (k == "concurrency") {
        p.max_concurrent = static_cast<int64_t>(limit_number(v, where));
      } else if (k == "admin") {
        if (v != "true" && v != "false")
          fail(ErrorKind::kInvalidArgument, "{}: admin is true or false, got '{}'", where, v);
        p.admin = v == "true";
      } else {
        fail(ErrorKind::kInvalidArgument,
             "{}: unknown option '{}' (name, models, rpm, tpm, concurrency, admin)", where, k);
      }
    }
    if (!digests.insert(p.digest).second)
      fail(ErrorKind::kInvalidArgument, "{}: the same key is listed twice", where);
    if (!names.insert(p.name).second)
      fail(ErrorKind::kInvalidArgument, "{}: the name '{}' is used twice", where, p.name);
    keys.keys_.push_back(std::move(p));
  }
  if (keys.keys_.empty()) fail(ErrorKind::kInvalidArgument, "{}: no API key in it", source);
  return keys;
}

ApiKeys ApiKeys::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::kNotFound, "cannot read API keys file {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

const KeyPolicy* ApiKeys::find(std::string_view key) const {
  const auto d = sha256(key);
  const KeyPolicy* found = nullptr;
  for (const auto& p : keys_) {
    // No early exit and a constant-time comparison: the time taken says nothing about the key.
    const bool same = CRYPTO_memcmp(d.data(), p.digest.data(), d.size()) == 0;
    found = same ? &p : found;
  }
  return found;
}

Admission::~Admission() {
  limiter_.release(key_, estimate_, used_, sequences_);
}

void KeyLimiter::refill(const KeyPolicy& key, State& s, Clock::time_point now) {
  if (!s.init) {
    s.requests = key.requests_per_minute;
    s.tokens = key.tokens_per_minute;
    s.last = now;
    s.init = true;
    return;
  }
  const double minutes = std::chrono::duration<double>(now - s.last).count() / 60.0;
  s.last = now;
  s.requests = std::min(key.requests_per_minute, s.requests + minutes * key.requests_per_minute);
  s.tokens = std::min(key.tokens_per_minute, s.tokens + minutes * key.tokens_per_minute);
}

double KeyLimiter::admit(const KeyPolicy& key, double tokens, int64_t sequences) {
  std::lock_guard lock(mu_);
  State& s = states_[key.name];
  refill(key, s, Clock::now());
  if (key.max_concurrent > 0 && s.in_flight > 0 && s.in_flight + sequences > key.max_concurrent)
    return 1.0;
  double wait = 0;
  if (key.requests_per_minute > 0 && s.requests < 1)
    wait = std::max(wait, (1 - s.requests) / key.requests_per_minute * 60);
  if (key.tokens_per_minute > 0 && s.tokens < tokens) {
    // A request larger than the whole bucket could never pass: it waits for a full bucket.
    const double need = std::min(tokens, key.tokens_per_minute) - s.tokens;
    wait = std::max(wait, std::max(need, 0.0) / key.tokens_per_minute * 60);
    if (tokens > key.tokens_per_minute && s.tokens >= key.tokens_per_minute) wait = 0;
  }
  if (wait > 0) return std::max(wait, 0.001);
  if (key.requests_per_minute > 0) s.requests -= 1;
  if (key.tokens_per_minute > 0) s.tokens -= tokens;
  s.in_flight += sequences;
  return 0;
}

void KeyLimiter::release(const KeyPolicy& key, double estimated_tokens, double used_tokens,
                         int64_t sequences) {
  std::lock_guard lock(mu_);
  State& s = states_[key.name];
  s.in_flight = std::max<int64_t>(0, s.in_flight - sequences);
  if (key.tokens_per_minute > 0)
    s.tokens = std::min(key.tokens_per_minute, s.tokens + estimated_tokens - used_tokens);
}

}  // namespace tf
