#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "model/cache_layout.h"
#include "model/kv_cache.h"
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
  EXPECT_NE(error_of(R"({"architectures":["BertLMHeadModel"]})")
                .find("unknown architecture 'BertLMHeadModel'"),
            std::string::npos);
  // An encoder's config needs its sizes, and only the exact GELU.
  EXPECT_NE(error_of(R"({"architectures":["BertModel"]})").find("'vocab_size'"), std::string::npos);
  EXPECT_NE(error_of(R"({"architectures":["BertModel"],"vocab_size":10,"hidden_size":8,
      "num_hidden_layers":1,"num_attention_heads":3,"intermediate_size":8})")
                .find("not a multiple of num_attention_heads"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"architectures":["BertModel"],"vocab_size":10,"hidden_size":8,
      "num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":8,"hidden_act":"relu"})")
                .find("hidden_act 'relu' is not supported"),
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

TEST(ModelConfig, NomicBertRotaryEncoder) {
  const std::string nomic = R"({"architectures":["NomicBertModel"],"model_type":"nomic_bert",
    "vocab_size":100,"n_embd":64,"n_layer":2,"n_head":4,"n_inner":96,"n_positions":8192,
    "max_trained_positions":2048,"type_vocab_size":2,"layer_norm_epsilon":1e-12,
    "activation_function":"swiglu","prenorm":false,"causal":false,"rotary_emb_fraction":1.0,
    "rotary_emb_base":1000,"rotary_emb_interleaved":false,"rotary_emb_scale_base":null,
    "rotary_scaling_factor":null,"matryoshka_dimensions":[16,32]})";
  ModelConfig c = parse_hf_config(nomic, "config.json");
  EXPECT_TRUE(c.encoder_only());
  EXPECT_EQ(c.encoder_kind, ModelConfig::EncoderKind::kNomic);
  EXPECT_TRUE(c.gated_ffn);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope.theta, 1000.0);
  EXPECT_EQ(c.rope.rot_dim, 16);
  EXPECT_EQ(c.rope.kind, RopeParams::Kind::kDefault);
  EXPECT_EQ(c.max_seq_len, 8192);
  EXPECT_EQ(c.matryoshka_dims, (std::vector<int64_t>{16, 32}));
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = nomic;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  c = parse_hf_config(with("\"rotary_scaling_factor\":null", "\"rotary_scaling_factor\":2"),
                      "config.json");
  EXPECT_EQ(c.rope.kind, RopeParams::Kind::kDynamic);
  EXPECT_EQ(c.rope.original_max_pos, 2048);
  c = parse_hf_config(with("\"rotary_emb_fraction\":1.0", "\"rotary_emb_fraction\":0.5"),
                      "config.json");
  EXPECT_EQ(c.rope.rot_dim, 8);
  for (const auto& [from, to, message] :
       {std::tuple{"\"prenorm\":false", "\"prenorm\":true", "prenorm NomicBERT"},
        std::tuple{"\"activation_function\":\"swiglu\"", "\"activation_function\":\"geglu\"",
                   "activation_function 'geglu'"},
        std::tuple{"\"rotary_emb_fraction\":1.0", "\"rotary_emb_fraction\":0.0",
                   "rotary_emb_fraction 0"},
        std::tuple{"\"rotary_emb_scale_base\":null", "\"rotary_emb_scale_base\":512", "xPos"},
        std::tuple{"[16,32]", "[16,65]", "matryoshka_dimensions must hold sizes from 1 to"}}) {
    const std::string e = error_of(with(from, to));
    EXPECT_NE(e.find(message), std::string::npos) << e;
  }
}

TEST(ModelConfig, JinaBertAlibiGeglu) {
  const std::string jina = R"({"architectures":["JinaBertForMaskedLM"],"model_type":"bert",
    "vocab_size":100,"hidden_size":48,"num_hidden_layers":2,"num_attention_heads":6,
    "intermediate_size":64,"max_position_embeddings":8192,"type_vocab_size":2,
    "hidden_act":"gelu","position_embedding_type":"alibi","feed_forward_type":"geglu"})";
  const ModelConfig c = parse_hf_config(jina, "config.json");
  EXPECT_EQ(c.encoder_kind, ModelConfig::EncoderKind::kJina);
  EXPECT_TRUE(c.gated_ffn);
  EXPECT_EQ(c.max_seq_len, 8192);
  std::string t = jina;
  t.replace(t.find("\"geglu\""), 7, "\"glu\"");
  EXPECT_NE(error_of(t).find("feed_forward_type 'glu' is not supported"), std::string::npos);
  t = jina;
  t.replace(t.find("\"alibi\""), 7, "\"relative_key\"");
  EXPECT_NE(error_of(t).find("position_embedding_type 'relative_key'"), std::string::npos);
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

// Cache layouts (issue 51): sliding layers beside global ones get groups of their own, of equal
// size, and the KV cache's blocks hold one group's layers.
namespace tf {
namespace {

ModelConfig layered(int64_t n_layers, std::vector<uint8_t> sliding, int64_t window) {
  ModelConfig c;
  c.n_layers = n_layers;
  c.dim = 8;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 4;
  c.sliding_window = window;
  c.layer_sliding = std::move(sliding);
  return c;
}

TEST(KvCacheBytes, Q8KeepsAnF16ScalePerTokenAndHead) {
  // TinyLlama-1.1B's attention: 4 KV heads of 64, 22 layers.
  ModelConfig c = layered(22, {}, 0);
  c.dim = 2048;
  c.n_heads = 32;
  c.n_kv_heads = 4;
  c.head_dim = 64;
  const int64_t q8 = KvCache::bytes_per_block(c, 16, kernels::KvType::kQ8_0);
  EXPECT_EQ(q8, 22 * 16 * (2 * 256 + 2 * 4 * 2));
  const int64_t bf16 = KvCache::bytes_per_block(c, 16, kernels::KvType::kBF16);
  EXPECT_GE(static_cast<double>(bf16) / static_cast<double>(q8), 1.9);
  // Rows and scales of one block stay inside it, and a block's scales inside its span.
  KvCache kv(c, 3, 16, kernels::KvType::kQ8_0);
  const kernels::PagedKvLayer layer = kv.layer(5);
  const int32_t table[] = {2};
  const auto* start = reinterpret_cast<const uint8_t*>(layer.k) + 2 * layer.stride();
  const auto* last_v_scale = reinterpret_cast<const uint8_t*>(layer.v_scales(table, 15) + 3);
  EXPECT_EQ(last_v_scale + 2 - start, q8 / 22);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(layer.v_at<int8_t>(table, 15) + 256),
            start + 2 * 16 * 256);
  EXPECT_THROW(kernels::parse_kv_type("q4_0"), Error);
  EXPECT_EQ(kernels::parse_kv_type("q8_0"), kernels::KvType::kQ8_0);
}

TEST(CacheLayout, AlternatingLayersMakeTwoGroupsOfHalfTheLayers) {
  const ModelConfig c = layered(6, {1, 0, 1, 0, 1, 0}, 512);  // Gemma 2
  const CacheLayout l = CacheLayout::for_model(c);
  ASSERT_EQ(l.num_groups(), 2);
  EXPECT_EQ(l.slots, 3);
  EXPECT_EQ(l.groups[0].kind, CacheKind::kFullAttention);
  EXPECT_EQ(l.groups[0].layers, (std::vector<int32_t>{1, 3, 5}));
  EXPECT_EQ(l.groups[1].kind, CacheKind::kSlidingWindow);
  EXPECT_EQ(l.groups[1].window, 512);
  EXPECT_EQ(l.groups[1].layers, (std::vector<int32_t>{0, 2, 4}));
  for (int32_t layer = 0; layer < 6; ++layer) {
    const auto& g = l.groups[l.group_of_layer[layer]];
    EXPECT_EQ(g.layers[l.slot_of_layer[layer]], layer);
  }
  // A block holds half the layers: twice the blocks in the same memory.
  EXPECT_EQ(KvCache::bytes_per_block(c, l, 16, kernels::KvType::kF32) * 2,
            KvCache::bytes_per_block(c, 16, kernels::KvType::kF32));
  EXPECT_EQ(CacheLayout::for_model(c, /*grouped=*/false).num_groups(), 1);
  EXPECT_EQ(l.describe(), "2 groups of 3 layers: full_attention x1, sliding_window(512) x1");
}

TEST(CacheLayout, FiveToOneMakesSlidingGroupsTheSizeOfTheGlobalOne) {
  // Gemma 3: every sixth layer global; 12 layers, 2 global, 10 sliding in groups of 2.
  std::vector<uint8_t> s(12, 1);
  s[5] = s[11] = 0;
  const CacheLayout l = CacheLayout::for_model(layered(12, s, 1024));
  ASSERT_EQ(l.num_groups(), 6);
  EXPECT_EQ(l.slots, 2);
  EXPECT_EQ(l.groups[0].layers, (std::vector<int32_t>{5, 11}));
  for (int g = 1; g < 6; ++g) EXPECT_EQ(l.groups[g].kind, CacheKind::kSlidingWindow);
  EXPECT_EQ(l.groups[5].layers, (std::vector<int32_t>{9, 10}));
  // 8 layers, 3 global: the last sliding group is partly empty (its unused slot is memory a
  // block carries for nothing).
  std::vector<uint8_t> t(8, 1);
  t[2] = t[5] = t[7] = 0;
  const CacheLayout u = CacheLayout::for_model(layered(8, t, 64));
  ASSERT_EQ(u.num_groups(), 3);
  EXPECT_EQ(u.groups[2].layers.size(), 2u);
  EXPECT_EQ(u.slots, 3);
}

TEST(CacheLayout, OneKindOfLayerIsOneGroup) {
  const CacheLayout all = CacheLayout::for_model(layered(4, {}, 4096));  // Mistral: every layer
  ASSERT_EQ(all.num_groups(), 1);
  EXPECT_EQ(all.groups[0].kind, CacheKind::kSlidingWindow);
  EXPECT_EQ(all.slots, 4);
  // Even unseparated, a model whose layers all slide releases (as before groups existed).
  EXPECT_EQ(CacheLayout::for_model(layered(4, {}, 4096), false).groups[0].kind,
            CacheKind::kSlidingWindow);
  const CacheLayout none = CacheLayout::for_model(layered(4, {}, 0));
  ASSERT_EQ(none.num_groups(), 1);
  EXPECT_EQ(none.groups[0].kind, CacheKind::kFullAttention);
  EXPECT_EQ(none.slot_of_layer, (std::vector<int32_t>{0, 1, 2, 3}));
}

// Qwen3-Next (issue 53): 48 layers, every fourth full attention; 36 Gated DeltaNet layers' states
// in three recurrent groups of 12 beside one attention group of 12, and blocks sized so that an
// attention block holds about a state's bytes.
const char* kQwen3Next =
    R"({"architectures":["Qwen3NextForCausalLM"],"hidden_size":2048,"intermediate_size":5120,
  "num_hidden_layers":48,"num_attention_heads":16,"num_key_value_heads":2,"head_dim":256,
  "vocab_size":151936,"max_position_embeddings":262144,"rms_norm_eps":1e-6,
  "rope_theta":10000000,"partial_rotary_factor":0.25,"full_attention_interval":4,
  "linear_num_key_heads":16,"linear_num_value_heads":32,"linear_key_head_dim":128,
  "linear_value_head_dim":128,"linear_conv_kernel_dim":4,"num_experts":512,
  "num_experts_per_tok":10,"moe_intermediate_size":512,"shared_expert_intermediate_size":512,
  "norm_topk_prob":true,"decoder_sparse_step":1,"mlp_only_layers":[]})";

TEST(ModelConfig, Qwen3NextHybridLayersAndTheirCacheGroups) {
  const ModelConfig c = parse_hf_config(kQwen3Next, "config.json");
  EXPECT_TRUE(c.hybrid());
  EXPECT_TRUE(c.gated_attention && c.norm_plus_one && c.qk_norm && !c.split_linear_proj);
  EXPECT_TRUE(c.is_linear(0) && c.is_linear(2) && !c.is_linear(3) && !c.is_linear(47));
  EXPECT_EQ(c.rope.rot_dim, 64);
  EXPECT_EQ(c.n_experts, 512);
  EXPECT_EQ(c.shared_ffn_dim, 512);
  // conv window 3 x (2 x 2048 + 4096) + 32 heads x 128 x 128
  EXPECT_EQ(c.ssm_state_floats(), 3 * 8192 + 32 * 128 * 128);
  const CacheLayout l = CacheLayout::for_model(c);
  ASSERT_EQ(l.num_groups(), 4);
  EXPECT_EQ(l.slots, 12);
  EXPECT_EQ(l.groups[0].kind, CacheKind::kFullAttention);
  EXPECT_EQ(l.groups[0].layers.front(), 3);
  for (int g = 1; g < 4; ++g) EXPECT_EQ(l.groups[g].kind, CacheKind::kRecurrent);
  // Never one group, even unseparated: a state and K/V cannot share a group.
  EXPECT_EQ(CacheLayout::for_model(c, false).num_groups(), 4);
  EXPECT_EQ(CacheLayout::single(c).num_groups(), 4);
  // bf16 K/V: 2 x 512 x 2 bytes a token; a state of 2.2 MB takes 1,072 tokens, rounded up to 16.
  const int bs = KvCache::block_size_for(c, l, 16, kernels::KvType::kBF16);
  EXPECT_EQ(bs, 1072);
  EXPECT_GE(static_cast<int64_t>(bs) * 2 * 512 * 2, c.ssm_state_floats() * 4);
  // Attention alone keeps its 16.
  EXPECT_EQ(KvCache::block_size_for(layered(4, {}, 0), CacheLayout::for_model(layered(4, {}, 0)),
                                    16, kernels::KvType::kBF16),
            16);
  // Qwen3.5: the DeltaNet's projections apart, dense MLPs.
  std::string q35 = kQwen3Next;
  q35.replace(q35.find("Qwen3NextForCausalLM"), 20, "Qwen3_5ForCausalLM");
  q35.replace(q35.find("\"num_experts\":512"), 17, "\"num_experts\":0");
  const ModelConfig d = parse_hf_config(q35, "config.json");
  EXPECT_TRUE(d.split_linear_proj);
  EXPECT_EQ(d.n_experts, 0);
  EXPECT_EQ(d.text_model_prefix, "");
  // The multimodal release: text_config is the text model, its tensors model.language_model.*;
  // the wrapper's keys reach it where text_config lacks them.
  EXPECT_FALSE(d.tied_embeddings);
  const std::string wrapper =
      R"({"architectures":["Qwen3_5ForConditionalGeneration"],"model_type":"qwen3_5",)"
      R"("vision_config":{"depth":27},"rms_norm_eps":0.5,"tie_word_embeddings":true,)"
      R"("text_config":)" +
      q35 + "}";
  const ModelConfig w = parse_hf_config(wrapper, "config.json");
  EXPECT_EQ(w.architecture, "Qwen3_5ForCausalLM");
  EXPECT_EQ(w.text_model_prefix, "model.language_model.");
  EXPECT_EQ(w.n_layers, d.n_layers);
  EXPECT_TRUE(w.tied_embeddings);
  EXPECT_EQ(w.norm_eps, d.norm_eps);  // text_config's own value wins
  EXPECT_NE(
      error_of(R"({"architectures":["Qwen3_5ForConditionalGeneration"]})").find("text_config"),
      std::string::npos);
}

TEST(ModelConfig, Qwen3NextRefusesBadLinearFieldsByName) {
  std::string bad = kQwen3Next;
  bad.replace(bad.find("\"linear_num_value_heads\":32"), 27, "\"linear_num_value_heads\":24");
  EXPECT_NE(error_of(bad).find("not a multiple of linear_num_key_heads"), std::string::npos)
      << error_of(bad);
  std::string types = kQwen3Next;
  types.replace(types.find("\"full_attention_interval\":4"), 27,
                "\"layer_types\":[\"linear_attention\",\"mamba\"]");
  EXPECT_NE(error_of(types).find("layer_types"), std::string::npos) << error_of(types);
  std::string missing = kQwen3Next;
  missing.replace(missing.find("\"linear_key_head_dim\":128,"), 26, "");
  EXPECT_NE(error_of(missing).find("linear_key_head_dim"), std::string::npos) << error_of(missing);
}

}  // namespace
TEST(ModelConfig, CodeGenGptJAndNeoXParallelBlocks) {
  const std::string codegen = R"({"architectures":["CodeGenForCausalLM"],"model_type":"codegen",
    "vocab_size":51200,"n_embd":2560,"n_layer":32,"n_head":32,"n_positions":2048,"n_ctx":2048,
    "rotary_dim":64,"n_inner":null,"activation_function":"gelu_new","layer_norm_epsilon":1e-5,
    "tie_word_embeddings":false,"bos_token_id":1,"eos_token_id":50256})";
  ModelConfig c = parse_hf_config(codegen, "config.json");  // codegen-2b's shapes
  EXPECT_EQ(c.arch, Arch::kGptJ);
  EXPECT_EQ(c.qkv_layout, ModelConfig::QkvLayout::kCodeGen);
  EXPECT_EQ(c.qkv_shards, 4);
  EXPECT_EQ(c.ffn_dim, 4 * 2560);
  EXPECT_EQ(c.head_dim, 80);
  EXPECT_EQ(c.rope.rot_dim, 64);
  EXPECT_EQ(c.rope_style, kernels::RopeStyle::kInterleaved);
  EXPECT_TRUE(c.parallel_residual && !c.two_norms && c.lm_head_bias);
  EXPECT_EQ(c.act, ModelConfig::Act::kGeluTanh);
  auto with = [](std::string t, const std::string& from, const std::string& to) {
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  // CodeGen's heads come in 4 shards; an odd rotary width or a GELU it lacks are refused.
  EXPECT_NE(error_of(with(codegen, "\"n_head\":32", "\"n_head\":30")).find("hidden size 2560"),
            std::string::npos);
  EXPECT_NE(error_of(with(with(codegen, "\"n_head\":32", "\"n_head\":6"), "\"n_embd\":2560",
                          "\"n_embd\":384"))
                .find("qkv shards"),
            std::string::npos);
  EXPECT_NE(error_of(with(codegen, "\"rotary_dim\":64", "\"rotary_dim\":63")).find("must be even"),
            std::string::npos);
  EXPECT_NE(error_of(with(codegen, "gelu_new", "swish")).find("activation 'swish'"),
            std::string::npos);
  c = parse_hf_config(
      with(with(codegen, "CodeGenForCausalLM", "GPTJForCausalLM"), "codegen", "gptj"),
      "config.json");
  EXPECT_EQ(c.qkv_layout, ModelConfig::QkvLayout::kSeparate);

  const std::string neox = R"({"architectures":["GPTNeoXForCausalLM"],"model_type":"gpt_neox",
    "vocab_size":50304,"hidden_size":512,"num_hidden_layers":6,"num_attention_heads":8,
    "intermediate_size":2048,"max_position_embeddings":2048,"rotary_pct":0.25,
    "rotary_emb_base":10000,"layer_norm_eps":1e-5,"use_parallel_residual":true,
    "hidden_act":"gelu","tie_word_embeddings":false})";
  c = parse_hf_config(neox, "config.json");  // pythia-70m's shapes
  EXPECT_EQ(c.qkv_layout, ModelConfig::QkvLayout::kPerHead);
  EXPECT_EQ(c.rope.rot_dim, 16);
  EXPECT_EQ(c.rope_style, kernels::RopeStyle::kHalf);
  EXPECT_TRUE(c.parallel_residual && c.two_norms && c.qkv_bias && c.o_bias && !c.lm_head_bias);
  EXPECT_EQ(c.act, ModelConfig::Act::kGeluErf);
  c = parse_hf_config(
      with(with(neox, "\"use_parallel_residual\":true", "\"use_parallel_residual\":false"),
           "\"rotary_emb_base\":10000", "\"rotary_emb_base\":500"),
      "config.json");
  EXPECT_FALSE(c.parallel_residual);
  EXPECT_EQ(c.rope.theta, 500.0);
}

}  // namespace tf
