#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/error.h"
#include "core/hash.h"

namespace tf {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Best first; the lower id first among equal logits, so results never depend on sort stability.
// A function object, so that the sorts inline it (as a function pointer it was ~40 % of a
// 32-sequence top_p step).
constexpr auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
};

}  // namespace

double sample_uniform(uint64_t seed, uint64_t stream, uint64_t step) {
  uint64_t z = mix64(seed + 0x9e3779b97f4a7c15ull);
  z = mix64(z ^ (stream * 0xd1b54a32d192ed03ull + 0x8cb92ba72f3d8dd7ull));
  z = mix64(z ^ (step * 0xa0761d6478bd642full + 0xe7037ed1a0b428dbull));
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

uint64_t random_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

int32_t argmax(std::span<const float> logits) {
  int64_t best = 0;
  for (int64_t i = 1; i < static_cast<int64_t>(logits.size()); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

void Sampler::truncate(const SamplingParams& p, std::span<const float> logits) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  cand_.clear();
  // A NaN (a broken model's logit) is never a candidate: `better` orders the rest strictly.
  for (int64_t i = 0; i < vocab; ++i) {
    if (logits[i] != kNegInf && !std::isnan(logits[i]))
      cand_.emplace_back(logits[i], static_cast<int32_t>(i));
  }
  if (cand_.empty()) return;  // everything masked: the caller's error (Sampler::sample)
  // A tiny temperature can push logits to +inf: those tokens share all the mass.
  if (std::any_of(cand_.begin(), cand_.end(), [](const auto& c) { return std::isinf(c.first); })) {
    cand_.erase(std::remove_if(cand_.begin(), cand_.end(),
                               [](const auto& c) { return !std::isinf(c.first); }),
                cand_.end());
    for (auto& c : cand_) c.first = 0.0f;
  }
  // top_k by partial selection: only the k survivors get sorted.
  int64_t keep = static_cast<int64_t>(cand_.size());
  if (p.top_k > 0 && p.top_k < keep) {
    keep = p.top_k;
    std::nth_element(cand_.begin(), cand_.begin() + keep - 1, cand_.end(), better);
    cand_.resize(keep);
  }
  const bool need_order = p.top_p < 1.0f || p.typical_p < 1.0f;
  if (!need_order) {
    if (p.min_p > 0.0f) {
      const float mx = std::min_element(cand_.begin(), cand_.end(), better)->first;
      // p_i >= min_p * p_max  <=>  l_i - l_max >= log(min_p)
      const float cut = mx + std::log(p.min_p);
      cand_.erase(
          std::remove_if(cand_.begin(), cand_.end(), [&](const auto& c) { return c.first < cut; }),
          cand_.end());
    }
    return;
  }
  // Sorted order is needed for top_p; without top_k, grow a sorted prefix until it holds the
  // nucleus instead of sorting the whole vocabulary.
  const float mx = std::min_element(cand_.begin(), cand_.end(), better)->first;
  double total = 0.0;
  for (const auto& c : cand_) total += std::exp(static_cast<double>(c.first - mx));
  size_t sorted = std::min<size_t>(cand_.size(), p.typical_p < 1.0f ? cand_.size() : 256);
  // The mass of the sorted prefix, summed in order. A larger prefix keeps the smaller one's
  // elements in their places (`better` is a strict total order), so the sum goes on from
  // where it stopped: the same additions as summing the new prefix from its start.
  double mass = 0.0;
  size_t summed = 0;
  for (;;) {
    if (sorted == cand_.size()) {  // the rest in order, by introsort
      std::sort(cand_.begin() + summed, cand_.end(), better);
      break;
    }
    // The best `sorted` first, in order (partial_sort's result, in O(n + k log k) rather than
    // its heap's O(n log k): ~55 % of a 32-sequence top_p step over a flat distribution).
    std::nth_element(cand_.begin() + summed, cand_.begin() + sorted, cand_.end(), better);
    std::sort(cand_.begin() + summed, cand_.begin() + sorted, better);
    for (; summed < sorted; ++summed)
      mass += std::exp(static_cast<double>(cand_[summed].first - mx));
    // Strictly more than top_p inside the prefix: the cut falls inside it (with a margin for
    // rounding); otherwise sort more.
    if (mass / total > static_cast<double>(p.top_p) + 1e-9) break;
    sorted = std::min(cand_.size(), sorted * 4);
  }
  probs_.resize(cand_.size());
  auto renormalize = [&]() {
    double t = 0.0;
    for (size_t i = 0; i < cand_.size(); ++i) {
      probs_[i] = std::exp(static_cast<double>(cand_[i].first - mx));
      t += probs_[i];
    }
    for (size_t i = 0; i < cand_.size(); ++i) probs_[i] /= t;
  };
  if (p.top_p < 1.0f) {
    renormalize();
    // Keep token i while the probability mass from i to the end exceeds 1 - top_p (the
    // reference removes tokens whose ascending cumulative sum is <= 1 - top_p); keep >= 1.
    double tail = 0.0;
    for (size_t i = 0; i < cand_.size(); ++i) tail += probs_[i];
    size_t cut = cand_.size();
    for (size_t i = 0; i < cand_.size(); ++i) {
      if (i > 0 && tail <= 1.0 - static_cast<double>(p.top_p)) {
        cut = i;
        break;
      }
      tail -= probs_[i];
    }
    cand_.resize(cut);
  }
  if (p.min_p > 0.0f) {
    const float cut = cand_.front().first + std::log(p.min_p);
    size_t keep_n = 1;
    while (keep_n < cand_.size() && cand_[keep_n].first >= cut) ++keep_n;
    cand_.resize(keep_n);
  }
  if (p.typical_p < 1.0f && cand_.size() > 1) {
    renormalize();
    double entropy = 0.0;
    for (size_t i = 0; i < cand_.size(); ++i) {
      if (probs_[i] > 0.0) entropy -= probs_[i] * std::log(probs_[i]);
    }
    // Order by |surprisal - entropy|; keep the smallest set whose mass reaches typical_p.
    std::vector<std::pair<double, size_t>> order(cand_.size());
    for (size_t i = 0; i < cand_.size(); ++i)
      order[i] = {std::fabs(-std::log(probs_[i]) - entropy), i};
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    double cum = 0.0;
    size_t last = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      cum += probs_[order[i].second];
      if (cum < static_cast<double>(p.typical_p)) last = i + 1;
    }
    last = std::min(last, order.size() - 1);
    const double threshold = order[last].first;
    std::vector<std::pair<float, int32_t>> kept;
    for (size_t i = 0; i < cand_.size(); ++i) {
      if (std::fabs(-std::log(probs_[i]) - entropy) <= threshold) kept.push_back(cand_[i]);
    }
    cand_ = std::move(kept);
  }
}

std::vector<std::pair<int32_t, double>> Sampler::distribution(const SamplingParams& p,
                                                              std::span<const float> logits) {
  std::vector<std::pair<int32_t, double>> out;
  if (p.greedy()) {
    const int32_t t = argmax(logits);
    if (logits[static_cast<size_t>(t)] > -INFINITY) out.emplace_back(t, 1.0);
    return out;  // empty: no token is left
  }
  truncate(p, logits);
  if (cand_.empty()) return out;
  const float mx = std::min_element(cand_.begin(), cand_.end(), better)->first;
  double total = 0.0;
  for (const auto& c : cand_) total += std::exp(static_cast<double>(c.first - mx));
  for (const auto& c : cand_)
    out.emplace_back(c.second, std::exp(static_cast<double>(c.first - mx)) / total);
  return out;
}

SampleResult Sampler::sample(const SamplingParams& p, std::span<const float> logits,
                             double uniform) {
  SampleResult r;
  // The request's own processors (bad_words_ids, logit_bias, min_tokens, ...) left no token:
  // its error, not token 0 (the engine ends this request alone with it).
  auto none_left = [] {
    fail(ErrorKind::kInvalidArgument,
         "no token is left to generate: the request's bad_words_ids, logit_bias or other "
         "constraints exclude every token");
  };
  if (p.greedy()) {
    r.token = argmax(logits);
    if (!(logits[static_cast<size_t>(r.token)] > -INFINITY)) none_left();
  } else {
    truncate(p, logits);
    if (cand_.empty()) none_left();  // every logit -inf (or NaN): no candidate at all
    const float mx = std::min_element(cand_.begin(), cand_.end(), better)->first;
    double total = 0.0;
    for (const auto& c : cand_) total += std::exp(static_cast<double>(c.first - mx));
    const double target = uniform * total;
    double acc = 0.0;
    r.token = cand_.back().second;
    for (const auto& c : cand_) {
      acc += std::exp(static_cast<double>(c.first - mx));
      if (target < acc) {
        r.token = c.second;
        break;
      }
    }
  }
  if (p.logprobs) {
    // log_softmax over the processed logits (before truncation).
    SampleResult lp = logprobs_of(logits, r.token, *p.logprobs);
    r.logprob = lp.logprob;
    r.top = std::move(lp.top);
  }
  return r;
}

SampleResult logprobs_of(std::span<const float> logits, int32_t token, int32_t top_k,
                         int32_t* rank) {
  SampleResult r;
  r.token = token;
  // One pass for the normalizer.
  float mx = kNegInf;
  for (float l : logits) mx = std::max(mx, l);
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - mx));
  const double lse = static_cast<double>(mx) + std::log(sum);
  r.logprob = static_cast<float>(static_cast<double>(logits[token]) - lse);
  if (rank) {
    // 1 + the tokens `better` puts first (more likely; equally likely with a lower id).
    int32_t ahead = 0;
    const float own = logits[token];
    for (size_t i = 0; i < logits.size(); ++i)
      ahead += logits[i] > own || (logits[i] == own && static_cast<int32_t>(i) < token);
    *rank = ahead + 1;
  }
  const int32_t k = std::min<int32_t>(top_k, static_cast<int32_t>(logits.size()));
  if (k > 0) {
    thread_local std::vector<std::pair<float, int32_t>> cand;
    cand.clear();
    for (size_t i = 0; i < logits.size(); ++i)
      cand.emplace_back(logits[i], static_cast<int32_t>(i));
    std::partial_sort(cand.begin(), cand.begin() + k, cand.end(), better);
    for (int32_t i = 0; i < k; ++i)
      r.top.push_back(
          {cand[i].second, static_cast<float>(static_cast<double>(cand[i].first) - lse)});
  }
  return r;
}

}  // namespace tf
