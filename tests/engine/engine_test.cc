// The engine: block accounting under random events, and outputs that do not depend on what
// else runs, on prefix caching, on chunking or on preemption.

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/kv_block_pool.h"
#include "engine/kv_cache_manager.h"
#include "engine/scheduler.h"
#include "model/lora.h"
#include "model/safetensors.h"
#include "model/stories_fixture.h"
#include "model/test_util.h"
#include "sampling/beam_search.h"
#include "sampling/grammar.h"
#include "sampling/regex_grammar.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf {
namespace {

using Ids = std::vector<int32_t>;

TEST(KvBlockPool, RandomEventsNeverLeakBlocks) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 20; ++trial) {
    const int bs = 4;
    KvBlockPool pool(64, bs);
    KvCacheManager kv(pool, /*prefix_caching=*/true);
    SchedulerConfig sc;
    sc.max_num_batched_tokens = 1 + rng() % 64;
    sc.max_num_seqs = 1 + rng() % 16;
    Scheduler sched(sc, kv);
    std::vector<std::unique_ptr<EngineRequest>> reqs;
    std::vector<std::unique_ptr<Sequence>> owned;
    std::vector<Sequence*> live;
    // A few shared prefixes so that the prefix cache gets hits.
    std::vector<Ids> prefixes(3);
    for (auto& p : prefixes) {
      p.resize(8 + rng() % 12);
      for (auto& t : p) t = static_cast<int32_t>(rng() % 50);
    }
    for (int event = 0; event < 400; ++event) {
      const int kind = rng() % 10;
      if (kind < 3) {  // submit
        auto r = std::make_unique<EngineRequest>();
        r->spec.priority = static_cast<int32_t>(rng() % 3);
        r->spec.cache_salt = rng() % 2;
        auto s = std::make_unique<Sequence>();
        s->request = r.get();
        s->tokens = prefixes[rng() % prefixes.size()];
        for (int i = 0, n = static_cast<int>(rng() % 20); i < n; ++i)
          s->tokens.push_back(static_cast<int32_t>(rng() % 50));
        s->prompt_len = s->num_tokens();
        sched.add(s.get());
        live.push_back(s.get());
        owned.push_back(std::move(s));
        reqs.push_back(std::move(r));
      } else if (kind < 8) {  // a step: computed chunks advance, ends of tokens grow by one
        const SchedulerOutput out = sched.schedule();
        for (const auto& c : out.chunks) {
          ASSERT_EQ(c.start, c.seq->num_computed);
          ASSERT_LE(static_cast<int64_t>(c.seq->block_table.size()) * bs,
                    static_cast<int64_t>(64) * bs);
          ASSERT_GE(static_cast<int64_t>(c.seq->block_table.size()) * bs, c.start + c.count);
        }
        EXPECT_TRUE(out.block_copies.empty()) << "no fork, nothing shared to copy";
        for (const ReadySequence& ready : sched.update(out)) {
          if (ready.seq->num_tokens() < 60)
            ready.seq->tokens.push_back(static_cast<int32_t>(rng() % 50));
        }
        ASSERT_LE(out.num_tokens, sc.max_num_batched_tokens);
      } else if (!live.empty()) {  // finish or cancel a random sequence
        const size_t i = rng() % live.size();
        sched.remove(live[i]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      }
      pool.check_invariants();
      // Every block is referenced exactly by the tables that hold it.
      std::vector<int32_t> refs(64, 0);
      for (Sequence* s : live) {
        for (int32_t b : s->block_table) ++refs[b];
      }
      for (int32_t b = 0; b < 64; ++b) ASSERT_EQ(pool.refcount(b), refs[b]) << "block " << b;
    }
    for (Sequence* s : live) sched.remove(s);
    pool.check_invariants();
    EXPECT_EQ(pool.num_available(), 64)
        << "every block is free or cached once all sequences are gone";
  }
}

// Fair turns between tenants within a priority: a request of 64 sequences does not make one that
// comes after it wait for all of them; one tenant alone is served first come, first served; a
// lower priority value still goes first.
TEST(Scheduler, TenantsTakeFairTurnsAndOneTenantIsFcfs) {
  KvBlockPool pool(4096, 4);
  KvCacheManager kv(pool, /*prefix_caching=*/false);
  SchedulerConfig sc;
  sc.max_num_seqs = 1000;
  sc.max_num_batched_tokens = 4;  // one 4-token prompt admitted per step
  Scheduler sched(sc, kv);
  std::vector<std::unique_ptr<EngineRequest>> reqs;
  std::vector<std::unique_ptr<Sequence>> owned;
  auto submit = [&](uint64_t tenant, int n, int32_t priority = 0) {
    auto r = std::make_unique<EngineRequest>();
    r->spec.tenant = tenant;
    r->spec.priority = priority;
    for (int i = 0; i < n; ++i) {
      auto seq = std::make_unique<Sequence>();
      seq->request = r.get();
      seq->index = i;
      seq->tokens = {1, 2, 3, 4};
      seq->prompt_len = 4;
      sched.add(seq.get());
      owned.push_back(std::move(seq));
    }
    reqs.push_back(std::move(r));
    return reqs.back().get();
  };
  auto admitted_next = [&]() -> const EngineRequest* {
    const SchedulerOutput out = sched.schedule();
    for (const auto& c : out.chunks) {
      if (c.start == 0) {
        c.seq->num_computed = c.count;
        return c.seq->request;
      }
      c.seq->num_computed += c.count;
    }
    return nullptr;
  };
  const EngineRequest* big = submit(7, 64);
  ASSERT_EQ(admitted_next(), big);
  ASSERT_EQ(admitted_next(), big);
  const EngineRequest* small = submit(9, 1);
  // Its turn is the next one: at most the big request's sequence of the same turn goes first.
  const EngineRequest* a = admitted_next();
  const EngineRequest* b = admitted_next();
  EXPECT_TRUE(a == small || b == small) << "the later tenant waited behind the whole big request";
  EXPECT_EQ(admitted_next(), big);
  // One tenant: first come, first served, sequence by sequence.
  KvBlockPool pool2(4096, 4);
  KvCacheManager kv2(pool2, false);
  Scheduler one(sc, kv2);
  std::vector<std::unique_ptr<Sequence>> seqs;
  auto r1 = std::make_unique<EngineRequest>(), r2 = std::make_unique<EngineRequest>();
  r1->spec.tenant = r2->spec.tenant = 5;
  for (EngineRequest* r : {r1.get(), r1.get(), r2.get()}) {
    seqs.push_back(std::make_unique<Sequence>());
    seqs.back()->request = r;
    seqs.back()->tokens = {1, 2, 3, 4};
    seqs.back()->prompt_len = 4;
    one.add(seqs.back().get());
  }
  std::vector<const EngineRequest*> order;
  for (int i = 0; i < 3; ++i) {
    for (const auto& c : one.schedule().chunks) {
      if (c.start == 0) order.push_back(c.seq->request);
      c.seq->num_computed += c.count;
    }
  }
  EXPECT_EQ(order, (std::vector<const EngineRequest*>{r1.get(), r1.get(), r2.get()}));
  // Priority first.
  const EngineRequest* urgent = submit(11, 1, -1);
  EXPECT_EQ(admitted_next(), urgent);
}

// Within a tenant, turns go round its groups (API requests): a second request of the same key
// does not wait behind every prompt of the first. Without a key the group is the tenant, so one
// HTTP request of 64 prompts takes one share, not 64.
TEST(Scheduler, ATenantsTurnsGoRoundItsRequests) {
  SchedulerConfig sc;
  sc.max_num_seqs = 1000;
  sc.max_num_batched_tokens = 4;  // one 4-token prompt admitted per step
  for (const uint64_t tenant : {uint64_t{5}, uint64_t{0}}) {
    SCOPED_TRACE(tenant == 0 ? "no key" : "one key");
    KvBlockPool pool(4096, 4);
    KvCacheManager kv(pool, /*prefix_caching=*/false);
    Scheduler sched(sc, kv);
    std::vector<std::unique_ptr<EngineRequest>> reqs;
    std::vector<std::unique_ptr<Sequence>> seqs;
    // One engine request per prompt, as the API makes them; group = the API request.
    auto submit = [&](uint64_t group, int prompts) {
      for (int i = 0; i < prompts; ++i) {
        reqs.push_back(std::make_unique<EngineRequest>());
        reqs.back()->spec.tenant = tenant;
        reqs.back()->spec.group = group;
        seqs.push_back(std::make_unique<Sequence>());
        seqs.back()->request = reqs.back().get();
        seqs.back()->tokens = {1, 2, 3, 4};
        seqs.back()->prompt_len = 4;
        sched.add(seqs.back().get());
      }
    };
    auto next_group = [&]() -> uint64_t {
      uint64_t g = 0;
      for (const auto& c : sched.schedule().chunks) {
        if (c.start == 0) g = c.seq->request->spec.group;
        c.seq->num_computed += c.count;
      }
      return g;
    };
    submit(1, 64);
    EXPECT_EQ(next_group(), 1u);
    submit(2, 3);
    submit(3, 1);
    // Round robin from here: 1, 2, 3, then 1 and 2 alternate until 2's three are in.
    std::vector<uint64_t> order;
    for (int i = 0; i < 8; ++i) order.push_back(next_group());
    EXPECT_EQ(order, (std::vector<uint64_t>{1, 2, 3, 1, 2, 1, 2, 1}))
        << ::testing::PrintToString(order);
  }
}

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
void wait_until(Cond cond) {
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

const char* kPrompts[] = {PREAMBLE "Once upon a time", PREAMBLE "The little dog ran",
                          PREAMBLE "Lily and Ben went to the park. They saw",
                          PREAMBLE "Tom had a red ball.", "One day, a bird"};

// Every prompt of kPrompts 8 times at once (40 requests), 48 greedy tokens each: each equals
// the prompt's output alone.
void expect_each_as_alone(Engine& e, const std::vector<Ids>& alone, const char* setup) {
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

TEST_F(EngineTest, GreedyOutputIsTheSameAloneAmongOthersCachedChunkedAndPreempted) {
  std::vector<Ids> alone;
  {
    Engine e(*model_, tok_, {2}, config(256, false));
    for (const char* p : kPrompts) alone.push_back(run_to_completion(e, greedy(p, 48))[0].tokens);
  }
  for (const EngineSetup s :
       {EngineSetup{"prefix cache", 256, true, 2048}, EngineSetup{"small chunks", 256, true, 7},
        EngineSetup{"tight memory (preemption)", 14, true, 2048},
        EngineSetup{"tight, no cache", 14, false, 64}}) {
    Engine e(*model_, tok_, {2}, config(s.blocks, s.prefix, s.step_tokens));
    expect_each_as_alone(e, alone, s.name);
    const EngineStats st = e.stats();
    if (s.blocks == 14) {
      EXPECT_GT(st.preemptions, 0) << s.name << ": the setup must force preemption";
    }
    if (s.prefix && (s.blocks == 14 || s.step_tokens < 64)) {
      // Admission is staggered here, so later requests find the shared preamble cached.
      EXPECT_GT(st.prefix_hit_tokens, 0) << s.name;
    }
  }
}

TEST_F(EngineTest, AQ8CacheGivesTheSameOutputAloneCachedChunkedPreemptedAndForked) {
  // An 8-bit cache quantizes each token's row by itself: what a sequence reads does not depend
  // on its batch, its chunking, a prefix shared from another request or a recomputation.
  const auto q8 = [](int64_t blocks, bool prefix, int64_t step_tokens = 2048) {
    EngineConfig c = config(1, prefix, step_tokens);
    c.kv_type = kernels::KvType::kQ8_0;
    c.kv_cache_bytes = blocks * KvCache::bytes_per_block(model_->config(), 16, c.kv_type);
    return c;
  };
  std::vector<Ids> alone, f32;
  {
    Engine e(*model_, tok_, {2}, q8(256, false));
    Engine full(*model_, tok_, {2}, config(256, false));
    for (const char* p : kPrompts) {
      alone.push_back(run_to_completion(e, greedy(p, 48))[0].tokens);
      f32.push_back(run_to_completion(full, greedy(p, 48))[0].tokens);
    }
  }
  EXPECT_NE(alone, f32) << "the 8-bit cache must be in use (its rounding shows in 48 tokens)";
  for (const EngineSetup s :
       {EngineSetup{"prefix cache", 256, true, 2048}, EngineSetup{"small chunks", 256, true, 7},
        EngineSetup{"tight memory (preemption)", 14, true, 2048}}) {
    Engine e(*model_, tok_, {2}, q8(s.blocks, s.prefix, s.step_tokens));
    expect_each_as_alone(e, alone, s.name);
    if (s.blocks == 14) {
      EXPECT_GT(e.stats().preemptions, 0) << s.name;
      EXPECT_GT(e.stats().prefix_hit_tokens, 0) << s.name;
    }
  }
  // Forks: n greedy sequences of one prompt share its blocks (copy-on-write of the partial
  // one) and each equals the sequence alone.
  Engine e(*model_, tok_, {2}, q8(256, true));
  GenerationRequest r = greedy(kPrompts[0], 48);
  r.params.n = 3;
  for (const auto& seq : run_to_completion(e, r)) EXPECT_EQ(seq.tokens, alone[0]);
}

// A random PEFT adapter for stories260K (q_proj and v_proj of every layer, and down_proj of the
// first), written to dir.
void write_stories_adapter(const Model& m, const std::string& dir, uint32_t seed) {
  const ModelConfig& c = m.config();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<std::vector<float>> data;
  std::vector<SafetensorsOutput> out;
  const int64_t r = 4;
  auto pair = [&](const std::string& stem, int64_t rows, int64_t cols) {
    for (const auto& [which, shape] :
         {std::pair{"lora_A", Shape{r, cols}}, std::pair{"lora_B", Shape{rows, r}}}) {
      data.emplace_back(static_cast<size_t>(shape.numel()));
      for (float& v : data.back()) v = normal(rng);
      out.push_back({"base_model.model." + stem + "." + which + ".weight", DType::kF32, shape,
                     data.back().data()});
    }
  };
  data.reserve(4 * static_cast<size_t>(c.n_layers) + 2);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    pair(p + "self_attn.q_proj", c.q_dim(), c.dim);
    pair(p + "self_attn.v_proj", c.kv_dim(), c.dim);
  }
  pair("model.layers.0.mlp.down_proj", c.dim, c.ffn_dim);
  write_safetensors(dir + "/adapter_model.safetensors", out);
  testing::write_bytes(dir + "/adapter_config.json",
                       R"({"peft_type":"LORA","r":4,"lora_alpha":8,"bias":"none",)"
                       R"("target_modules":["q_proj","v_proj","down_proj"]})");
}

// LoRA adapters in the engine (issue 54): a sequence's tokens depend on its own adapter only,
// whoever shares its steps (the base, another adapter), under preemption; and the prefix cache
// keeps each adapter's blocks to itself (a request of one adapter after the same prompt of the
// base, or of another adapter, computes its own).
TEST_F(EngineTest, LoraSequencesFollowTheirOwnAdapterAndKeepTheirOwnBlocks) {
  testing::TempDir d1, d2;
  write_stories_adapter(*model_, d1.path(), 1);
  write_stories_adapter(*model_, d2.path(), 2);
  const auto a1 = LoraAdapter::load(d1.path(), *model_);
  const auto a2 = LoraAdapter::load(d2.path(), *model_);
  EXPECT_EQ(a1->targets(), (std::vector<std::string>{"q_proj", "v_proj", "down_proj"}));
  const std::shared_ptr<const LoraAdapter> adapters[] = {nullptr, a1, a2};
  auto request = [&](const char* prompt, int which) {
    GenerationRequest r = greedy(prompt, 32);
    r.lora = adapters[which];
    return r;
  };
  // Alone, each in a fresh engine without a prefix cache.
  std::map<std::pair<int, int>, Ids> alone;
  for (int a = 0; a < 3; ++a) {
    for (int p = 0; p < 2; ++p) {
      Engine e(*model_, tok_, {2}, config(256, false));
      alone[{a, p}] = run_to_completion(e, request(kPrompts[p], a))[0].tokens;
    }
  }
  EXPECT_NE((alone[{0, 0}]), (alone[{1, 0}]));  // the adapters change what is generated
  EXPECT_NE((alone[{1, 0}]), (alone[{2, 0}]));
  for (const EngineSetup s : {EngineSetup{"prefix cache", 256, true, 2048},
                              EngineSetup{"tight memory (preemption)", 14, true, 2048}}) {
    Engine e(*model_, tok_, {2}, config(s.blocks, s.prefix, s.step_tokens));
    // The base first, so that its blocks of the shared preamble are cached before the others.
    EXPECT_EQ(run_to_completion(e, request(kPrompts[0], 0))[0].tokens, (alone[{0, 0}]));
    std::vector<std::shared_ptr<RequestStream>> streams;
    std::vector<std::pair<int, int>> which;
    for (int copy = 0; copy < 4; ++copy)
      for (int a = 0; a < 3; ++a)
        for (int p = 0; p < 2; ++p) {
          streams.push_back(e.submit(request(kPrompts[p], (a + copy) % 3)));
          which.push_back({(a + copy) % 3, p});
        }
    for (size_t k = 0; k < streams.size(); ++k) {
      Ids got;
      RequestOutput o;
      while (streams[k]->next(o)) got.insert(got.end(), o.token_ids.begin(), o.token_ids.end());
      EXPECT_EQ(got, alone[which[k]])
          << s.name << ", adapter " << which[k].first << ", prompt " << which[k].second;
    }
    if (s.blocks == 14) {
      EXPECT_GT(e.stats().preemptions, 0) << s.name;
    }
    EXPECT_GT(e.stats().prefix_hit_tokens, 0) << s.name;  // (within each adapter)
  }
}

// Prompt logprobs and embeddings (issue 26) gather every prompt row: the same values alone and
// among 40 requests whose prompts are chunked, cached or preempted and recomputed (a recompute
// adds nothing already gathered; a cached prefix is not used, since it has no rows).
TEST_F(EngineTest, PromptLogprobsAndEmbeddingsAreTheSameChunkedCachedAndPreempted) {
  auto scored = [](const char* text) {
    GenerationRequest r = greedy(text, 4);
    r.prompt_logprobs = 3;
    return r;
  };
  auto embedded = [](const char* text, Pooling pooling) {
    GenerationRequest r = greedy(text, 1);
    r.pooling = pooling;
    return r;
  };
  std::vector<std::vector<PromptLogprob>> lps;
  std::vector<std::vector<float>> means, lasts;
  {
    Engine e(*model_, tok_, {2}, config(256, false));
    for (const char* p : kPrompts) {
      const auto s = run_to_completion(e, scored(p));
      ASSERT_EQ(s[0].prompt_logprobs.size(), tok_->encode(p, true).size() - 1) << p;
      lps.push_back(s[0].prompt_logprobs);
      means.push_back(run_to_completion(e, embedded(p, Pooling::kMean))[0].embedding);
      lasts.push_back(run_to_completion(e, embedded(p, Pooling::kLast))[0].embedding);
      ASSERT_EQ(means.back().size(), static_cast<size_t>(model_->config().dim));
      EXPECT_NE(means.back(), lasts.back());
    }
  }
  for (const EngineSetup s :
       {EngineSetup{"prefix cache", 256, true, 2048}, EngineSetup{"small chunks", 256, true, 7},
        EngineSetup{"tight memory (preemption)", 14, true, 2048}}) {
    Engine e(*model_, tok_, {2}, config(s.blocks, s.prefix, s.step_tokens));
    struct Sent {
      std::shared_ptr<RequestStream> stream;
      size_t prompt;
      int kind;  // 0 prompt logprobs, 1 mean, 2 last, 3 plain (fills the cache and the batch)
    };
    std::vector<Sent> sent;
    for (int copy = 0; copy < 2; ++copy) {
      for (size_t i = 0; i < std::size(kPrompts); ++i) {
        sent.push_back({e.submit(greedy(kPrompts[i], 48)), i, 3});
        sent.push_back({e.submit(scored(kPrompts[i])), i, 0});
        sent.push_back({e.submit(embedded(kPrompts[i], Pooling::kMean)), i, 1});
        sent.push_back({e.submit(embedded(kPrompts[i], Pooling::kLast)), i, 2});
      }
    }
    for (const Sent& x : sent) {
      CompletedSequence got;
      RequestOutput o;
      while (x.stream->next(o)) append_output(got, o);
      if (x.kind == 0) {
        const auto& want = lps[x.prompt];
        ASSERT_EQ(got.prompt_logprobs.size(), want.size()) << s.name;
        for (size_t k = 0; k < want.size(); ++k) {
          EXPECT_EQ(got.prompt_logprobs[k].sample.token, want[k].sample.token);
          EXPECT_NEAR(got.prompt_logprobs[k].sample.logprob, want[k].sample.logprob, 1e-4)
              << s.name << ", prompt " << x.prompt << ", position " << k + 1;
          EXPECT_EQ(got.prompt_logprobs[k].rank, want[k].rank) << s.name;
          ASSERT_EQ(got.prompt_logprobs[k].sample.top.size(), 3u);
          for (size_t t = 0; t < 3; ++t)
            EXPECT_EQ(got.prompt_logprobs[k].sample.top[t].token, want[k].sample.top[t].token);
        }
        EXPECT_EQ(got.tokens.size(), 4u);  // and it generated as asked
      } else if (x.kind == 1 || x.kind == 2) {
        const auto& want = x.kind == 1 ? means[x.prompt] : lasts[x.prompt];
        ASSERT_EQ(got.embedding.size(), want.size()) << s.name;
        for (size_t d = 0; d < want.size(); ++d)
          EXPECT_NEAR(got.embedding[d], want[d], 1e-4) << s.name << ", prompt " << x.prompt;
        EXPECT_TRUE(got.tokens.empty()) << "an embedding request generates nothing";
        EXPECT_EQ(got.finish, FinishReason::kStop);
      }
    }
    if (s.blocks == 14) {
      EXPECT_GT(e.stats().preemptions, 0) << s.name;
    }
    wait_until([&] { return e.stats().running == 0; });
    EXPECT_EQ(e.stats().kv_blocks_used, 0) << s.name << ": every block released";
  }
}

// Prompt-lookup speculation (issue 27) emits exactly what plain decoding emits: greedy, seeded
// sampling with logprobs, stop strings, n > 1, alone and among many requests chunked or
// preempted; and it does accept proposals (stories repeat themselves).
// The sequences of a request as another run gave them: tokens, text, finish and logprobs.
void expect_same_sequences(const std::vector<CompletedSequence>& got,
                           const std::vector<CompletedSequence>& want, const std::string& what) {
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

TEST_F(EngineTest, StaticBatchingRunsWholeBatchesAndPaddedRowsKeepComputing) {
  // Output lengths differ, so a static batch has rows that finish early.
  const int32_t lengths[] = {40, 8, 24, 4, 16};
  std::vector<Ids> alone;
  {
    Engine e(*model_, tok_, {2}, config(256, false));
    for (size_t i = 0; i < std::size(kPrompts); ++i)
      alone.push_back(run_to_completion(e, greedy(kPrompts[i], lengths[i]))[0].tokens);
  }
  int64_t batched[2] = {0, 0};
  for (bool pad : {false, true}) {
    EngineConfig c = config(256, true);
    c.scheduler.static_batching = true;
    c.scheduler.pad_finished = pad;
    c.scheduler.max_num_seqs = 5;
    c.batch_timeout_micros = 200000;  // the first batch gathers all five of the first round
    Engine e(*model_, tok_, {2}, c);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int round = 0; round < 2; ++round) {
      for (size_t i = 0; i < std::size(kPrompts); ++i)
        streams.push_back(e.submit(greedy(kPrompts[i], lengths[i])));
    }
    for (size_t k = 0; k < streams.size(); ++k) {
      Ids got;
      RequestOutput o;
      FinishReason last = FinishReason::kNone;
      while (streams[k]->next(o)) {
        got.insert(got.end(), o.token_ids.begin(), o.token_ids.end());
        if (o.finish != FinishReason::kNone) last = o.finish;
      }
      EXPECT_EQ(got, alone[k % 5]) << (pad ? "padded" : "ragged") << ", request " << k;
      EXPECT_EQ(last, FinishReason::kLength);
    }
    for (int i = 0; i < 200 && (e.stats().kv_blocks_used > 0 || e.stats().running > 0); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const EngineStats st = e.stats();
    EXPECT_EQ(st.kv_blocks_used, 0) << "padding rows give their blocks back when the batch ends";
    EXPECT_EQ(st.requests_finished, 10);
    batched[pad] = st.batched_tokens;
  }
  // Padded: every row runs as long as the batch's longest (40 decode steps per batch of 5),
  // ragged: rows leave as they finish.
  EXPECT_GT(batched[1], batched[0] + 2 * (5 * 40 - (40 + 8 + 24 + 4 + 16)) - 20);
}

TEST_F(EngineTest, CancelFreesBlocksAndEndsTheStream) {
  Engine e(*model_, tok_, {2}, config(64, true));
  auto stream = e.submit(greedy("Once upon a time", 400));
  RequestOutput o;
  ASSERT_TRUE(stream->next(o));
  stream->cancel();
  FinishReason last = FinishReason::kNone;
  while (stream->next(o)) last = o.finish;
  EXPECT_EQ(last, FinishReason::kAbort);
  for (int i = 0; i < 100 && e.stats().kv_blocks_used > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, RejectsWhatCanNeverRun) {
  Engine e(*model_, tok_, {2}, config(8, true));
  auto error_of = [&](GenerationRequest r) {
    try {
      e.submit(std::move(r));
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of(greedy("Once", 600)).find("context of 512"), std::string::npos);
  EXPECT_NE(error_of(greedy("Once", 200)).find("KV blocks"),
            std::string::npos);  // 8 blocks = 128 tokens
  GenerationRequest bad = greedy("Once", 10);
  bad.prompt.push_back(9999);
  EXPECT_NE(error_of(bad).find("outside the vocabulary"), std::string::npos);
  GenerationRequest t = greedy("Once", 10);
  t.params.top_p = 0.0f;
  EXPECT_NE(error_of(t).find("top_p"), std::string::npos);
  EXPECT_EQ(e.stats().waiting, 0);
}

TEST_F(EngineTest, QueueLimitShedsLoadAndCountsOnlyWaitingRequests) {
  EngineConfig c = config(64, true);
  c.max_queued_requests = 2;
  c.batch_timeout_micros = 1'000'000;  // nothing is scheduled while the first batch gathers
  Engine e(*model_, tok_, {2}, c);
  auto a = e.submit(greedy("Once", 4));
  auto b = e.submit(greedy("Once", 4));
  try {
    e.submit(greedy("Once", 4));
    FAIL() << "a third request must be refused";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kUnavailable);
    EXPECT_NE(std::string(err.what()).find("overloaded"), std::string::npos);
  }
  a->cancel();
  b->cancel();
  RequestOutput o;
  while (a->next(o)) {
  }
  while (b->next(o)) {
  }
  for (int i = 0; i < 1000 && e.stats().queued > 0; ++i)  // after the 1 s batch wait
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(e.stats().queued, 0) << "cancelled before running, they leave the queue";
  EXPECT_NO_THROW(run_to_completion(e, greedy("Once", 4)));
}

// One client request's prompts are queued together: all or none against the queue limit, and
// admitted in the same step however the submitting thread is scheduled (TF Serving's batched
// Predict rows run side by side; a flaky test saw four rows run one after another under load).
TEST_F(EngineTest, SubmitAllQueuesEveryRequestTogetherOrNone) {
  EngineConfig c = config(64, true);
  c.max_queued_requests = 3;
  c.scheduler.max_num_seqs = 2;
  Engine e(*model_, tok_, {2}, c);
  std::vector<GenerationRequest> four(4, greedy("Once", 6));
  try {
    e.submit_all(four);
    FAIL() << "four requests past a queue of three must be refused";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kUnavailable);
  }
  EXPECT_EQ(e.stats().queued, 0) << "none of them may stay queued";
  std::vector<GenerationRequest> bad(2, greedy("Once", 6));
  bad[1].prompt.push_back(9999);
  EXPECT_THROW(e.submit_all(bad), Error);
  EXPECT_EQ(e.stats().queued, 0) << "a request that can never run queues none of its siblings";
  std::vector<GenerationRequest> three(3, greedy("Once", 6));
  auto streams = e.submit_all(three);
  ASSERT_EQ(streams.size(), 3u);
  for (auto& s : streams) {
    RequestOutput o;
    while (s->next(o)) {
    }
  }
  // Three sequences, two a step: steps ran two at once (booked before the last step ends; the
  // last step's own counts may not be yet when the streams end).
  EXPECT_GT(e.stats().batch_size_steps[1], 0) << "steps with two sequences";
}

TEST_F(EngineTest, NSequencesShareThePromptAndFollowTheirSeeds) {
  GenerationRequest r =
      greedy("Once upon a time there was a very small cat who lived in a big house", 20);
  r.params.temperature = 1.0f;
  r.params.seed = 7;
  r.params.n = 3;
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  ASSERT_NE(prompt % 16, 0) << "the prompt must end in a partial block (copied on fork)";
  std::vector<CompletedSequence> outs;
  for (bool prefix : {false, true}) {
    Engine e(*model_, tok_, {2}, config(128, prefix));
    const auto got = run_to_completion(e, r);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_NE(got[0].tokens, got[1].tokens);
    // The prompt is computed once (the other samples fork its blocks), with or without the
    // prefix cache; then each sequence computes its own tokens but the last. (The counters of
    // the last step land just after its outputs.)
    for (int i = 0; i < 200 && e.stats().requests_finished < 1; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(e.stats().batched_tokens, prompt + 3 * 19) << "prefix caching " << prefix;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i].tokens.size(), 20u);
    if (outs.empty()) {
      outs = got;
    } else {
      for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i].tokens, outs[i].tokens) << i;
    }
    const auto again = run_to_completion(e, r);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(again[i].tokens, outs[i].tokens);
    for (int i = 0; i < 100 && e.stats().kv_blocks_used > 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(e.stats().kv_blocks_used, 0);
  }
  // Each sample equals the same request with n = 1 and that sample's stream: run sequence k
  // alone is not expressible, but sequence 0 is the n = 1 request itself.
  GenerationRequest one = r;
  one.params.n = 1;
  Engine e(*model_, tok_, {2}, config(128, false));
  EXPECT_EQ(run_to_completion(e, one)[0].tokens, outs[0].tokens);
}

// The samples of n > 1 fork from the first one's prompt and share all of its blocks: a prompt
// that ends inside a block costs one copy of that block per sample but the last (which writes
// into it in place); one that ends on a block boundary costs none.
TEST_F(EngineTest, NSequencesCopyOnlyThePartialBlockTheyShare) {
  const Ids long_prompt =
      tok_->encode(PREAMBLE "Once upon a time there was a very small cat who lived", true);
  ASSERT_GE(long_prompt.size(), 33u);
  for (const size_t prompt_len : {size_t{21}, size_t{32}}) {
    GenerationRequest r = greedy("", 12);
    r.prompt.assign(long_prompt.begin(), long_prompt.begin() + prompt_len);
    r.params.temperature = 1.0f;
    r.params.seed = 3;
    r.params.n = 4;
    Engine e(*model_, tok_, {2}, config(64, true));
    const auto got = run_to_completion(e, r);
    for (const auto& s : got) EXPECT_EQ(s.tokens.size(), 12u);
    wait_until([&] { return e.stats().requests_finished >= 1; });
    const EngineStats st = e.stats();
    EXPECT_EQ(st.kv_block_copies, prompt_len % 16 == 0 ? 0 : 3) << "prompt of " << prompt_len;
    EXPECT_EQ(st.batched_tokens, static_cast<int64_t>(prompt_len) + 4 * 11);
    EXPECT_EQ(st.kv_blocks_used, 0);
  }
}

// Static batching with padding: a request cancelled before its first sample leaves at once,
// its never-started samples included (they hold no row to pad).
TEST_F(EngineTest, ACancelledRequestLeavesAPaddedStaticBatch) {
  EngineConfig c = config(64, true);
  c.scheduler.static_batching = true;
  c.scheduler.pad_finished = true;
  c.batch_timeout_micros = 300'000;  // the cancel lands before the first step
  Engine e(*model_, tok_, {2}, c);
  GenerationRequest r = greedy("Once upon a time", 8);
  r.params.n = 3;
  auto stream = e.submit(r);
  stream->cancel();
  RequestOutput o;
  int done = 0;
  while (stream->next(o)) done += o.finish == FinishReason::kAbort;
  EXPECT_EQ(done, 3);
  wait_until([&] { return e.stats().requests_finished >= 1; });
  EXPECT_EQ(e.stats().requests_finished, 1);
  EXPECT_EQ(e.stats().running, 0);
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
  EXPECT_EQ(run_to_completion(e, greedy("Once upon a time", 4))[0].tokens.size(), 4u);
}

TEST_F(EngineTest, BeamSearchInTheEngineEqualsTheStandaloneSearch) {
  GenerationRequest r = greedy(PREAMBLE "Once upon a time", 24);
  r.params.ignore_eos = false;
  r.params.num_beams = 4;
  r.params.num_return_sequences = 3;
  r.params.length_penalty = 0.8f;
  ThreadPool pool(2);
  KvCache kv(model_->config(),
             beam_search_blocks(static_cast<int64_t>(r.prompt.size()), r.params, 16), 16);
  const auto expected = beam_search(*model_, kv, pool, r.prompt, r.params, Ids{2});
  ASSERT_EQ(expected.size(), 3u);
  // Alone, beside other requests, and with memory so tight that beams get preempted.
  for (int64_t blocks : {int64_t{256}, int64_t{20}}) {
    EngineConfig c = config(blocks, true);
    // All six requests start in the same step, so that what runs beside the beams (and whether
    // they are preempted) does not depend on how fast the machine is: the idle engine waits for
    // a first batch of max_num_seqs requests (the timeout is far longer than the test).
    c.batch_timeout_micros = 600'000'000;
    c.scheduler.max_num_seqs = 6;
    Engine e(*model_, tok_, {2}, c);
    std::vector<std::shared_ptr<RequestStream>> others;
    for (const char* p : kPrompts) others.push_back(e.submit(greedy(p, 40)));
    const auto got = run_to_completion(e, r);
    ASSERT_EQ(got.size(), 3u) << blocks;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(got[i].tokens, expected[i].tokens) << "blocks " << blocks << ", hypothesis " << i;
      EXPECT_NEAR(got[i].cumulative_logprob, expected[i].sum_logprob, 1e-3);
    }
    RequestOutput o;
    for (auto& s : others) {
      while (s->next(o)) {
      }
    }
    for (int i = 0; i < 200 && e.stats().kv_blocks_used > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(e.stats().kv_blocks_used, 0) << "beams released every block";
    // A new beam shares its parent's blocks; a parent's partial last block is copied only for
    // its second and later children (a copy per beam and step would be about 4 * 24).
    EXPECT_GT(e.stats().kv_block_copies, 0);
    EXPECT_LE(e.stats().kv_block_copies, (r.params.num_beams - 1) * r.params.max_tokens);
    if (blocks == 20) {
      EXPECT_GT(e.stats().preemptions, 0) << "the tight setup must preempt (beams included)";
    }
  }
}

TEST_F(EngineTest, BatchTimeoutGathersAFirstBatch) {
  EngineConfig c = config(64, true);
  c.batch_timeout_micros = 60'000'000;  // far longer than the test: the batch fills first
  c.scheduler.max_num_seqs = 3;
  Engine e(*model_, tok_, {2}, c);
  auto first = e.submit(greedy("Once upon a time", 4));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto second = e.submit(greedy("The little dog ran", 4));
  auto third = e.submit(greedy("One day, a bird", 4));
  const auto submitted_last = Clock::now();
  RequestOutput o;
  while (first->next(o)) {
  }
  while (second->next(o)) {
  }
  while (third->next(o)) {
  }
  // The first request waited for the batch to fill (3 = max_num_seqs), not for the timeout: it
  // ran once the third came, and long before the 60 s timeout (however slow the machine; a
  // scheduler that waited for the timeout would take the whole minute).
  EXPECT_GE(first->timings().first_scheduled, submitted_last - std::chrono::milliseconds(5));
  EXPECT_LT(first->timings().first_scheduled - first->timings().arrival, std::chrono::seconds(30));
}

}  // namespace
}  // namespace tf
