// LoRA adapters in the engine (issue 54): sequences of different adapters (and none) in one
// batch each follow their own adapter, under prefix caching and preemption, and blocks of one
// adapter never serve another.

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "engine/engine_fixture.h"
#include "model/lora.h"
#include "model/safetensors.h"

namespace tf {
namespace {

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

}  // namespace
}  // namespace tf
