// The sampling pieces that numpy does not see: determinism of the counter-based randomness,
// greedy equivalences, stop strings held back across tokens, sequence ends, validation, beam
// search against exhaustive search, and seeded output independent of the batch.

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "model/stories_fixture.h"
#include "model/test_util.h"
#include "sampling/beam_search.h"
#include "sampling/logits_processor.h"
#include "sampling/sampler.h"
#include "sampling/sequence_sampler.h"
#include "sampling/stop_checker.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf {
namespace {

using Ids = std::vector<int32_t>;

TEST(SampleUniform, IsACounterNotAStream) {
  EXPECT_EQ(sample_uniform(1, 0, 5), sample_uniform(1, 0, 5));
  EXPECT_NE(sample_uniform(1, 0, 5), sample_uniform(1, 0, 6));
  EXPECT_NE(sample_uniform(1, 0, 5), sample_uniform(1, 1, 5));
  EXPECT_NE(sample_uniform(1, 0, 5), sample_uniform(2, 0, 5));
  double sum = 0;
  for (int i = 0; i < 100000; ++i) {
    const double u = sample_uniform(9, 0, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.01);
  EXPECT_NE(random_seed(), random_seed());
}

TEST(Sampler, GreedyEquivalences) {
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f, 1.5f};
  EXPECT_EQ(argmax(logits), 1) << "lowest index wins ties";
  Sampler s;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SamplingParams top1;
  top1.top_k = 1;
  top1.temperature = 1.5f;
  SamplingParams tiny_t;
  tiny_t.temperature = 1e-30f;
  for (int i = 0; i < 50; ++i) {
    const double u = sample_uniform(3, 0, i);
    EXPECT_EQ(s.sample(greedy, logits, u).token, 1);
    EXPECT_EQ(s.sample(top1, logits, u).token, 1);
  }
  std::vector<float> scaled = logits;
  for (float& v : scaled) v /= tiny_t.temperature;  // what the processors do: +-inf
  for (int i = 0; i < 50; ++i) {
    const int32_t t = s.sample(tiny_t, scaled, sample_uniform(3, 0, i)).token;
    EXPECT_TRUE(t == 1 || t == 3) << t;  // the two maxima share the mass; never a worse token
  }
}

TEST(StopChecker, HoldsBackAStopStringSplitAcrossTokens) {
  const std::vector<std::vector<std::string>> splits = {
      {"Hello wor", "ld! END", "ING more"},       // stop "END" within one piece
      {"Hello world! E", "N", "D"},               // across 3 pieces
      {"Hello world! ", "E", "N", "D", " tail"},  // across 4
      {"Hello world! EN", "Dx"},
  };
  for (const auto& pieces : splits) {
    StopChecker c({"END", "STOP"});
    std::string shown;
    for (const auto& p : pieces) {
      shown += c.push(p);
      EXPECT_EQ(shown.find('E', 12), std::string::npos)
          << "leaked part of the stop string: " << shown;
      if (c.stopped()) break;
    }
    EXPECT_TRUE(c.stopped());
    EXPECT_EQ(shown, "Hello world! ");
    EXPECT_EQ(c.matched(), "END");
  }
  StopChecker partial({"END"});
  EXPECT_EQ(partial.push("an E"), "an ");
  EXPECT_EQ(partial.push("N"), "");
  EXPECT_EQ(partial.push("x"), "ENx") << "a false start is released";
  EXPECT_EQ(partial.push("E"), "");
  EXPECT_EQ(partial.flush(), "E") << "held text comes out at the end";
  StopChecker inc({"\n\n"}, true);
  EXPECT_EQ(inc.push("a\n"), "a");
  EXPECT_EQ(inc.push("\nb"), "\n\n");
  EXPECT_TRUE(inc.stopped());
  EXPECT_EQ(inc.push("more"), "");
}

// Issue 49: processors that leave no token (every one banned) are the request's error, not a
// draw of token 0 repeated; banning the whole vocabulary is refused up front.
TEST(Sampler, NoTokenLeftIsAnErrorNotTokenZero) {
  const std::vector<float> none(8, -INFINITY);
  Sampler s;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  for (const SamplingParams& p : {greedy, sampled}) {
    try {
      s.sample(p, none, 0.5);
      ADD_FAILURE() << "a token was drawn from nothing";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("no token is left"), std::string::npos) << e.what();
    }
  }
  std::vector<float> one = none;
  one[5] = 0.0f;
  EXPECT_EQ(s.sample(greedy, one, 0.5).token, 5);
  EXPECT_EQ(s.sample(sampled, one, 0.5).token, 5);
  SamplingParams all;
  for (int32_t t = 0; t < 100; ++t) all.bad_words_ids.push_back({t});
  try {
    all.validate(100);
    ADD_FAILURE() << "banning every token must be refused";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "bad_words_ids");
  }
  all.bad_words_ids.back() = {98, 99};  // token 99 is still possible (unless after 98)
  EXPECT_NO_THROW(all.validate(100));
}

TEST(SamplingParams, ValidationNamesTheParameter) {
  auto error_of = [](auto mutate) {
    SamplingParams p;
    mutate(p);
    try {
      p.validate(100);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of([](SamplingParams&) {}), "");
  EXPECT_NE(error_of([](SamplingParams& p) { p.temperature = -0.1f; }).find("temperature"),
            std::string::npos);
  EXPECT_NE(error_of([](SamplingParams& p) { p.temperature = NAN; }).find("temperature"),
            std::string::npos);
  EXPECT_NE(error_of([](SamplingParams& p) { p.top_p = 0.0f; }).find("top_p"), std::string::npos);
  EXPECT_NE(error_of([](SamplingParams& p) { p.top_p = 1.5f; }).find("top_p"), std::string::npos);
  EXPECT_NE(error_of([](SamplingParams& p) { p.top_k = -1; }).find("top_k"), std::string::npos);
  EXPECT_NE(error_of([](SamplingParams& p) { p.min_p = 2.0f; }).find("min_p"), std::string::npos);
  EXPECT_NE(error_of([](SamplingParams& p) { p.typical_p = 0.0f; }).find("typical_p"),
            std::string::npos);
  EXPECT_NE(
      error_of([](SamplingParams& p) { p.repetition_penalty = 0.0f; }).find("repetition_penalty"),
      std::string::npos);
  EXPECT_NE(error_of([](SamplingParams& p) { p.presence_penalty = 2.5f; }).find("presence_penalty"),
            std::string::npos);
  EXPECT_NE(error_of([](SamplingParams& p) {
              p.logit_bias = {{100, 1.0f}};
            }).find("logit_bias"),
            std::string::npos);
  EXPECT_NE(error_of([](SamplingParams& p) {
              p.logit_bias = {{1, 101.0f}};
            }).find("[-100, 100]"),
            std::string::npos);
  EXPECT_NE(error_of([](SamplingParams& p) { p.n = 3, p.best_of = 2; }).find("best_of"),
            std::string::npos);
  EXPECT_NE(error_of([](SamplingParams& p) { p.max_tokens = 0; }).find("max_tokens"),
            std::string::npos);
  EXPECT_NE(error_of([](SamplingParams& p) { p.min_tokens = 20; }).find("min_tokens"),
            std::string::npos);
  EXPECT_NE(error_of([](SamplingParams& p) { p.logprobs = 21; }).find("logprobs"),
            std::string::npos);
  EXPECT_NE(error_of([](SamplingParams& p) { p.stop = {""}; }).find("stop"), std::string::npos);
  EXPECT_NE(error_of([](SamplingParams& p) {
              p.num_beams = 2, p.num_return_sequences = 3;
            }).find("num_return_sequences"),
            std::string::npos);
  EXPECT_NE(error_of([](SamplingParams& p) { p.bad_words_ids = {{}}; }).find("bad_words_ids"),
            std::string::npos);
}

// The think block's budget (SamplingParams::ThinkingBudget): the block opens when the output
// writes its start (or at once when there is none), counts the tokens inside, and once the
// budget is spent forces the close token by token; a close the model writes itself ends it;
// nothing is forced outside the block, nor under a grammar.
TEST(ThinkingBudget, ForcesTheCloseOnceTheBudgetIsSpent) {
  // Vocabulary of 10; the model always prefers token 3 (and, when told, another one).
  auto row = [](int32_t favourite) {
    std::vector<float> l(10, 0.0f);
    l[static_cast<size_t>(favourite)] = 5.0f;
    return l;
  };
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 100;
  p.thinking.tokens = 2;
  p.thinking.start = {5};
  p.thinking.close = {6};
  p.thinking.end = {7, 6, 8};
  const Ids prompt = {1};
  auto run = [&](const SamplingParams& params, const std::vector<int32_t>& wants) {
    SequenceSampler seq(params, 1, 0, prompt, nullptr, Ids{});
    for (int32_t w : wants) {
      std::vector<float> l = row(w);
      seq.step(l);
    }
    return seq.output();
  };
  // Before the block nothing is forced; after its start, 2 tokens, then 7 6 8, then free again.
  EXPECT_EQ(run(p, {3, 3, 5, 3, 3, 3, 3, 3, 3, 3}), (Ids{3, 3, 5, 3, 3, 7, 6, 8, 3, 3}));
  // The model closing the block itself within the budget: nothing forced.
  EXPECT_EQ(run(p, {5, 3, 6, 3, 3, 3}), (Ids{5, 3, 6, 3, 3, 3}));
  // No start: the block is open from the first token; a budget of 0 closes it at once.
  SamplingParams open = p;
  open.thinking.start.clear();
  open.thinking.tokens = 0;
  EXPECT_EQ(run(open, {3, 3, 3, 3, 3}), (Ids{7, 6, 8, 3, 3}));
  // The forced tokens win over what the model prefers and over EOS-like favourites alike, and
  // a bad_words ban cannot leave the step with nothing.
  SamplingParams banned = open;
  banned.bad_words_ids = {{7}};
  EXPECT_EQ(run(banned, {3, 3, 3, 3}), (Ids{7, 6, 8, 3}));
  // No budget: nothing is forced.
  SamplingParams none = p;
  none.thinking.tokens = -1;
  EXPECT_EQ(run(none, {5, 3, 3, 3, 3}), (Ids{5, 3, 3, 3, 3}));
  // A budget needs its close.
  SamplingParams bad = p;
  bad.thinking.end.clear();
  EXPECT_THROW(bad.validate(10), Error);
  bad = p;
  bad.thinking.end = {70};
  EXPECT_THROW(bad.validate(10), Error);
}

using testing::StoriesTest;

// Runs several requests together, each its own sequence, decoding them in one batch per step
// (as the engine does); returns each request's tokens.
std::vector<Ids> run_batch(Model& model, const std::vector<std::pair<Ids, SamplingParams>>& reqs,
                           int threads) {
  ThreadPool pool(threads);
  const int bs = 16;
  const int64_t per_seq = 512 / bs;
  KvCache kv(model.config(), per_seq * static_cast<int64_t>(reqs.size()), bs);
  std::vector<Ids> tables(reqs.size(), Ids(per_seq));
  for (size_t s = 0; s < reqs.size(); ++s)
    std::iota(tables[s].begin(), tables[s].end(), static_cast<int32_t>(s * per_seq));
  std::vector<SequenceSampler> seqs;
  for (size_t s = 0; s < reqs.size(); ++s) {
    seqs.emplace_back(reqs[s].second, *reqs[s].second.seed, 0, reqs[s].first, nullptr, Ids{2});
  }
  const int64_t V = model.config().vocab_size;
  std::vector<float> logits(V * reqs.size());
  std::vector<SequenceChunk> batch;
  for (size_t s = 0; s < reqs.size(); ++s) batch.push_back({reqs[s].first, 0, tables[s], false});
  model.forward(batch, kv, logits.data(), pool);
  std::vector<size_t> row(reqs.size());
  std::iota(row.begin(), row.end(), 0);
  for (;;) {
    batch.clear();
    std::vector<size_t> live;
    Ids last(reqs.size());
    for (size_t s = 0; s < reqs.size(); ++s) {
      if (seqs[s].finished()) continue;
      seqs[s].step(std::span<float>(logits.data() + row[s] * V, V));
      if (!seqs[s].finished()) live.push_back(s);
    }
    if (live.empty()) break;
    for (size_t s : live) {
      last[s] = seqs[s].output().back();
      batch.push_back({std::span<const int32_t>(&last[s], 1),
                       static_cast<int64_t>(reqs[s].first.size() + seqs[s].output().size() - 1),
                       tables[s], false});
    }
    model.forward(batch, kv, logits.data(), pool);
    for (size_t i = 0; i < live.size(); ++i) row[live[i]] = i;
  }
  std::vector<Ids> out;
  for (auto& s : seqs) out.push_back(s.output());
  return out;
}

// Speculative decoding's rejection sampling (Leviathan et al. 2023, Theorem 1): a proposal drawn
// from a draft distribution q, accepted with probability min(1, p/q) and otherwise replaced by a
// draw from the normalized residual max(0, p - q), is distributed as p, whatever q is; and it is
// accepted with probability sum_i min(p_i, q_i). Checked by chi-square over 20000 seeds, with
// truncation (top_k) and temperature changing both distributions.
TEST(SpeculativeVerify, EmitsTheTargetDistributionWhateverTheDraft) {
  const std::vector<float> target = {2.0f, 1.6f, 1.3f, 0.9f, 0.9f, 0.7f, 0.2f, -1.0f};
  const std::vector<float> drafted = {-0.5f, 0.1f, 2.2f, -0.5f, 1.2f, -0.3f, 0.4f, -0.5f};
  struct Case {
    float temperature;
    int32_t top_k;
  };
  for (const Case c : {Case{1.0f, 0}, Case{0.7f, 5}}) {
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.max_tokens = 4;
    p.ignore_eos = true;
    const Ids prompt = {1};
    // The exact distributions, as plain sampling draws them (processors, then truncation).
    auto exact = [&](std::vector<float> logits) {
      TokenHistory history(prompt);
      apply_logits_processors(p, history, Ids{}, logits);
      std::vector<double> d(logits.size(), 0.0);
      for (const auto& [t, prob] : Sampler().distribution(p, logits)) d[t] = prob;
      return d;
    };
    const std::vector<double> pd = exact(target), qd = exact(drafted);
    double overlap = 0.0;
    for (size_t i = 0; i < pd.size(); ++i) overlap += std::min(pd[i], qd[i]);
    const int n = 20000;
    std::vector<int> emitted(target.size(), 0), proposed(target.size(), 0);
    int accepted = 0;
    for (int seed = 0; seed < n; ++seed) {
      SequenceSampler seq(p, static_cast<uint64_t>(seed), 0, prompt, nullptr, Ids{});
      std::vector<float> q(target.size()), dl = drafted, tl = target;
      const int32_t d = seq.draft(dl, 0, q);
      for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(q[i], qd[i], 1e-6) << "q at " << i;
      const StepOutput out = seq.verify(tl, d, q);
      ASSERT_EQ(seq.output().size(), 1u);
      ++proposed[d];
      ++emitted[out.sample.token];
      accepted += out.sample.token == d;
    }
    // Chi-square against the exact distributions, over the tokens they keep.
    auto chi2 = [&](const std::vector<int>& counts, const std::vector<double>& dist, int& dof) {
      double x = 0.0;
      dof = -1;
      for (size_t i = 0; i < dist.size(); ++i) {
        if (dist[i] == 0.0) {
          EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the distribution";
          continue;
        }
        const double e = n * dist[i];
        x += (counts[i] - e) * (counts[i] - e) / e;
        ++dof;
      }
      return x;
    };
    // The 99.99 % points of chi-square with 4 and 7 degrees of freedom.
    int dof = 0;
    const double xe = chi2(emitted, pd, dof);
    const double limit = dof == 7 ? 29.88 : 23.51;
    EXPECT_LT(xe, limit) << "emitted tokens, temperature " << c.temperature << ", dof " << dof;
    const double xq = chi2(proposed, qd, dof);
    EXPECT_LT(xq, dof == 7 ? 29.88 : 23.51) << "proposals, dof " << dof;
    // Acceptance: binomial(n, overlap), within 5 standard deviations.
    const double sd = std::sqrt(n * overlap * (1 - overlap));
    EXPECT_NEAR(accepted, n * overlap, 5 * sd) << "acceptance";
    EXPECT_LT(overlap, 0.8) << "the draft must differ from the target for the test to mean much";
  }
}

// A greedy sequence's draft is a point mass at the argmax (q untouched), and drafting changes
// nothing in the sequence.
TEST(SpeculativeVerify, GreedyDraftIsTheArgmax) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = 4;
  SequenceSampler g(greedy, 1, 0, Ids{1}, nullptr, Ids{});
  std::vector<float> logits = {0.1f, 3.0f, 2.9f}, q;
  EXPECT_EQ(g.draft(logits, 0, q), 1);
  EXPECT_TRUE(g.output().empty()) << "drafting does not advance the sequence";
}

TEST_F(StoriesTest, SeededOutputDoesNotDependOnTheBatch) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.95f;
  p.max_tokens = 40;
  p.seed = 1234;
  const Ids prompt = tok_->encode("Once upon a time", true);
  const Ids alone = run_batch(*model_, {{prompt, p}}, 1)[0];
  ASSERT_EQ(alone.size(), 40u);
  SamplingParams other = p;
  other.seed = 99;
  other.temperature = 0.7f;
  const Ids p2 = tok_->encode("The dog", true);
  const Ids p3 = tok_->encode("Lily and Ben went to the park. They", true);
  EXPECT_EQ(run_batch(*model_, {{p2, other}, {prompt, p}}, 2)[1], alone);
  EXPECT_EQ(run_batch(*model_, {{p3, other}, {p2, other}, {prompt, p}, {p3, p}}, 3)[2], alone);
  SamplingParams reseeded = p;
  reseeded.seed = 1235;
  EXPECT_NE(run_batch(*model_, {{prompt, reseeded}}, 1)[0], alone) << "another seed, other text";
}

TEST_F(StoriesTest, SequenceEndsByLengthEosAndMinTokens) {
  ThreadPool pool(1);
  const Ids prompt = tok_->encode("Once upon a time", true);
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 5;
  p.seed = 1;
  auto out = run_batch(*model_, {{prompt, p}}, 1)[0];
  EXPECT_EQ(out.size(), 5u);
  // With a bias that forces EOS (id 2), the sequence stops at once, unless min_tokens holds it.
  p.max_tokens = 10;
  p.logit_bias = {{2, 100.0f}};
  EXPECT_EQ(run_batch(*model_, {{prompt, p}}, 1)[0], (Ids{2}));
  p.min_tokens = 4;
  out = run_batch(*model_, {{prompt, p}}, 1)[0];
  EXPECT_EQ(out.size(), 5u);
  EXPECT_EQ(out.back(), 2);
  p.ignore_eos = true;
  EXPECT_EQ(run_batch(*model_, {{prompt, p}}, 1)[0].size(), 10u);
}

TEST_F(StoriesTest, StopStringEndsWithoutLeaking) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 60;
  p.stop = {"girl named"};
  const Ids prompt = tok_->encode("Once upon a time", true);
  SequenceSampler seq(p, 1, 0, prompt, tok_, Ids{2});
  ThreadPool pool(1);
  KvCache kv(model_->config(), 8, 16);
  Ids table = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<float> logits(512);
  SequenceChunk c{prompt, 0, table, false};
  model_->forward(std::span<const SequenceChunk>(&c, 1), kv, logits.data(), pool);
  std::string shown;
  int64_t pos = static_cast<int64_t>(prompt.size());
  while (!seq.finished()) {
    shown += seq.step(logits).text;
    ASSERT_EQ(shown.find("girl"), std::string::npos) << shown;
    if (seq.finished()) break;
    const Ids next = {seq.output().back()};
    SequenceChunk d{next, pos++, table, false};
    model_->forward(std::span<const SequenceChunk>(&d, 1), kv, logits.data(), pool);
  }
  EXPECT_EQ(seq.finish_reason(), FinishReason::kStop);
  EXPECT_EQ(shown, ", there was a little ");
}

TEST_F(StoriesTest, BeamSearchWithOneBeamIsGreedy) {
  ThreadPool pool(2);
  SamplingParams p;
  p.num_beams = 1;
  p.max_tokens = 30;
  p.temperature = 0.0f;
  const Ids prompt = tok_->encode("Once upon a time", true);
  KvCache kv(model_->config(), beam_search_blocks(static_cast<int64_t>(prompt.size()), p, 16), 16);
  const auto hyps = beam_search(*model_, kv, pool, prompt, p, Ids{2});
  p.seed = 5;
  const Ids greedy = run_batch(*model_, {{prompt, p}}, 1)[0];
  ASSERT_EQ(hyps.size(), 1u);
  EXPECT_EQ(hyps[0].tokens, greedy);
}

TEST(BeamSearch, EqualsExhaustiveSearchOnATinyVocabulary) {
  testing::TempDir dir;
  const int V = 6;
  testing::write_tiny_llama(dir.path(), V, 11);
  auto model = load_model(dir.path());
  ThreadPool pool(2);
  const Ids prompt = {1, 4};
  // Sum of log-probabilities of every continuation of length 3, by brute force.
  double best = -1e300;
  Ids best_seq;
  for (int a = 0; a < V; ++a)
    for (int b = 0; b < V; ++b)
      for (int c = 0; c < V; ++c) {
        Ids seq = prompt;
        seq.insert(seq.end(), {a, b, c});
        KvCache kv(model->config(), 4, 4);
        Ids table = {0, 1};
        SequenceChunk ch{seq, 0, table, true};
        std::vector<float> logits(seq.size() * V);
        model->forward(std::span<const SequenceChunk>(&ch, 1), kv, logits.data(), pool);
        double sum = 0;
        for (size_t i = prompt.size() - 1; i + 1 < seq.size(); ++i) {
          const float* row = logits.data() + i * V;
          double mx = *std::max_element(row, row + V), z = 0;
          for (int t = 0; t < V; ++t) z += std::exp(row[t] - mx);
          sum += row[seq[i + 1]] - mx - std::log(z);
        }
        if (sum > best) {
          best = sum;
          best_seq = {a, b, c};
        }
      }
  SamplingParams p;
  p.num_beams = V * V;  // wide enough to keep every prefix of length 2
  p.max_tokens = 3;
  p.length_penalty = 0.0f;
  p.temperature = 0.0f;
  KvCache kv(model->config(), beam_search_blocks(static_cast<int64_t>(prompt.size()), p, 4), 4);
  const auto hyps = beam_search(*model, kv, pool, prompt, p, Ids{});
  ASSERT_FALSE(hyps.empty());
  EXPECT_EQ(hyps[0].tokens, best_seq);
  EXPECT_NEAR(hyps[0].sum_logprob, best, 1e-4);
  // A narrow beam may miss it; the test above is only meaningful if that can happen, so check
  // that the search space is not trivially greedy: greedy differs from the optimum or not, the
  // wide beam must find the optimum either way.
}

}  // namespace
}  // namespace tf
