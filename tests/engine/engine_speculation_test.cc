// Speculative decoding and constrained output in the engine: prompt lookup and a draft model emit
// what plain decoding emits (greedy and seeded sampling, among others, chunked and preempted),
// keep the sampled distribution, release every block; constraints hold under preemption and
// speculation.

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "engine/engine_fixture.h"
#include "sampling/grammar.h"
#include "sampling/regex_grammar.h"

namespace tf {
namespace {

// Prompt-lookup speculation (issue 27) emits exactly what plain decoding emits: greedy, seeded
// sampling with logprobs, stop strings, n > 1, alone and among many requests chunked or
// preempted; and it does accept proposals (stories repeat themselves).
TEST_F(EngineTest, NgramSpeculationEmitsWhatPlainDecodingDoes) {
  auto requests = [](const char* text, size_t i) {
    std::vector<GenerationRequest> rs;
    rs.push_back(greedy(text, 48));
    GenerationRequest sampled = greedy(text, 40);
    sampled.params.temperature = 0.8f;
    sampled.params.top_k = 40;
    sampled.params.seed = 100 + i;
    sampled.params.logprobs = 2;
    rs.push_back(sampled);
    GenerationRequest stopped = greedy(text, 64);
    stopped.params.ignore_eos = false;
    stopped.params.stop = {"park"};
    rs.push_back(stopped);
    GenerationRequest many = sampled;
    many.params.n = 2;
    many.params.logprobs.reset();
    rs.push_back(many);
    return rs;
  };
  auto collect = [](const std::shared_ptr<RequestStream>& stream, size_t n) {
    std::vector<CompletedSequence> out(n);
    RequestOutput o;
    while (stream->next(o)) append_output(out.at(o.index), o);
    return out;
  };
  std::vector<std::vector<CompletedSequence>> plain;
  {
    Engine e(*model_, tok_, {2}, config(256, false));
    for (size_t i = 0; i < std::size(kPrompts); ++i)
      for (auto& r : requests(kPrompts[i], i)) {
        const size_t n = static_cast<size_t>(r.params.n);
        plain.push_back(collect(e.submit(std::move(r)), n));
      }
  }
  auto same = [&](const std::vector<CompletedSequence>& got, size_t k, const std::string& what) {
    expect_same_sequences(got, plain[k], what + ", request " + std::to_string(k));
  };
  // One at a time: every request speculates.
  {
    EngineConfig c = config(256, true);
    c.speculative_ngram = true;
    Engine e(*model_, tok_, {2}, c);
    size_t k = 0;
    for (size_t i = 0; i < std::size(kPrompts); ++i)
      for (auto& r : requests(kPrompts[i], i)) {
        const size_t n = static_cast<size_t>(r.params.n);
        same(collect(e.submit(std::move(r)), n), k++, "one at a time");
      }
    const EngineStats st = e.stats();
    EXPECT_GT(st.spec_drafts, 0);
    EXPECT_GT(st.spec_accepted_tokens, 0) << "stories repeat: some proposals must hold";
    EXPECT_LE(st.spec_accepted_tokens, st.spec_draft_tokens);
    // A step emits its accepted proposals and one more token, unless an accepted one ended it.
    EXPECT_LE(st.spec_emitted_tokens, st.spec_accepted_tokens + st.spec_drafts);
    EXPECT_GT(st.spec_emitted_tokens, st.spec_accepted_tokens);
    EXPECT_GE(st.spec_accepted_per_position[0], st.spec_accepted_per_position[1]);
    wait_until([&] { return e.stats().running == 0; });
    EXPECT_EQ(e.stats().kv_blocks_used, 0);
  }
  for (const EngineSetup s :
       {EngineSetup{"all at once", 256, true, 2048}, EngineSetup{"small chunks", 256, true, 7},
        EngineSetup{"tight memory (preemption)", 14, true, 2048}}) {
    EngineConfig c = config(s.blocks, s.prefix, s.step_tokens);
    c.speculative_ngram = true;
    c.spec_max_running = 1000;
    Engine e(*model_, tok_, {2}, c);
    std::vector<std::pair<std::shared_ptr<RequestStream>, size_t>> sent;
    for (size_t i = 0; i < std::size(kPrompts); ++i)
      for (auto& r : requests(kPrompts[i], i)) {
        const size_t n = static_cast<size_t>(r.params.n);
        sent.emplace_back(e.submit(std::move(r)), n);
      }
    for (size_t k = 0; k < sent.size(); ++k)
      same(collect(sent[k].first, sent[k].second), k, s.name);
    EXPECT_GT(e.stats().spec_accepted_tokens, 0) << s.name;
    if (s.blocks == 14) {
      EXPECT_GT(e.stats().preemptions, 0) << s.name;
    }
    wait_until([&] { return e.stats().running == 0; });
    EXPECT_EQ(e.stats().kv_blocks_used, 0) << s.name;
  }
}

// A draft model proposes (llama.cpp's Q4_0 copy of the same model, and the model itself): greedy
// output is token for token what plain decoding gives, alone, all at once, chunked and
// preempted, with stop strings and n > 1; both KV pools are empty at the end.
TEST_F(EngineTest, DraftSpeculationKeepsGreedyOutputAndReleasesBlocks) {
  const std::unique_ptr<Model> q4 =
      load_model(testing::shared_dir() + "/models/stories260K/stories260K-Q4_0.gguf");
  auto requests = [](const char* text) {
    std::vector<GenerationRequest> rs;
    rs.push_back(greedy(text, 48));
    GenerationRequest stopped = greedy(text, 64);
    stopped.params.ignore_eos = false;
    stopped.params.stop = {"park"};
    rs.push_back(stopped);
    GenerationRequest many = greedy(text, 24);
    many.params.n = 2;
    many.params.top_k = 1;  // greedy by top_k: n > 1 allows no temperature 0
    many.params.temperature = 1.0f;
    rs.push_back(many);
    return rs;
  };
  std::vector<std::vector<CompletedSequence>> plain;
  {
    Engine e(*model_, tok_, {2}, config(256, false));
    for (const char* prompt : kPrompts)
      for (auto& r : requests(prompt)) plain.push_back(run_to_completion(e, std::move(r)));
  }
  auto same = [&](const std::vector<CompletedSequence>& got, size_t k, const std::string& what) {
    expect_same_sequences(got, plain[k], what + ", request " + std::to_string(k));
  };
  struct DraftSetup {
    const char* name;
    Model* draft;
    int64_t blocks, step_tokens;
    bool together;
  };
  for (const DraftSetup s : {DraftSetup{"q4 draft, one at a time", q4.get(), 256, 2048, false},
                             DraftSetup{"self draft, one at a time", model_, 256, 2048, false},
                             DraftSetup{"q4 draft, all at once", q4.get(), 256, 2048, true},
                             DraftSetup{"q4 draft, small chunks", q4.get(), 256, 7, true},
                             DraftSetup{"q4 draft, preempted", q4.get(), 14, 2048, true}}) {
    EngineConfig c = config(s.blocks, true, s.step_tokens);
    c.speculative_draft = "stories260K-Q4_0.gguf";
    c.spec_max_running = 1000;
    c.spec_min_acceptance = 0.0;  // always propose: every step verifies
    Engine e(*model_, tok_, {2}, c, s.draft);
    std::vector<std::pair<std::shared_ptr<RequestStream>, size_t>> sent;
    size_t k = 0;
    for (const char* prompt : kPrompts)
      for (auto& r : requests(prompt)) {
        const size_t n = static_cast<size_t>(r.params.n);
        if (s.together) {
          sent.emplace_back(e.submit(std::move(r)), n);
        } else {
          same(run_to_completion(e, std::move(r)), k++, s.name);
        }
      }
    for (size_t i = 0; i < sent.size(); ++i) {
      std::vector<CompletedSequence> out(sent[i].second);
      RequestOutput o;
      while (sent[i].first->next(o)) append_output(out.at(o.index), o);
      same(out, i, s.name);
    }
    wait_until([&] { return e.stats().running == 0; });
    const EngineStats st = e.stats();
    EXPECT_GT(st.spec_drafts, 0) << s.name;
    EXPECT_LE(st.spec_accepted_tokens, st.spec_draft_tokens) << s.name;
    if (s.draft == model_) {
      // The model proposing to itself: its greedy proposals are its own greedy tokens.
      EXPECT_GE(st.spec_accepted_tokens, 0.95 * static_cast<double>(st.spec_draft_tokens))
          << s.name;
    } else {
      EXPECT_GT(st.spec_accepted_tokens, st.spec_draft_tokens / 3) << s.name;
    }
    if (s.blocks == 14) {
      EXPECT_GT(st.preemptions, 0) << s.name;
    }
    EXPECT_EQ(st.kv_blocks_used, 0) << s.name;
    EXPECT_EQ(st.draft_kv_blocks_used, 0) << s.name;
  }
}

// Cancelling requests while they speculate (proposals appended, verification steps running):
// each ends "abort", and both KV pools (the model's, the draft's) are empty once they are gone.
TEST_F(EngineTest, CancelDuringSpeculationReleasesEveryBlock) {
  const std::unique_ptr<Model> q4 =
      load_model(testing::shared_dir() + "/models/stories260K/stories260K-Q4_0.gguf");
  EngineConfig c = config(256, true);
  c.speculative_draft = "stories260K-Q4_0.gguf";
  c.spec_max_running = 1000;
  c.spec_min_acceptance = 0.0;
  Engine e(*model_, tok_, {2}, c, q4.get());
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::unique_ptr<std::atomic<int>>> pushes;
  for (int i = 0; i < 12; ++i) {
    GenerationRequest r = greedy(kPrompts[i % std::size(kPrompts)], 400);
    r.params.temperature = i % 2 ? 0.8f : 0.0f;
    r.params.seed = static_cast<uint64_t>(i);
    streams.push_back(e.submit(std::move(r)));
    // Cancelled from the engine's own thread after 12 outputs (several verification steps in),
    // whatever the test thread is doing.
    pushes.push_back(std::make_unique<std::atomic<int>>(0));
    RequestStream* s = streams.back().get();
    std::atomic<int>* n = pushes.back().get();
    streams.back()->set_listener([s, n] {
      if (++*n == 12) s->cancel();
    });
  }
  for (auto& s : streams) {
    CompletedSequence seq;
    RequestOutput o;
    while (s->next(o)) append_output(seq, o);
    EXPECT_EQ(seq.finish, FinishReason::kAbort);
    EXPECT_LT(seq.tokens.size(), 400u);
  }
  wait_until([&] { return e.stats().running == 0 && e.stats().kv_blocks_used == 0; });
  EXPECT_GT(e.stats().spec_drafts, 12) << "the requests must have been speculating";
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
  EXPECT_EQ(e.stats().draft_kv_blocks_used, 0);
}

// Sampled output keeps the model's distribution with a draft model proposing (rejection
// sampling against the draft's q): a two-sample chi-square test of the 2nd and 3rd generated
// tokens, over 3000 seeded requests with and 3000 without speculation (different seeds). The
// draft is a random-weight model of the same vocabulary, so that its q is far from the model's
// p: accepting its proposals as they come, or drawing a rejected one's replacement from p
// instead of the residual, would change the distribution beyond the test's limit.
TEST_F(EngineTest, DraftSpeculationKeepsTheSampledDistribution) {
  testing::TempDir dir;
  testing::write_tiny_llama(dir.path(), model_->config().vocab_size, 7);
  const std::unique_ptr<Model> q4 = load_model(dir.path());
  const int n = 3000, len = 3;
  auto sample = [&](bool speculate, uint64_t first_seed, EngineStats* stats) {
    EngineConfig c = config(1024, true);
    c.scheduler.max_num_seqs = 128;
    if (speculate) {
      c.speculative_draft = "a random draft";
      c.spec_max_running = 1000;
      c.spec_min_acceptance = 0.0;
    }
    Engine e(*model_, tok_, {2}, c, speculate ? q4.get() : nullptr);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < n; ++i) {
      GenerationRequest r = greedy("Once upon a time, there was a", len);
      r.params.temperature = 1.0f;
      r.params.seed = first_seed + static_cast<uint64_t>(i);
      streams.push_back(e.submit(std::move(r)));
    }
    std::vector<Ids> out;
    for (auto& st : streams) {
      CompletedSequence seq;
      RequestOutput o;
      while (st->next(o)) append_output(seq, o);
      out.push_back(seq.tokens);
    }
    wait_until([&] { return e.stats().running == 0; });
    if (stats) *stats = e.stats();
    return out;
  };
  EngineStats st;
  const std::vector<Ids> plain = sample(false, 0, nullptr);
  const std::vector<Ids> spec = sample(true, 1000000, &st);
  EXPECT_GT(st.spec_accepted_tokens, 0);
  EXPECT_LT(st.spec_accepted_tokens, st.spec_draft_tokens) << "some proposals must be rejected";
  for (int pos = 1; pos < len; ++pos) {
    std::map<int32_t, std::pair<int, int>> counts;
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(plain[i].size(), static_cast<size_t>(len));
      ASSERT_EQ(spec[i].size(), static_cast<size_t>(len));
      ++counts[plain[i][pos]].first;
      ++counts[spec[i][pos]].second;
    }
    // Tokens seen fewer than 10 times in all are pooled into one category.
    double x = 0.0;
    int categories = 0, pooled_a = 0, pooled_b = 0;
    for (const auto& [token, ab] : counts) {
      if (ab.first + ab.second < 10) {
        pooled_a += ab.first;
        pooled_b += ab.second;
        continue;
      }
      x += static_cast<double>(ab.first - ab.second) * (ab.first - ab.second) /
           (ab.first + ab.second);
      ++categories;
    }
    if (pooled_a + pooled_b > 0) {
      x += static_cast<double>(pooled_a - pooled_b) * (pooled_a - pooled_b) / (pooled_a + pooled_b);
      ++categories;
    }
    // Wilson-Hilferty: the chi-square quantile with dof degrees at z = 4.26 (p = 1e-5).
    const double dof = categories - 1, z = 4.26;
    const double limit = dof * std::pow(1 - 2 / (9 * dof) + z * std::sqrt(2 / (9 * dof)), 3);
    EXPECT_GT(categories, 20) << "position " << pos;
    EXPECT_LT(x, limit) << "position " << pos << ": " << categories << " categories";
  }
}

// Constrained sampling (issue 24) is a function of the request alone: the same seeded outputs
// alone and among 40 requests under preemption (recomputed sequences keep their grammar
// state), each a sentence of the grammar.
TEST_F(EngineTest, ConstrainedSampledOutputIsTheSameUnderPreemption) {
  const auto vocab = std::make_shared<const GrammarVocab>(tok_->vocabulary_bytes());
  const auto compiled = vocab->compile(regex_to_gbnf("[a-z]{1,8}( [a-z]{1,8}){2,6}\\."));
  auto constrained = [&](const char* text, uint64_t seed) {
    GenerationRequest r = greedy(text, 64);
    r.params.ignore_eos = false;
    r.params.temperature = 0.9f;
    r.params.seed = seed;
    r.params.grammar = compiled;
    r.params.grammar_vocab = vocab;
    return r;
  };
  std::vector<Ids> alone;
  {
    Engine e(*model_, tok_, {2}, config(256, false));
    for (size_t i = 0; i < std::size(kPrompts); ++i)
      alone.push_back(run_to_completion(e, constrained(kPrompts[i], i))[0].tokens);
  }
  Engine e(*model_, tok_, {2}, config(14, true));
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<size_t> which;
  for (int copy = 0; copy < 8; ++copy) {
    for (size_t i = 0; i < std::size(kPrompts); ++i) {
      streams.push_back(e.submit(constrained(kPrompts[i], i)));
      which.push_back(i);
    }
  }
  for (size_t k = 0; k < streams.size(); ++k) {
    Ids got;
    RequestOutput o;
    while (streams[k]->next(o)) got.insert(got.end(), o.token_ids.begin(), o.token_ids.end());
    EXPECT_EQ(got, alone[which[k]]) << "request " << k;
    GrammarMatcher m(compiled->grammar());
    std::string text;
    for (int32_t t : got)
      if (t != 2) text += vocab->bytes[static_cast<size_t>(t)];
    EXPECT_TRUE(m.accept(text) && m.can_end()) << text;
  }
  EXPECT_GT(e.stats().preemptions, 0) << "the setup must force preemption";
}

// Structured output with speculation: proposals are drawn against the grammar like any token (a
// proposal it forbids has p = 0 and is rejected). Prompt lookup and a greedy draft leave the
// tokens as plain decoding gives them; a sampled draft's outputs are sentences of the grammar.
TEST_F(EngineTest, ConstrainedOutputWithSpeculation) {
  const auto vocab = std::make_shared<const GrammarVocab>(tok_->vocabulary_bytes());
  // Repetitive by construction, so that the prompt lookup finds what to propose.
  const auto compiled = vocab->compile(regex_to_gbnf("(la ){3,8}[a-z]{1,8}\\."));
  const std::unique_ptr<Model> q4 =
      load_model(testing::shared_dir() + "/models/stories260K/stories260K-Q4_0.gguf");
  auto constrained = [&](const char* text, uint64_t seed, float temperature) {
    GenerationRequest r = greedy(text, 48);
    r.params.ignore_eos = false;
    r.params.temperature = temperature;
    r.params.seed = seed;
    r.params.grammar = compiled;
    r.params.grammar_vocab = vocab;
    return r;
  };
  auto in_grammar = [&](const Ids& got) {
    GrammarMatcher m(compiled->grammar());
    std::string text;
    for (int32_t t : got)
      if (t != 2) text += vocab->bytes[static_cast<size_t>(t)];
    return m.accept(text) && m.can_end();
  };
  for (const float temperature : {0.0f, 0.9f}) {
    std::vector<Ids> plain;
    {
      Engine e(*model_, tok_, {2}, config(256, false));
      for (size_t i = 0; i < std::size(kPrompts); ++i)
        plain.push_back(run_to_completion(e, constrained(kPrompts[i], i, temperature))[0].tokens);
    }
    for (const bool draft : {false, true}) {
      EngineConfig c = config(256, true);
      c.spec_min_acceptance = 0.0;
      if (draft) {
        c.speculative_draft = "stories260K-Q4_0.gguf";
      } else {
        c.speculative_ngram = true;
      }
      Engine e(*model_, tok_, {2}, c, draft ? q4.get() : nullptr);
      for (size_t i = 0; i < std::size(kPrompts); ++i) {
        const Ids got = run_to_completion(e, constrained(kPrompts[i], i, temperature))[0].tokens;
        EXPECT_TRUE(in_grammar(got)) << "draft " << draft << ", temperature " << temperature << ": "
                                     << tok_->decode(got, false);
        // Seeded sampling is token for token the same with point-mass proposals only.
        if (!draft || temperature == 0.0f) {
          EXPECT_EQ(got, plain[i]) << "draft " << draft << ", temperature " << temperature;
        }
      }
      EXPECT_GT(e.stats().spec_accepted_tokens, 0)
          << "draft " << draft << ", temperature " << temperature;
    }
  }
}

}  // namespace
}  // namespace tf
