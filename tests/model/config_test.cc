#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "model/model_config.h"

namespace tf {
namespace {

std::string error_of(const std::string& json) {
  try {
    parse_hf_config(json, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const char* kLlama =
    R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,
  "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":100,
  "max_position_embeddings":256,"rms_norm_eps":1e-6,"rope_theta":500000.0,"bos_token_id":1,
  "eos_token_id":[2,3],"tie_word_embeddings":false})";

TEST(HfConfig, ParsesLlama) {
  ModelConfig c = parse_hf_config(kLlama, "config.json");
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.max_seq_len, 256);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-6f);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.kind, RopeParams::Kind::kDefault);
  EXPECT_EQ(c.eos_id, 2) << "the first of a list of EOS ids";
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.rope_style, kernels::RopeStyle::kHalf);
}

TEST(HfConfig, ParsesGpt2AndQwen2) {
  ModelConfig g = parse_hf_config(R"({"architectures":["GPT2LMHeadModel"],"n_embd":72,"n_layer":3,
    "n_head":6,"n_positions":128,"vocab_size":1000,"n_inner":null})",
                                  "config.json");
  EXPECT_EQ(g.arch, Arch::kGpt2);
  EXPECT_EQ(g.ffn_dim, 288);
  EXPECT_EQ(g.head_dim, 12);
  EXPECT_TRUE(g.tied_embeddings);
  ModelConfig q = parse_hf_config(R"({"architectures":["Qwen2ForCausalLM"],"hidden_size":64,
    "intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,
    "vocab_size":50,"tie_word_embeddings":true,"sliding_window":4096,"use_sliding_window":false})",
                                  "config.json");
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_TRUE(q.tied_embeddings);
  EXPECT_EQ(q.max_seq_len, 2048);
}

TEST(HfConfig, RejectsBadConfigsByName) {
  EXPECT_NE(error_of("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[]").find("JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"architectures":["BertModel"]})").find("unknown architecture 'BertModel'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"architectures":["LlamaForCausalLM"]})").find("'vocab_size'"),
            std::string::npos);
  std::string s = kLlama;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = s;
    t.replace(t.find(from), from.size(), to);
    return error_of(t);
  };
  EXPECT_NE(
      with("\"hidden_size\":64", "\"hidden_size\":\"64\"").find("'hidden_size' must be an integer"),
      std::string::npos);
  EXPECT_NE(with("\"num_key_value_heads\":2", "\"num_key_value_heads\":3").find("not a multiple"),
            std::string::npos);
  EXPECT_NE(with("\"hidden_size\":64", "\"hidden_size\":-64").find("hidden size"),
            std::string::npos);
  EXPECT_NE(with("\"rope_theta\":500000.0", "\"rope_theta\":0").find("rope_theta"),
            std::string::npos);
  EXPECT_NE(with("\"bos_token_id\":1", "\"bos_token_id\":100").find("bos_token_id"),
            std::string::npos);
  EXPECT_NE(with("\"rms_norm_eps\":1e-6", "\"rms_norm_eps\":-1").find("epsilon"),
            std::string::npos);
  EXPECT_NE(
      with("\"tie_word_embeddings\":false", "\"tie_word_embeddings\":\"no\"").find("true or false"),
      std::string::npos);
  EXPECT_NE(with("\"rope_theta\":500000.0",
                 "\"rope_theta\":500000.0,\"rope_scaling\":{\"type\":\"yarn\"}")
                .find("needs a positive factor"),
            std::string::npos);
  // An unknown kind is refused by name, never computed as the default.
  EXPECT_NE(with("\"rope_theta\":500000.0",
                 "\"rope_theta\":500000.0,\"rope_scaling\":{\"rope_type\":\"mrope\"}")
                .find("rope scaling type 'mrope' is not supported"),
            std::string::npos);
  EXPECT_NE(with("\"rope_theta\":500000.0",
                 "\"rope_theta\":500000.0,\"rope_scaling\":{\"rope_type\":\"llama3\","
                 "\"factor\":8}")
                .find("original_max_position_embeddings"),
            std::string::npos);
  EXPECT_NE(with("\"rope_theta\":500000.0",
                 "\"rope_theta\":500000.0,\"rope_scaling\":{\"rope_type\":\"longrope\","
                 "\"short_factor\":[1,1],\"long_factor\":[1,1]}")
                .find("8 values"),
            std::string::npos);
  EXPECT_NE(
      with("\"rope_theta\":500000.0", "\"rope_theta\":500000.0,\"partial_rotary_factor\":0.3125")
          .find("must be even"),
      std::string::npos);
  EXPECT_NE(with("\"rope_theta\":500000.0", "\"rope_theta\":500000.0,\"hidden_act\":\"gelu\"")
                .find("hidden_act"),
            std::string::npos);
}

TEST(ModelConfig, RopeScalingInEveryConfigForm) {
  std::string s = kLlama;
  auto with = [&](const std::string& extra) {
    std::string t = s;
    const std::string from = "\"rope_theta\":500000.0";
    t.replace(t.find(from), from.size(), extra);
    return parse_hf_config(t, "config.json");
  };
  // transformers v4: rope_theta and rope_scaling at the top.
  ModelConfig c = with(
      "\"rope_theta\":500000.0,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
      "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
      "\"original_max_position_embeddings\":64}");
  EXPECT_EQ(c.rope.kind, RopeParams::Kind::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.original_max_pos, 64);
  // v5: everything inside rope_parameters, rope_theta included (not the default 10000).
  c = with(
      "\"rope_parameters\":{\"rope_type\":\"yarn\",\"rope_theta\":1000000.0,\"factor\":4.0,"
      "\"original_max_position_embeddings\":32}");
  EXPECT_EQ(c.rope.kind, RopeParams::Kind::kYarn);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1000000.0);
  EXPECT_EQ(c.rope.original_max_pos, 32);
  c = with("\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":250000.0}");
  EXPECT_EQ(c.rope.kind, RopeParams::Kind::kDefault);
  EXPECT_DOUBLE_EQ(c.rope.theta, 250000.0);
  // Phi-3's longrope: the pretrained context at the top, the factor their ratio; "su" its old name.
  c = with(
      "\"rope_theta\":10000.0,\"original_max_position_embeddings\":64,\"rope_scaling\":{"
      "\"type\":\"su\",\"short_factor\":[1,1,1,1,1,1,1,1],"
      "\"long_factor\":[1,2,3,4,5,6,7,8]}");
  EXPECT_EQ(c.rope.kind, RopeParams::Kind::kLongRope);
  EXPECT_DOUBLE_EQ(c.rope.factor, 256.0 / 64.0);
  // Partial rotary: a quarter of 16 dimensions.
  c = with("\"rope_theta\":10000.0,\"partial_rotary_factor\":0.25");
  EXPECT_EQ(c.rope.rot_dim, 4);
}

TEST(ModelConfig, Qwen3HasPerHeadQkNormAndNoBias) {
  std::string s = kLlama;
  s.replace(s.find("LlamaForCausalLM"), 16, "Qwen3ForCausalLM");
  const ModelConfig c = parse_hf_config(s, "config.json");
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
}

TEST(ModelConfig, GemmaAndSlidingWindowLayers) {
  std::string g3 = kLlama;
  g3.replace(g3.find("LlamaForCausalLM"), 16, "Gemma3ForCausalLM");
  g3.replace(g3.find("\"num_hidden_layers\":2"), 21,
             "\"num_hidden_layers\":4,\"sliding_window\":16,\"sliding_window_pattern\":2,"
             "\"query_pre_attn_scalar\":32,\"rope_local_base_freq\":10000.0");
  ModelConfig c = parse_hf_config(g3, "config.json");
  EXPECT_TRUE(c.norm_plus_one && c.post_norms && c.qk_norm && c.has_local_rope);
  EXPECT_EQ(c.act, ModelConfig::Act::kGeluTanh);
  EXPECT_FLOAT_EQ(c.attn_scale, 1.0f / std::sqrt(32.0f));
  EXPECT_FLOAT_EQ(c.embed_scale, 8.0f);
  EXPECT_EQ(c.sliding_window, 16);
  // Pattern 2: layers 0 and 2 local, 1 and 3 global.
  EXPECT_TRUE(c.is_sliding(0) && !c.is_sliding(1) && c.is_sliding(2) && !c.is_sliding(3));
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.local_rope.theta, 10000.0);
  // layer_types overrides the pattern; a wrong one is an error.
  std::string typed = g3;
  typed.replace(typed.find("\"sliding_window_pattern\":2"), 26,
                "\"layer_types\":[\"full_attention\",\"sliding_attention\",\"full_attention\","
                "\"full_attention\"]");
  c = parse_hf_config(typed, "config.json");
  EXPECT_TRUE(!c.is_sliding(0) && c.is_sliding(1) && !c.is_sliding(2));
  std::string bad = typed;
  bad.replace(bad.find("\"sliding_attention\""), 19, "\"chunked_attention\"");
  EXPECT_NE(error_of(bad).find("layer_types[1]"), std::string::npos);
  // Mistral: a real window on every layer, the context left as it is.
  std::string m = kLlama;
  m.replace(m.find("LlamaForCausalLM"), 16, "MistralForCausalLM");
  m.replace(m.find("\"rms_norm_eps\""), 14, "\"sliding_window\":32,\"rms_norm_eps\"");
  c = parse_hf_config(m, "config.json");
  EXPECT_EQ(c.max_seq_len, 256);
  EXPECT_TRUE(c.is_sliding(0) && c.is_sliding(1));
}

TEST(ModelConfig, Phi3FusesProjections) {
  std::string s = kLlama;
  s.replace(s.find("LlamaForCausalLM"), 16, "Phi3ForCausalLM");
  EXPECT_TRUE(parse_hf_config(s, "config.json").fused_qkv);
}

TEST(ModelConfig, OlmoeNormsWholeProjectionsAndRoutesWithoutRenormalizing) {
  std::string s = kLlama;
  s.replace(s.find("LlamaForCausalLM"), 16, "OlmoeForCausalLM");
  s.replace(s.find("\"rms_norm_eps\""), 14,
            "\"num_experts\":8,\"num_experts_per_tok\":2,\"clip_qkv\":null,\"rms_norm_eps\"");
  const ModelConfig c = parse_hf_config(s, "config.json");
  EXPECT_TRUE(c.qk_norm && c.qk_norm_full);
  EXPECT_EQ(c.n_experts, 8);
  EXPECT_EQ(c.n_experts_used, 2);
  EXPECT_EQ(c.expert_ffn_dim, 128);  // intermediate_size is each expert's
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_TRUE(c.is_moe(0) && c.is_moe(1));
  // clip_qkv would clamp q, k, v: refused by name rather than ignored.
  std::string clip = s;
  clip.replace(clip.find("\"clip_qkv\":null"), 15, "\"clip_qkv\":8.0");
  EXPECT_NE(error_of(clip).find("clip_qkv"), std::string::npos);
  std::string over = s;
  over.replace(over.find("\"num_experts_per_tok\":2"), 23, "\"num_experts_per_tok\":9");
  EXPECT_NE(error_of(over).find("experts per token"), std::string::npos);
}

}  // namespace
}  // namespace tf
