#include "serving/core/request_fields.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "serving/core/api_common.h"

namespace tf {
namespace {

using nlohmann::json;

template <typename T>
bool get_number(const json& body, const char* key, T& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return false;
  if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) fail_field(key, "'{}' must be an integer", key);
    if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t{INT64_MAX})
      fail_field(key, "'{}' is out of range", key);
    const int64_t v = it->get<int64_t>();
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
      fail_field(key, "'{}' is out of range", key);
    out = static_cast<T>(v);
  } else {
    if (!it->is_number()) fail_field(key, "'{}' must be a number", key);
    const double d = it->get<double>();
    if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(std::numeric_limits<T>::max()))
      fail_field(key, "'{}' is out of range", key);
    out = static_cast<T>(d);
  }
  return true;
}

bool get_bool(const json& body, const char* key, bool& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return false;
  if (!it->is_boolean()) fail_field(key, "'{}' must be true or false", key);
  out = it->get<bool>();
  return true;
}

}  // namespace

int32_t token_id(const json& x, const char* key) {
  if (!x.is_number_integer()) fail_field(key, "'{}' must be a list of token ids", key);
  const bool in_range = x.is_number_unsigned()
                            ? x.get<uint64_t>() <= INT32_MAX
                            : x.get<int64_t>() >= 0 && x.get<int64_t>() <= INT32_MAX;
  if (!in_range)
    fail_field(key, "'{}' holds {}, which is not a token id (0..2147483647)", key, x.dump());
  return static_cast<int32_t>(x.get<int64_t>());
}

std::vector<int32_t> token_ids(const json& v, const char* key) {
  if (!v.is_array()) fail_field(key, "'{}' must be a list of token ids", key);
  std::vector<int32_t> out;
  for (const auto& x : v) out.push_back(token_id(x, key));
  return out;
}

SamplingParams parse_sampling_params(const json& body, bool chat, int32_t default_max_tokens) {
  if (!body.is_object()) fail("the request body must be a JSON object");
  SamplingParams p;
  p.max_tokens = default_max_tokens;
  if (chat) get_number(body, "max_completion_tokens", p.max_tokens);
  get_number(body, "max_tokens", p.max_tokens);
  get_number(body, "min_tokens", p.min_tokens);
  get_number(body, "temperature", p.temperature);
  get_number(body, "top_p", p.top_p);
  get_number(body, "top_k", p.top_k);
  if (p.top_k == -1) p.top_k = 0;  // vLLM's "off"
  get_number(body, "min_p", p.min_p);
  get_number(body, "typical_p", p.typical_p);
  get_number(body, "repetition_penalty", p.repetition_penalty);
  get_number(body, "presence_penalty", p.presence_penalty);
  get_number(body, "frequency_penalty", p.frequency_penalty);
  get_number(body, "no_repeat_ngram_size", p.no_repeat_ngram_size);
  get_number(body, "n", p.n);
  int32_t best_of = 0;
  if (get_number(body, "best_of", best_of)) p.best_of = best_of;
  uint64_t seed = 0;
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer()) fail_field("seed", "'seed' must be an integer");
    seed = body["seed"].is_number_unsigned() ? body["seed"].get<uint64_t>()
                                             : static_cast<uint64_t>(body["seed"].get<int64_t>());
    p.seed = seed;
  }
  get_bool(body, "ignore_eos", p.ignore_eos);
  get_bool(body, "skip_special_tokens", p.skip_special_tokens);
  get_bool(body, "include_stop_str_in_output", p.include_stop_str_in_output);
  get_bool(body, "early_stopping", p.early_stopping);
  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      p.stop = {it->get<std::string>()};
    } else if (it->is_array()) {
      for (const auto& s : *it) {
        if (!s.is_string()) fail_field("stop", "'stop' must be a string or a list of strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      fail_field("stop", "'stop' must be a string or a list of strings");
    }
  }
  check_stop_limits(p);
  if (auto it = body.find("stop_token_ids"); it != body.end() && !it->is_null()) {
    p.stop_token_ids = token_ids(*it, "stop_token_ids");
  }
  if (auto it = body.find("bad_words_ids"); it != body.end() && !it->is_null()) {
    if (!it->is_array())
      fail_field("bad_words_ids", "'bad_words_ids' must be a list of lists of token ids");
    for (const auto& seq : *it) p.bad_words_ids.push_back(token_ids(seq, "bad_words_ids"));
  }
  if (auto it = body.find("logit_bias"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) fail_field("logit_bias", "'logit_bias' must map token ids to numbers");
    for (const auto& [k, v] : it->items()) {
      size_t used = 0;
      int64_t id = -1;
      try {
        id = std::stoll(k, &used);
      } catch (const std::exception&) {
      }
      if (used != k.size() || id < 0 || id > INT32_MAX)
        fail_field("logit_bias", "'logit_bias' key '{}' is not a token id", k);
      if (!v.is_number() || !std::isfinite(v.get<double>()) || std::fabs(v.get<double>()) > 1e6)
        fail_field("logit_bias", "'logit_bias' values must be finite numbers");
      p.logit_bias.emplace_back(static_cast<int32_t>(id), v.get<float>());
    }
    // By id, whatever the body's key order ("42" sorts before "7" as text): one request, one form.
    std::stable_sort(p.logit_bias.begin(), p.logit_bias.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
  }
  if (chat) {
    bool want = false;
    if (get_bool(body, "logprobs", want) && want) {
      p.logprobs = 0;
      get_number(body, "top_logprobs", *p.logprobs);
    }
  } else if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    int32_t k = 0;
    get_number(body, "logprobs", k);
    p.logprobs = k;
  }
  get_number(body, "length_penalty", p.length_penalty);
  return p;
}

void check_stop_limits(const SamplingParams& p) {
  // Each sequence's stop checker holds the strings: bounded, so that a request cannot turn a
  // body of a few MB into gigabytes (n copies of a 7 MB stop string).
  size_t stop_bytes = 0;
  for (const auto& s : p.stop) stop_bytes += s.size();
  if (p.stop.size() > kMaxStopStrings || stop_bytes > kMaxStopBytes)
    fail_field("stop",
               "'stop' takes at most {} strings of {} bytes in all (got {} strings, {} bytes)",
               kMaxStopStrings, kMaxStopBytes, p.stop.size(), stop_bytes);
}

}  // namespace tf
