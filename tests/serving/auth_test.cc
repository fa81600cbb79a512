// API keys and per-key limits: the file format (plain keys, sha256 digests, options, errors by
// line), lookups, and the token buckets and concurrency limit of KeyLimiter.
#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"
#include "serving/auth.h"

namespace tf {
namespace {

std::string error_of(const std::string& text) {
  try {
    ApiKeys::parse(text, "keys");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string hex(const std::array<uint8_t, 32>& d) {
  std::string out;
  for (uint8_t b : d) out += fmt::format("{:02x}", b);
  return out;
}

TEST(ApiKeys, PlainAndHashedKeysWithOptions) {
  // The SHA-256 of "abc" is the FIPS 180-2 test vector.
  EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const auto keys = ApiKeys::parse(
      "# team keys\n"
      "sk-alpha name=alpha models=chat,code rpm=60 tpm=1000 concurrency=2\n"
      "\n"
      "sha256:" +
          hex(sha256("sk-beta")) + "   # beta, stored as a digest\n",
      "keys");
  EXPECT_EQ(keys.size(), 2u);
  const KeyPolicy* a = keys.find("sk-alpha");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->name, "alpha");
  EXPECT_TRUE(a->allows("chat"));
  EXPECT_FALSE(a->allows("summarizer"));
  EXPECT_EQ(a->requests_per_minute, 60);
  EXPECT_EQ(a->max_concurrent, 2);
  const KeyPolicy* b = keys.find("sk-beta");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->name, "key-4");
  EXPECT_TRUE(b->allows("anything"));
  EXPECT_EQ(keys.find("sk-gamma"), nullptr);
  EXPECT_EQ(keys.find(""), nullptr);
  EXPECT_EQ(keys.find("sk-alpha "), nullptr);
}

TEST(ApiKeys, MalformedFilesNameTheLine) {
  EXPECT_EQ(error_of("k1\nk2 rpm=fast\n"), "keys:2: 'fast' is not a number >= 0");
  EXPECT_EQ(error_of("k1 colour=red"),
            "keys:1: unknown option 'colour' (name, models, rpm, tpm, concurrency)");
  EXPECT_EQ(error_of("k1 rpm"), "keys:1: expected name=value, got 'rpm'");
  EXPECT_EQ(error_of("sha256:abc"), "keys:1: sha256: needs 64 hex digits");
  EXPECT_EQ(error_of("k1\nk1\n"), "keys:2: the same key is listed twice");
  EXPECT_EQ(error_of("k1 name=x\nk2 name=x\n"), "keys:2: the name 'x' is used twice");
  EXPECT_EQ(error_of("# nothing\n"), "keys: no API key in it");
}

TEST(KeyLimiter, RequestBucketRefusesWithTheWaitThenRefills) {
  KeyPolicy k;
  k.name = "k";
  k.requests_per_minute = 120;  // two a second
  KeyLimiter lim;
  int admitted = 0;
  double wait = 0;
  for (int i = 0; i < 200 && (wait = lim.admit(k, 1)) == 0; ++i) ++admitted;
  EXPECT_EQ(admitted, 120);  // the bucket starts full
  EXPECT_GT(wait, 0.0);
  EXPECT_LE(wait, 0.5 + 1e-6);  // one request's worth of refill
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_EQ(lim.admit(k, 1), 0.0);
}

TEST(KeyLimiter, TokensAreEstimatedThenCorrectedAndConcurrencyIsCapped) {
  KeyPolicy k;
  k.name = "k";
  k.tokens_per_minute = 1000;
  k.max_concurrent = 2;
  KeyLimiter lim;
  EXPECT_EQ(lim.admit(k, 600), 0.0);
  EXPECT_GT(lim.admit(k, 600), 0.0);  // 400 left
  lim.release(k, 600, 100);           // it used only 100: 900 left
  EXPECT_EQ(lim.admit(k, 600), 0.0);
  EXPECT_EQ(lim.admit(k, 100), 0.0);
  EXPECT_EQ(lim.admit(k, 100), 1.0);  // two in flight
  lim.release(k, 100, 100);
  EXPECT_EQ(lim.admit(k, 100), 0.0);
  // Keys are limited apart.
  KeyPolicy other = k;
  other.name = "other";
  EXPECT_EQ(lim.admit(other, 600), 0.0);
}

}  // namespace
}  // namespace tf
