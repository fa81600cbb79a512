// Test tool for tests/sampling: for each JSON line on stdin
//   {"params": {...SamplingParams fields...}, "logits": [...], "prompt": [...], "output": [...],
//    "eos": [...], "draws": N, "seed": S}
// prints one JSON line {"processed": [...], "dist": [[token, p], ...], "counts": [[token, c], ...],
// "logprob_top": [[token, lp], ...]}: the logits after steps 1-6, the final distribution after
// truncation, and the counts of N draws with seeds (S, stream 0, steps 0..N-1).

#include <cmath>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "sampling/logits_processor.h"
#include "sampling/sampler.h"

using nlohmann::json;

namespace {

tf::SamplingParams parse_params(const json& j) {
  tf::SamplingParams p;
  p.temperature = j.value("temperature", 1.0f);
  p.top_k = j.value("top_k", 0);
  p.top_p = j.value("top_p", 1.0f);
  p.min_p = j.value("min_p", 0.0f);
  p.typical_p = j.value("typical_p", 1.0f);
  p.repetition_penalty = j.value("repetition_penalty", 1.0f);
  p.presence_penalty = j.value("presence_penalty", 0.0f);
  p.frequency_penalty = j.value("frequency_penalty", 0.0f);
  p.no_repeat_ngram_size = j.value("no_repeat_ngram_size", 0);
  p.min_tokens = j.value("min_tokens", 0);
  p.max_tokens = std::max(p.min_tokens, 16);
  if (j.contains("logit_bias")) {
    for (const auto& [k, v] : j["logit_bias"].items())
      p.logit_bias.emplace_back(std::stoi(k), v.get<float>());
  }
  if (j.contains("bad_words_ids"))
    p.bad_words_ids = j["bad_words_ids"].get<std::vector<std::vector<int32_t>>>();
  if (j.contains("stop_token_ids"))
    p.stop_token_ids = j["stop_token_ids"].get<std::vector<int32_t>>();
  if (j.contains("logprobs")) p.logprobs = j["logprobs"].get<int32_t>();
  return p;
}

float json_float(const json& v) {
  if (v.is_string()) return -std::numeric_limits<float>::infinity();  // "-inf"
  return v.get<float>();
}

}  // namespace

int main() {
  try {
    std::string line;
    tf::Sampler sampler;
    while (std::getline(std::cin, line)) {
      const json in = json::parse(line);
      const tf::SamplingParams p = parse_params(in.value("params", json::object()));
      std::vector<float> logits;
      for (const auto& v : in["logits"]) logits.push_back(json_float(v));
      p.validate(static_cast<int64_t>(logits.size()));
      tf::TokenHistory h(in.value("prompt", std::vector<int32_t>{}));
      for (int32_t t : in.value("output", std::vector<int32_t>{})) h.append(t);
      const auto eos = in.value("eos", std::vector<int32_t>{});
      tf::apply_logits_processors(p, h, eos, logits);
      json out;
      json processed = json::array();
      for (float v : logits) processed.push_back(std::isinf(v) ? json("-inf") : json(v));
      out["processed"] = processed;
      json dist = json::array();
      for (const auto& [t, prob] : sampler.distribution(p, logits)) dist.push_back({t, prob});
      out["dist"] = dist;
      std::map<int32_t, int64_t> counts;
      const int64_t draws = in.value("draws", 0);
      const uint64_t seed = in.value("seed", uint64_t{0});
      for (int64_t d = 0; d < draws; ++d) {
        ++counts[sampler.sample(p, logits, tf::sample_uniform(seed, 0, static_cast<uint64_t>(d)))
                     .token];
      }
      out["counts"] = json(counts);
      if (p.logprobs) {
        const tf::SampleResult r = sampler.sample(p, logits, 0.5);
        json top = json::array();
        for (const auto& a : r.top) top.push_back({a.token, a.logprob});
        out["logprob_top"] = top;
        out["chosen"] = {r.token, r.logprob};
      }
      std::cout << out.dump() << "\n";
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
