// The engine when something fails or stalls: a step that throws, a request whose grammar fails
// or runs past its budget (ending alone), a constraint whose masks are slow (computed off the
// engine's thread), and the liveness a wedged step reports. A model whose forward pass the test
// controls (SlowModel) stands in for a real one.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "sampling/grammar.h"
#include "sampling/regex_grammar.h"

namespace tf {
namespace {

// Waits until cond holds, for up to a minute: a condition, not a time.
template <typename Cond>
void wait_until(Cond cond) {
  for (int i = 0; i < 12000 && !cond(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

}  // namespace
}  // namespace tf

namespace tf {
namespace {

// A model whose forward pass takes as long as the test says (to see a wedged engine), or fails
// when told to (to see what a failing step does).
class SlowModel final : public Model {
 public:
  explicit SlowModel(ModelConfig c) : Model(std::move(c), WeightStore()) {}
  std::atomic<int> delay_ms{0};
  std::atomic<bool> fail{false};

 protected:
  void run(std::span<const SequenceChunk> batch, std::span<const TokenPosition>, KvCache&,
           float* logits, ThreadPool&) override {
    if (fail) throw std::runtime_error("injected model failure");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
    const int64_t rows = Model::logit_rows(batch);
    for (int64_t i = 0; i < rows * config_.vocab_size; ++i) logits[i] = 0.0f;
  }
};

ModelConfig tiny_config() {
  ModelConfig c;
  c.architecture = "Slow";
  c.vocab_size = 8;
  c.dim = 8;
  c.n_layers = 1;
  c.n_heads = 1;
  c.n_kv_heads = 1;
  c.head_dim = 8;
  c.ffn_dim = 8;
  c.max_seq_len = 64;
  return c;
}

// One thread, 16 blocks of 16 tokens.
EngineConfig tiny_engine_config(const Model& model) {
  EngineConfig c;
  c.kv_cache_bytes = 16 * KvCache::bytes_per_block(model.config(), 16);
  c.threads = 1;
  return c;
}

// A step that throws ends its requests as failed (an error the APIs turn into 500 / INTERNAL,
// not a plain "abort"), frees what they held, and the engine goes on serving.
TEST(EngineFailure, AFailedStepEndsItsRequestsWithAnErrorAndTheEngineGoesOn) {
  SlowModel model(tiny_config());
  Engine e(model, nullptr, {}, tiny_engine_config(model));
  GenerationRequest r;
  r.prompt = {1, 2, 3};
  r.params.max_tokens = 4;
  r.params.temperature = 0.0f;
  r.params.n = 2;
  model.fail = true;
  const auto failed = run_to_completion(e, r);
  ASSERT_EQ(failed.size(), 2u);
  for (const auto& s : failed) {
    EXPECT_EQ(s.finish, FinishReason::kAbort);
    EXPECT_NE(s.error.find("internal error"), std::string::npos) << s.error;
    EXPECT_EQ(s.error.find("injected"), std::string::npos) << "the cause stays in the log";
  }
  model.fail = false;
  const auto ok = run_to_completion(e, r);
  ASSERT_EQ(ok.size(), 2u);
  for (const auto& s : ok) {
    EXPECT_EQ(s.finish, FinishReason::kLength);
    EXPECT_EQ(s.tokens.size(), 4u);
    EXPECT_TRUE(s.error.empty());
  }
}

// A request whose grammar fails (its states explode, or it runs past its budget) ends alone,
// with an error that says why and is the client's (not kInternal); the requests beside it in
// the same steps finish as if it had never been there, and the engine goes on.
TEST(EngineFailure, AFailingGrammarEndsOnlyItsOwnRequest) {
  SlowModel model(tiny_config());
  EngineConfig config = tiny_engine_config(model);
  const auto vocab = std::make_shared<const GrammarVocab>(
      std::vector<std::string>{"", "x", "y", "z", "w", "v", "u", "t"});
  // After 18 fixed x's (past what check_ambiguity follows when compiling), 3 * 2^k ways to
  // continue after k more x's (each leaves a "y" to come by one of two rules): greedy over
  // equal logits takes "x" (the lowest id) until the matcher refuses to go on.
  const auto exploding = vocab->compile(
      "root ::= \"xxxxxxxxxxxxxxxxxx\" a\na ::= \"x\" a p | \"x\" a q | \"x\"\n"
      "p ::= \"y\"\nq ::= \"y\"\n");
  const auto benign = vocab->compile("root ::= [xy]+\n");
  auto request = [&](std::shared_ptr<const CompiledGrammar> g, int32_t n) {
    GenerationRequest r;
    r.prompt = {1, 2, 3};
    r.params.max_tokens = 40;
    r.params.temperature = 0.0f;
    r.params.ignore_eos = true;
    r.params.n = n;
    if (g) {
      r.params.grammar = std::move(g);
      r.params.grammar_vocab = vocab;
    }
    return r;
  };
  for (const bool budget : {false, true}) {
    // With a budget of a millisecond a token the time runs out first; without one, the matcher's
    // own limit on ways to continue.
    config.grammar_budget =
        budget ? GrammarBudget{std::chrono::milliseconds(1), {}} : GrammarBudget{};
    Engine e(model, nullptr, {}, config);
    model.delay_ms = 5;  // the requests share steps
    auto plain = e.submit(request(nullptr, 2));
    auto bad = e.submit(request(exploding, 2));
    // (Under a budget of 1 ms, a benign grammar too could run out on a busy machine.)
    auto good = e.submit(request(budget ? nullptr : benign, 1));
    auto gather = [](RequestStream& s) {
      std::vector<CompletedSequence> out(2);
      RequestOutput o;
      while (s.next(o)) append_output(out.at(o.index), o);
      return out;
    };
    const auto failed = gather(*bad);
    for (const auto& s : failed) {
      EXPECT_EQ(s.finish, FinishReason::kAbort);
      EXPECT_NE(s.error_kind, ErrorKind::kInternal) << s.error;
      EXPECT_NE(s.error.find("grammar"), std::string::npos) << s.error;
      EXPECT_NE(s.error.find(budget ? "too expensive" : "ways to continue"), std::string::npos)
          << s.error;
      EXPECT_LT(s.tokens.size(), 40u);
    }
    for (const auto& s : gather(*plain)) {
      EXPECT_EQ(s.finish, FinishReason::kLength);
      EXPECT_EQ(s.tokens.size(), 40u);
      EXPECT_TRUE(s.error.empty()) << s.error;
    }
    const auto ok = gather(*good);
    EXPECT_EQ(ok[0].finish, FinishReason::kLength);
    EXPECT_EQ(ok[0].tokens, std::vector<int32_t>(40, budget ? 0 : 1));
    EXPECT_TRUE(ok[0].error.empty()) << ok[0].error;
    EXPECT_EQ(e.stats().requests_failed, 1);
    model.delay_ms = 0;
    EXPECT_EQ(run_to_completion(e, request(nullptr, 1))[0].tokens.size(), 40u);
    wait_until([&] { return e.stats().kv_blocks_used == 0; });
    EXPECT_EQ(e.stats().kv_blocks_used, 0) << "the failed request's blocks are freed";
  }
}

// A constraint whose masks are slow is computed off the engine's thread (GrammarWorker): its
// sequence's draws wait for them while the others step on (issue 49: before, every sequence of
// the step waited for the slowest mask), and what it draws is what it would have drawn inline.
TEST(EngineFailure, ASlowConstraintSlowsOnlyItsOwnSequence) {
  ModelConfig c = tiny_config();
  c.vocab_size = 20000;
  c.max_seq_len = 512;
  SlowModel model(c);
  // 20,000 lowercase tokens, every one allowed at every position of "[a-z]{1,1000}", which is a
  // new context there: a walk of the whole vocabulary trie per token, tens of milliseconds,
  // against microseconds for a step of this model.
  std::mt19937_64 rng(3);
  std::vector<std::string> tokens = {""};
  while (tokens.size() < 20000) {
    std::string t;
    const int len = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < len; ++k) t += static_cast<char>('a' + rng() % 26);
    tokens.push_back(t);
  }
  const auto vocab = std::make_shared<const GrammarVocab>(tokens);
  const auto letters = vocab->compile(regex_to_gbnf("[a-z]{1,1000}"));
  GenerationRequest constrained;
  constrained.prompt = {1, 2, 3};
  constrained.params.max_tokens = 4;
  constrained.params.temperature = 0.7f;
  constrained.params.seed = 11;
  constrained.params.ignore_eos = true;
  constrained.params.grammar = letters;
  constrained.params.grammar_vocab = vocab;
  GenerationRequest plain = constrained;
  plain.params.grammar = nullptr;
  plain.params.grammar_vocab = nullptr;
  plain.params.max_tokens = 400;
  plain.params.temperature = 0.0f;  // greedy: an argmax, a step of microseconds
  auto tokens_of = [](RequestStream& s, bool wait) {
    std::vector<int32_t> got;
    RequestOutput o;
    while (wait ? s.next(o) : s.try_next(o))
      got.insert(got.end(), o.token_ids.begin(), o.token_ids.end());
    return got;
  };
  // Drawn inline (an inline time longer than any mask): the reference.
  EngineConfig inline_config = tiny_engine_config(model);
  inline_config.kv_cache_bytes = 64 * KvCache::bytes_per_block(model.config(), 16);
  inline_config.grammar_budget = {{}, {}, std::chrono::hours(1)};
  std::vector<int32_t> reference;
  {
    Engine e(model, nullptr, {}, inline_config);
    auto s = e.submit(constrained);
    reference = tokens_of(*s, true);
  }
  ASSERT_EQ(reference.size(), 4u);
  // Every mask to the worker (an inline time of 0).
  EngineConfig config = inline_config;
  config.grammar_budget = {{}, {}, std::chrono::microseconds(0)};
  Engine e(model, nullptr, {}, config);
  // The same grammar compiled afresh: the reference run's masks are in the first one's cache.
  const auto vocab2 = std::make_shared<const GrammarVocab>(tokens);
  constrained.params.grammar = vocab2->compile(regex_to_gbnf("[a-z]{1,1000}"));
  constrained.params.grammar_vocab = vocab2;
  auto slow = e.submit(constrained);
  auto fast = e.submit(plain);
  EXPECT_EQ(tokens_of(*fast, true).size(), 400u);
  // The plain request's 400 steps are done; the constrained one, waiting for its masks, is not
  // (drawn inline, in lockstep, it would have finished its 4 tokens after 4 steps).
  std::vector<int32_t> got = tokens_of(*slow, false);
  EXPECT_LT(got.size(), 4u) << "the plain request waited for the constraint's masks";
  const std::vector<int32_t> rest = tokens_of(*slow, true);
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_EQ(got, reference) << "a deferred draw must be the draw made inline";
  std::string text;
  for (int32_t t : got) text += tokens[static_cast<size_t>(t)];
  GrammarMatcher m(letters->grammar());
  EXPECT_TRUE(m.accept(text)) << text;
  wait_until([&] { return e.stats().kv_blocks_used == 0; });
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
}

TEST(EngineLiveness, AStepLongerThanTheLimitReadsAsNotResponsive) {
  SlowModel model(tiny_config());
  Engine e(model, nullptr, {}, tiny_engine_config(model));
  EXPECT_TRUE(e.responsive(std::chrono::milliseconds(50))) << "idle is responsive";
  model.delay_ms = 400;
  GenerationRequest r;
  r.prompt = {1, 2, 3};
  r.params.max_tokens = 1;
  r.params.temperature = 0.0f;
  auto stream = e.submit(r);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // inside the 400 ms step
  EXPECT_FALSE(e.responsive(std::chrono::milliseconds(50))) << "a step running past the limit";
  EXPECT_TRUE(e.responsive(std::chrono::milliseconds(5000))) << "but within a generous one";
  RequestOutput o;
  while (stream->next(o)) {
  }
  for (int i = 0; i < 200 && !e.responsive(std::chrono::milliseconds(50)); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(e.responsive(std::chrono::milliseconds(50))) << "idle again";
}

}  // namespace
}  // namespace tf
