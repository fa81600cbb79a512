#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"

namespace tf {

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    fail("temperature must be a finite number >= 0, got {}", temperature);
  }
  if (top_k < 0) fail("top_k must be >= 0 (0 disables it), got {}", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("top_p must be in (0, 1], got {}", top_p);
}

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}
}  // namespace

Rng::Rng(uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

float Rng::uniform() {
  return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
}

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed ? *params.seed : std::random_device{}()) {
  params_.validate();
}

int32_t Sampler::sample(const float* logits, int64_t n) {
  if (params_.temperature == 0.0f) return argmax(logits, n);
  candidates_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) candidates_[i] = {logits[i], static_cast<int32_t>(i)};
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  int64_t keep = n;
  if (params_.top_k > 0 && params_.top_k < n) {
    keep = params_.top_k;
    std::nth_element(candidates_.begin(), candidates_.begin() + keep - 1, candidates_.end(),
                     by_logit);
  }
  candidates_.resize(static_cast<size_t>(keep));
  std::sort(candidates_.begin(), candidates_.end(), by_logit);
  // In double, and dividing rather than multiplying by 1/T: a tiny temperature must behave like
  // greedy, not overflow 1/T to infinity and turn the best token's weight into 0 * inf = NaN.
  const double t = params_.temperature;
  const float mx = candidates_[0].first;
  double total = 0.0;
  for (auto& c : candidates_) {
    c.first = static_cast<float>(std::exp(static_cast<double>(c.first - mx) / t));
    total += c.first;
  }
  if (params_.top_p < 1.0f) {
    double cum = 0.0;
    size_t cut = candidates_.size();
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cum += candidates_[i].first / total;
      if (cum >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
    candidates_.resize(cut);
    total = 0.0;
    for (const auto& c : candidates_) total += c.first;
  }
  const double r = static_cast<double>(rng_.uniform()) * total;
  double acc = 0.0;
  for (const auto& c : candidates_) {
    acc += c.first;
    if (r < acc) return c.second;
  }
  return candidates_.back().second;
}

}  // namespace tf
