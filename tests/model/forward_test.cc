// Properties of the forward pass on the real stories260K weights. Its values themselves are
// checked against numpy in tests/reference; these tests check what numpy cannot see: the KV
// cache, chunking, batching, block tables and validation.

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "model/test_util.h"

namespace tf {
namespace {

using Ids = std::vector<int32_t>;

class ForwardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = load_model(testing::stories_bin()).release(); }
  static void TearDownTestSuite() { delete model_; }

  int64_t vocab() const { return model_->config().vocab_size; }

  // Runs `tokens` through a fresh cache in chunks of the given sizes; returns all logits rows.
  std::vector<float> run_chunked(const Ids& tokens, const std::vector<size_t>& chunks,
                                 ThreadPool& pool, int block_size = 4) {
    KvCache kv(model_->config(), 64, block_size);
    Ids table(64);
    std::iota(table.rbegin(), table.rend(), 0);  // reversed: blocks are not in memory order
    std::vector<float> out;
    size_t pos = 0;
    for (size_t n : chunks) {
      Ids part(tokens.begin() + pos, tokens.begin() + pos + n);
      SequenceChunk c{part, static_cast<int64_t>(pos), table, true};
      std::vector<float> logits(n * vocab());
      model_->forward(std::span<const SequenceChunk>(&c, 1), kv, logits.data(), pool);
      out.insert(out.end(), logits.begin(), logits.end());
      pos += n;
    }
    return out;
  }

  static Model* model_;
};
Model* ForwardTest::model_ = nullptr;

const Ids kTokens = {1, 403, 407, 261, 378, 432, 300, 280, 263, 290, 400, 300, 262};

TEST_F(ForwardTest, ChunkedPrefillAndDecodeEqualOnePass) {
  ThreadPool pool(2);
  const auto whole = run_chunked(kTokens, {kTokens.size()}, pool);
  const auto chunked = run_chunked(kTokens, {3, 1, 5, 4}, pool);
  const auto decode = run_chunked(kTokens, std::vector<size_t>(kTokens.size(), 1), pool);
  ASSERT_EQ(whole.size(), chunked.size());
  float max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    max_diff =
        std::max({max_diff, std::fabs(whole[i] - chunked[i]), std::fabs(whole[i] - decode[i])});
    max_abs = std::max(max_abs, std::fabs(whole[i]));
  }
  EXPECT_LT(max_diff / max_abs, 1e-5f);
}

TEST_F(ForwardTest, BlockSizeDoesNotChangeResults) {
  ThreadPool pool(1);
  const auto a = run_chunked(kTokens, {5, 8}, pool, 1);
  const auto b = run_chunked(kTokens, {5, 8}, pool, 16);
  EXPECT_EQ(a, b);
}

TEST_F(ForwardTest, BatchCompositionAndThreadsDoNotChangeASequence) {
  // A sequence's logits are bit-identical alone or beside others, with any thread count.
  ThreadPool one(1), three(3);
  const Ids a = {1, 403, 407, 261};
  const Ids b = {1, 300, 301, 302, 303, 304, 305};
  const Ids c = {1};
  KvCache kv_alone(model_->config(), 8, 4);
  Ids t0 = {0, 1, 2, 3};
  SequenceChunk alone{a, 0, t0, true};
  std::vector<float> ref(a.size() * vocab());
  model_->forward(std::span<const SequenceChunk>(&alone, 1), kv_alone, ref.data(), one);

  KvCache kv(model_->config(), 12, 4);
  Ids tb = {5, 0, 7, 1}, ta = {2, 9}, tc = {11};
  std::vector<SequenceChunk> batch = {{b, 0, tb, false}, {a, 0, ta, true}, {c, 0, tc, false}};
  std::vector<float> got(Model::logit_rows(batch) * vocab());
  model_->forward(batch, kv, got.data(), three);
  for (size_t i = 0; i < a.size() * vocab(); ++i) {
    ASSERT_EQ(got[vocab() + i], ref[i]) << "row " << i / vocab();
  }
}

TEST_F(ForwardTest, InvalidBatchesThrowAndChangeNothing) {
  ThreadPool pool(2);
  KvCache kv(model_->config(), 4, 4);
  Ids table = {0, 1, 2, 3};
  Ids prompt = {1, 403, 407};
  std::vector<float> logits(vocab());
  SequenceChunk ok{prompt, 0, table, false};
  model_->forward(std::span<const SequenceChunk>(&ok, 1), kv, logits.data(), pool);
  Ids next = {261};
  SequenceChunk step{next, 3, table, false};
  std::vector<float> expected(vocab());
  {
    KvCache kv2(model_->config(), 4, 4);
    model_->forward(std::span<const SequenceChunk>(&ok, 1), kv2, logits.data(), pool);
    model_->forward(std::span<const SequenceChunk>(&step, 1), kv2, expected.data(), pool);
  }

  auto expect_error = [&](SequenceChunk bad, const char* what) {
    try {
      model_->forward(std::span<const SequenceChunk>(&bad, 1), kv, logits.data(), pool);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  Ids bad_token = {1, 512};
  Ids negative = {-1};
  Ids short_table = {0};
  Ids bad_block = {0, 9};
  Ids empty;
  expect_error({bad_token, 3, table, false}, "outside the vocabulary");
  expect_error({negative, 3, table, false}, "outside the vocabulary");
  expect_error({next, 512, table, false}, "context of 512");
  expect_error({next, -1, table, false}, "exceed");
  expect_error({next, 4, short_table, false}, "block table has 1 blocks");
  expect_error({next, 4, bad_block, false}, "block id 9");
  expect_error({empty, 3, table, false}, "no tokens");
  EXPECT_THROW(model_->forward({}, kv, logits.data(), pool), Error);

  std::vector<float> after(vocab());
  model_->forward(std::span<const SequenceChunk>(&step, 1), kv, after.data(), pool);
  EXPECT_EQ(after, expected) << "a rejected batch must leave the cache as it was";
}

TEST(LoadModel, MissingAndUnknownPathsAreClearErrors) {
  try {
    load_model("/nonexistent/model.bin");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.bin"), std::string::npos);
  }
  testing::TempDir dir;
  EXPECT_THROW(load_model(dir.path()), Error);  // a directory without config.json
  testing::write_bytes(dir.file("config.json"), "{oops");
  try {
    load_model(dir.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos);
  }
}

TEST(LoadModel, StoriesLoadsWithItsConfig) {
  auto m = load_model(testing::stories_bin());
  EXPECT_EQ(m->config().format, "llama2c");
  EXPECT_EQ(m->parameter_count(), 260032);
  EXPECT_EQ(m->weights().converted_bytes(), 0u) << "f32 weights are used from the mapping";
}

}  // namespace
}  // namespace tf
