#include "model/llama2c.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "model/model.h"
#include "model/test_util.h"
#include "model/weight_store.h"

namespace tf {
namespace {

std::string header(int32_t dim, int32_t hidden, int32_t layers, int32_t heads, int32_t kv_heads,
                   int32_t vocab, int32_t seq) {
  int32_t h[7] = {dim, hidden, layers, heads, kv_heads, vocab, seq};
  return std::string(reinterpret_cast<const char*>(h), sizeof(h));
}

std::string error_of(const std::string& bytes) {
  try {
    parse_llama2c(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "m.bin");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Llama2c, StoriesLayoutMatchesTheReadme) {
  const std::string bytes = testing::read_bytes(testing::stories_bin());
  ASSERT_EQ(bytes.size(), 1056540u);
  auto L = parse_llama2c(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "stories");
  EXPECT_EQ(L.config.dim, 64);
  EXPECT_EQ(L.config.ffn_dim, 172);
  EXPECT_EQ(L.config.n_layers, 5);
  EXPECT_EQ(L.config.n_heads, 8);
  EXPECT_EQ(L.config.n_kv_heads, 4);
  EXPECT_EQ(L.config.vocab_size, 512);
  EXPECT_EQ(L.config.max_seq_len, 512);
  EXPECT_TRUE(L.shared_classifier);
  EXPECT_EQ(L.total_floats, 264128u);
  EXPECT_EQ(L.config.rope_style, kernels::RopeStyle::kInterleaved);
}

TEST(Llama2c, UnsharedClassifierNeedsTheExtraArray) {
  // dim 4, hidden 4, 1 layer, 2 heads, 2 kv heads, vocab -3 (unshared), seq 2
  const uint64_t floats = 3 * 4 + 4 + 16 * 4 + 4 + 16 * 3 + 4 + 2 * 2 + 3 * 4;
  std::string bytes = header(4, 4, 1, 2, 2, -3, 2) + std::string(floats * 4, '\0');
  auto L = parse_llama2c(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "m.bin");
  EXPECT_FALSE(L.shared_classifier);
  EXPECT_EQ(L.config.vocab_size, 3);
  EXPECT_EQ(L.wcls, floats - 12);
  bytes.resize(bytes.size() - 48);  // same header, classifier missing
  EXPECT_NE(error_of(bytes).find("implies"), std::string::npos);
}

TEST(Llama2c, RejectsBadHeaders) {
  const std::string pad(1024, '\0');
  EXPECT_NE(error_of("abc").find("too short"), std::string::npos);
  EXPECT_NE(error_of(header(0, 4, 1, 2, 2, 3, 2) + pad).find("hidden size"), std::string::npos);
  EXPECT_NE(error_of(header(4, 4, 1, 3, 3, 3, 2) + pad).find("not divisible"), std::string::npos);
  EXPECT_NE(error_of(header(4, 4, 1, 2, 3, 3, 2) + pad).find("not a multiple"), std::string::npos);
  EXPECT_NE(error_of(header(4, 4, -1, 2, 2, 3, 2) + pad).find("layers"), std::string::npos);
  EXPECT_NE(error_of(header(4, 4, 1, 2, 2, 0, 2) + pad).find("vocab_size"), std::string::npos);
  EXPECT_NE(error_of(header(4, 4, 1, 2, 2, INT32_MIN, 2) + pad).find("vocab_size"),
            std::string::npos);
  EXPECT_NE(error_of(header(1 << 30, 1 << 30, 4000, 2, 2, 3, 2) + pad).find("out of range"),
            std::string::npos);
  // A plausible header whose file is far too short: never read past the end.
  EXPECT_NE(error_of(header(4096, 11008, 32, 32, 32, 32000, 4096) + pad).find("implies"),
            std::string::npos);
  const std::string v1 = std::string("\x32\x34\x6b\x61", 4) + std::string(24, '\x01');
  EXPECT_NE(error_of(v1).find("version"), std::string::npos);
}

TEST(Llama2c, TruncatedStoriesFileFailsToLoad) {
  testing::TempDir dir;
  std::string bytes = testing::read_bytes(testing::stories_bin());
  bytes.resize(bytes.size() - 4);
  testing::write_bytes(dir.file("cut.bin"), bytes);
  try {
    load_model(dir.file("cut.bin"));
    FAIL() << "a truncated checkpoint loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cut.bin"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1056536"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tf
