// API keys and per-key limits: the file format (plain keys, sha256 digests, options, errors by
// line), lookups, and the token buckets and concurrency limit of KeyLimiter.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "core/error.h"
#include "serving/core/auth.h"
#include "serving/core/serving_state.h"

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

// libstdc++'s std::hash<std::string> on 64-bit targets: MurmurHash2-64A-like block mixing with
// a fixed seed (written from its published description). Every step is invertible, which is
// what makes it unsafe as a cache-isolation salt: the test below forges a collision with it.
constexpr uint64_t kMul = (uint64_t{0xc6a4a793} << 32) + 0x5bd1e995;
constexpr uint64_t kSeed = 0xc70f6907;
uint64_t shift_mix(uint64_t v) {
  return v ^ (v >> 47);
}  // its own inverse: 47 > 32
uint64_t inverse(uint64_t a) {  // of an odd number, modulo 2^64 (Newton's iteration)
  uint64_t x = a;
  for (int i = 0; i < 6; ++i) x *= 2 - a * x;
  return x;
}
uint64_t load8(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
// The state after the first `blocks` 8-byte blocks of s (s.size() fixes the start).
uint64_t murmur_state(const std::string& s, size_t blocks) {
  uint64_t h = kSeed ^ (s.size() * kMul);
  for (size_t b = 0; b < blocks; ++b) h = (h ^ (shift_mix(load8(&s[8 * b]) * kMul) * kMul)) * kMul;
  return h;
}

// What an attacker who knows the victim's key name ("key-1") and cache_salt would send as key
// "key-2": a cache_salt whose second block steers the hash state onto the victim's.
std::string forged_salt(const std::string& victim) {
  std::string attacker = "key-2";
  attacker += '\0';
  attacker += victim.substr(6, 2);  // first block: "key-2\0" + two bytes
  attacker += std::string(8, 'x');  // second block: solved for below
  attacker += victim.substr(16);    // the tail equals the victim's
  const uint64_t want = murmur_state(victim, 2), have = murmur_state(attacker, 1);
  const uint64_t g = have ^ (want * inverse(kMul));  // the block's mixed value that gets there
  const uint64_t k = shift_mix(g * inverse(kMul)) * inverse(kMul);
  std::memcpy(&attacker[8], &k, 8);
  return attacker.substr(6);
}

TEST(PrefixCacheSalt, AForgedStdHashCollisionNoLongerCollides) {
  const std::string victim_salt = "session-1234567";
  std::string victim = "key-1";
  victim += '\0';
  victim += victim_salt;
  const std::string salt = forged_salt(victim);
  // The attack works on the old salt, std::hash(tenant + '\0' + cache_salt)...
  ASSERT_EQ(std::hash<std::string>{}(victim),
            std::hash<std::string>{}("key-2" + std::string(1, '\0') + salt))
      << "the forged collision did not collide: std::hash is not libstdc++'s 64-bit Murmur";
  // ...and not on the keyed one.
  const auto secret = random_secret();
  EXPECT_NE(prefix_cache_salt(secret, "key-1", victim_salt),
            prefix_cache_salt(secret, "key-2", salt));
  // Same inputs, same salt; another tenant, salt or secret, another salt; never 0.
  EXPECT_EQ(prefix_cache_salt(secret, "a", "s"), prefix_cache_salt(secret, "a", "s"));
  EXPECT_NE(prefix_cache_salt(secret, "a", "s"), prefix_cache_salt(secret, "b", "s"));
  EXPECT_NE(prefix_cache_salt(secret, "a", "s"), prefix_cache_salt(secret, "a", "t"));
  EXPECT_NE(prefix_cache_salt(secret, "ab", ""), prefix_cache_salt(secret, "a", "b"));
  EXPECT_NE(prefix_cache_salt(secret, "a", "s"), prefix_cache_salt(random_secret(), "a", "s"));
  EXPECT_NE(prefix_cache_salt(secret, "", "x") & 1, 0u);
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
            "keys:1: unknown option 'colour' (name, models, rpm, tpm, concurrency, admin)");
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

// The engine's turns (scheduler.cc) rest on what prepare() stamps: every prompt of one API
// request shares a group, another request gets another; a key is the tenant.
TEST(ServingState, PrepareGivesEachApiRequestOneGroupAndTheKeyItsTenant) {
  ServingState state([](const std::string&, int64_t, const std::string&,
                        const tfs::ModelConfig&) -> std::shared_ptr<ServedModel> {
    throw Error("no models here");
  });
  auto requests = [] {
    std::vector<GenerationRequest> r(3);
    for (auto& q : r) q.prompt = {1, 2};
    return r;
  };
  RequestRecord record;
  record.received = std::chrono::steady_clock::now();
  auto a = requests(), b = requests();
  state.prepare(record, "m", a, true, std::chrono::seconds(10));
  state.prepare(record, "m", b, true, std::chrono::seconds(10));
  EXPECT_NE(a[0].group, 0u);
  EXPECT_EQ(a[0].group, a[1].group);
  EXPECT_EQ(a[0].group, a[2].group);
  EXPECT_NE(a[0].group, b[0].group);
  EXPECT_EQ(a[0].tenant, 0u);  // no key: the group is the tenant
  KeyPolicy key;
  key.name = "team-a";
  record.key = &key;
  auto c = requests(), d = requests();
  state.prepare(record, "m", c, true, std::chrono::seconds(10));
  state.prepare(record, "m", d, true, std::chrono::seconds(10));
  EXPECT_NE(c[0].tenant, 0u);
  EXPECT_EQ(c[0].tenant, d[0].tenant);
  EXPECT_NE(c[0].group, d[0].group);
}

}  // namespace
}  // namespace tf
