#pragma once
// The engine tests' fixture (stories260K in an engine of a given KV budget) and what several of
// the engine test files share: the prompts with a preamble longer than a block, the setups the
// equality tests run under, and the checks that a run gives what another gave.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "model/kv_cache.h"
#include "model/stories_fixture.h"
#include "model/test_util.h"

namespace tf {

using Ids = std::vector<int32_t>;

class EngineTest : public testing::StoriesTest {
 protected:
  static EngineConfig config(int64_t blocks, bool prefix, int64_t max_tokens_per_step = 2048) {
    EngineConfig c;
    c.kv_cache_bytes = blocks * KvCache::bytes_per_block(model_->config(), 16);
    c.prefix_caching = prefix;
    c.scheduler.max_num_batched_tokens = max_tokens_per_step;
    c.threads = 2;
    return c;
  }

 public:  // also for the helpers below the fixture
  static GenerationRequest greedy(const std::string& text, int32_t max_tokens) {
    GenerationRequest r;
    r.prompt = tok_->encode(text, true);
    r.params.temperature = 0.0f;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    return r;
  }
};

// A shared preamble longer than a block, so that the prefix cache has something to share.
#define PREAMBLE \
  "Lily and Ben were friends. They liked to play in the park every day after school. "
// Waits until cond holds (the engine publishes its stats at the end of a step, just after the
// last output), for up to a minute: a condition, not a time, however busy the machine.
template <typename Cond>
inline void wait_until(Cond cond) {
  for (int i = 0; i < 12000 && !cond(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

// An engine setup the equality tests run requests under.
struct EngineSetup {
  const char* name;
  int64_t blocks;
  bool prefix;
  int64_t step_tokens;
};

inline const char* const kPrompts[] = {PREAMBLE "Once upon a time", PREAMBLE "The little dog ran",
                                       PREAMBLE "Lily and Ben went to the park. They saw",
                                       PREAMBLE "Tom had a red ball.", "One day, a bird"};

// Every prompt of kPrompts 8 times at once (40 requests), 48 greedy tokens each: each equals
// the prompt's output alone.
inline void expect_each_as_alone(Engine& e, const std::vector<Ids>& alone, const char* setup) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<size_t> which;
  for (int copy = 0; copy < 8; ++copy) {
    for (size_t i = 0; i < std::size(kPrompts); ++i) {
      streams.push_back(e.submit(EngineTest::greedy(kPrompts[i], 48)));
      which.push_back(i);
    }
  }
  for (size_t k = 0; k < streams.size(); ++k) {
    Ids got;
    RequestOutput o;
    while (streams[k]->next(o)) got.insert(got.end(), o.token_ids.begin(), o.token_ids.end());
    EXPECT_EQ(got, alone[which[k]]) << setup << ", request " << k;
  }
}

// The sequences of a request as another run gave them: tokens, text, finish and logprobs.
inline void expect_same_sequences(const std::vector<CompletedSequence>& got,
                                  const std::vector<CompletedSequence>& want,
                                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t s = 0; s < got.size(); ++s) {
    EXPECT_EQ(got[s].tokens, want[s].tokens) << what;
    EXPECT_EQ(got[s].text, want[s].text) << what;
    EXPECT_EQ(got[s].finish, want[s].finish) << what;
    ASSERT_EQ(got[s].logprobs.size(), want[s].logprobs.size()) << what;
    for (size_t t = 0; t < got[s].logprobs.size(); ++t) {
      EXPECT_EQ(got[s].logprobs[t].token, want[s].logprobs[t].token) << what;
      EXPECT_NEAR(got[s].logprobs[t].logprob, want[s].logprobs[t].logprob, 1e-4) << what;
    }
  }
}

}  // namespace tf
