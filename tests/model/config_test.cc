#include <gtest/gtest.h>

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
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
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
                .find("rope_scaling"),
            std::string::npos);
  EXPECT_NE(with("\"rope_theta\":500000.0", "\"rope_theta\":500000.0,\"hidden_act\":\"gelu\"")
                .find("hidden_act"),
            std::string::npos);
}

}  // namespace
}  // namespace tf
