#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace tf {
namespace {

SamplingParams params(float temperature, int32_t top_k = 0, float top_p = 1.0f,
                      std::optional<uint64_t> seed = 1) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

std::vector<float> random_logits(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> draw(Sampler& s, const std::vector<float>& logits, int count) {
  std::vector<int32_t> out;
  out.reserve(count);
  for (int i = 0; i < count; ++i) out.push_back(s.sample(logits.data(), logits.size()));
  return out;
}

TEST(Argmax, PicksTheLargest) {
  const std::vector<float> a = {0.1f, -3.0f, 7.5f, 2.0f};
  EXPECT_EQ(argmax(a.data(), 4), 2);
  const std::vector<float> b = {9.0f, 1.0f};
  EXPECT_EQ(argmax(b.data(), 2), 0);
  const std::vector<float> c = {-5.0f, -4.0f};
  EXPECT_EQ(argmax(c.data(), 2), 1);
  const std::vector<float> d = {-std::numeric_limits<float>::infinity(), -1e30f};
  EXPECT_EQ(argmax(d.data(), 2), 1);
  const float one = 3.0f;
  EXPECT_EQ(argmax(&one, 1), 0);
}

TEST(Argmax, LowestIndexWinsTies) {
  const std::vector<float> a = {1.0f, 5.0f, 2.0f, 5.0f, 5.0f};
  EXPECT_EQ(argmax(a.data(), 5), 1);
  const std::vector<float> b(10, 0.25f);
  EXPECT_EQ(argmax(b.data(), 10), 0);
  const std::vector<float> c = {-1.0f, 3.0f, 3.0f};
  EXPECT_EQ(argmax(c.data(), 3), 1);
}

TEST(Sampler, TemperatureZeroIsGreedy) {
  std::mt19937 rng(1);
  Sampler s(params(0.0f, 0, 1.0f, std::nullopt));  // no seed: must not matter
  for (int trial = 0; trial < 50; ++trial) {
    const auto logits = random_logits(100, rng);
    EXPECT_EQ(s.sample(logits.data(), 100), argmax(logits.data(), 100));
  }
  const std::vector<float> tie = {0.0f, 4.0f, 4.0f, 1.0f};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(tie.data(), 4), 1);
  // Greedy ignores truncation settings.
  Sampler t(params(0.0f, 3, 0.5f));
  EXPECT_EQ(t.sample(tie.data(), 4), 1);
}

TEST(Sampler, VerySmallTemperatureIsGreedy) {
  // A positive temperature this small leaves all mass on the argmax; 1/T overflows to infinity
  // for the last two.
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, -1.0f};
  for (float t : {1e-3f, 1e-20f, 1e-38f, 1e-40f, std::numeric_limits<float>::denorm_min()}) {
    Sampler s(params(t));
    for (int i = 0; i < 20; ++i) {
      ASSERT_EQ(s.sample(logits.data(), 4), 1) << "temperature " << t;
    }
  }
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedsDiffer) {
  std::vector<float> flat(50, 0.0f);
  Sampler a(params(1.0f, 0, 1.0f, 123)), b(params(1.0f, 0, 1.0f, 123)),
      c(params(1.0f, 0, 1.0f, 124));
  const auto sa = draw(a, flat, 200);
  const auto sb = draw(b, flat, 200);
  const auto sc = draw(c, flat, 200);
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
  // Not stuck on one token either.
  int distinct = 0;
  std::vector<bool> seen(50, false);
  for (int32_t t : sa) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, 50);
    if (!seen[t]) ++distinct;
    seen[t] = true;
  }
  EXPECT_GT(distinct, 30);

  // With truncation as well.
  std::mt19937 rng(3);
  const auto logits = random_logits(1000, rng);
  Sampler d(params(0.8f, 40, 0.9f, 7)), e(params(0.8f, 40, 0.9f, 7));
  EXPECT_EQ(draw(d, logits, 300), draw(e, logits, 300));
}

TEST(Rng, SameSeedSameStreamAndUniformInRange) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next();
    EXPECT_EQ(x, b.next());
    if (x != c.next()) differs = true;
  }
  EXPECT_TRUE(differs);

  Rng r(7);
  double sum = 0.0;
  float lo = 1.0f, hi = 0.0f;
  const int n = 1000000;
  for (int i = 0; i < n; ++i) {
    const float u = r.uniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_LT(lo, 1e-4f);
  EXPECT_GT(hi, 1.0f - 1e-4f);
}

TEST(Rng, SeedZeroIsUsable) {
  Rng r(0);
  uint64_t acc = 0;
  for (int i = 0; i < 10; ++i) acc |= r.next();
  EXPECT_NE(acc, 0u);
}

TEST(Sampler, TopKOneIsArgmax) {
  std::mt19937 rng(5);
  Sampler s(params(1.5f, 1));
  for (int trial = 0; trial < 200; ++trial) {
    const auto logits = random_logits(64, rng);
    ASSERT_EQ(s.sample(logits.data(), 64), argmax(logits.data(), 64));
  }
  const std::vector<float> tie = {2.0f, 0.0f, 2.0f};
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(tie.data(), 3), 0);
}

TEST(Sampler, TinyTopPIsArgmax) {
  std::mt19937 rng(6);
  Sampler s(params(1.0f, 0, 1e-6f));
  for (int trial = 0; trial < 200; ++trial) {
    const auto logits = random_logits(64, rng);
    ASSERT_EQ(s.sample(logits.data(), 64), argmax(logits.data(), 64));
  }
}

TEST(Sampler, FrequenciesMatchSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f};
  double z = 0.0;
  for (float l : logits) z += std::exp(l);
  Sampler s(params(1.0f, 0, 1.0f, 2024));
  const int n = 20000;
  std::vector<int> counts(4, 0);
  for (int i = 0; i < n; ++i) {
    const int32_t t = s.sample(logits.data(), 4);
    ASSERT_GE(t, 0);
    ASSERT_LT(t, 4);
    ++counts[t];
  }
  for (int t = 0; t < 4; ++t) {
    EXPECT_NEAR(static_cast<double>(counts[t]) / n, std::exp(logits[t]) / z, 0.02) << "token " << t;
  }
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  const std::vector<float> logits = {0.0f, 1.0f};
  auto freq_of_1 = [&](float temperature) {
    Sampler s(params(temperature, 0, 1.0f, 99));
    int c = 0;
    for (int i = 0; i < 20000; ++i) c += s.sample(logits.data(), 2) == 1;
    return c / 20000.0;
  };
  // p(1) = 1 / (1 + exp(-1 / T))
  EXPECT_NEAR(freq_of_1(0.5f), 1.0 / (1.0 + std::exp(-2.0)), 0.02);
  EXPECT_NEAR(freq_of_1(2.0f), 1.0 / (1.0 + std::exp(-0.5)), 0.02);
}

TEST(Sampler, TopKTwoStaysInTheTopTwo) {
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 2.9f, 1.0f, 2.0f};
  Sampler s(params(1.0f, 2, 1.0f, 77));
  int c1 = 0, c3 = 0;
  for (int i = 0; i < 5000; ++i) {
    const int32_t t = s.sample(logits.data(), 6);
    ASSERT_TRUE(t == 1 || t == 3) << "token " << t;
    (t == 1 ? c1 : c3)++;
  }
  // Renormalized over the two: p(1) = 1 / (1 + exp(-0.1)).
  EXPECT_NEAR(c1 / 5000.0, 1.0 / (1.0 + std::exp(-0.1)), 0.03);
  EXPECT_GT(c3, 0);
}

TEST(Sampler, TopKLargerThanVocabIsNoTruncation) {
  const std::vector<float> logits = {0.0f, 0.0f, 0.0f};
  Sampler s(params(1.0f, 10, 1.0f, 5));
  std::vector<int> counts(3, 0);
  for (int i = 0; i < 3000; ++i) ++counts[s.sample(logits.data(), 3)];
  for (int c : counts) EXPECT_GT(c, 800);
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  // Probabilities 0.5, 0.3, 0.2 (in shuffled order): top_p 0.6 keeps 0.5 and 0.3.
  const std::vector<float> logits = {std::log(0.2f), std::log(0.5f), std::log(0.3f)};
  Sampler s(params(1.0f, 0, 0.6f, 11));
  int c1 = 0;
  for (int i = 0; i < 10000; ++i) {
    const int32_t t = s.sample(logits.data(), 3);
    ASSERT_NE(t, 0) << "token outside the nucleus";
    c1 += t == 1;
  }
  EXPECT_NEAR(c1 / 10000.0, 0.5 / 0.8, 0.02);
}

TEST(Sampler, LogitsAreNotModified) {
  std::mt19937 rng(9);
  const auto logits = random_logits(100, rng);
  auto copy = logits;
  Sampler s(params(0.7f, 10, 0.9f));
  for (int i = 0; i < 10; ++i) s.sample(copy.data(), 100);
  EXPECT_EQ(copy, logits);
}

TEST(Sampler, NegativeInfinityLogitsAreNeverSampled) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {ninf, 0.0f, ninf, 0.0f};
  Sampler s(params(1.0f, 0, 1.0f, 3));
  for (int i = 0; i < 2000; ++i) {
    const int32_t t = s.sample(logits.data(), 4);
    ASSERT_TRUE(t == 1 || t == 3) << t;
  }
}

TEST(SamplingParams, ValidateRejectsOutOfRange) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Bad {
    SamplingParams p;
    const char* names;  // the parameter the message must name
  };
  for (const Bad& bad :
       {Bad{params(-1.0f), "temperature"}, Bad{params(nan), "temperature"},
        Bad{params(inf), "temperature"}, Bad{params(1.0f, -1), "top_k"},
        Bad{params(1.0f, 0, 0.0f), "top_p"}, Bad{params(1.0f, 0, 1.5f), "top_p"},
        Bad{params(1.0f, 0, -0.5f), "top_p"}, Bad{params(1.0f, 0, nan), "top_p"}}) {
    SCOPED_TRACE(std::string("t=") + std::to_string(bad.p.temperature) +
                 " k=" + std::to_string(bad.p.top_k) + " p=" + std::to_string(bad.p.top_p));
    try {
      bad.p.validate();
      ADD_FAILURE() << "no exception";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad.names), std::string::npos) << e.what();
    }
    EXPECT_THROW(Sampler{bad.p}, Error);
  }
}

TEST(SamplingParams, ValidateAcceptsInRange) {
  EXPECT_NO_THROW(SamplingParams{}.validate());
  EXPECT_NO_THROW(params(0.0f).validate());
  EXPECT_NO_THROW(params(2.0f, 50, 0.95f).validate());
  EXPECT_NO_THROW(params(1.0f, 0, 1.0f).validate());
  EXPECT_NO_THROW(params(1.0f, 0, 1e-6f).validate());
}

}  // namespace
}  // namespace tf
