// The generate signature's pure parts: generate()'s settings read from generation_config.json, a
// model config's generate_signature and a request (in that order of precedence), rows read from
// padded inputs, generate()'s rules for a row's engine parameters, and the padded answer.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "serving/core/api_common.h"
#include "serving/core/completion_request.h"
#include "serving/models/server_config.h"
#include "serving/tfserving/generate_signature.h"
#include "serving/tfserving/predict_request.h"

namespace tf {
namespace {

using json = nlohmann::json;

TEST(GenerateSignature, SettingsFromAFileAConfigAndARequestInThatOrder) {
  const auto dir = std::filesystem::temp_directory_path() / "tf_generate_signature_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "generation_config.json")
      << R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9, "max_length": 4096,
            "eos_token_id": [128001, 128009], "pad_token_id": null, "bos_token_id": 128000,
            "suppress_tokens": [3], "transformers_version": "4.44.0"})";
  GenerateSignature sig = load_generate_signature((dir / "model.gguf").string());
  std::filesystem::remove_all(dir);
  EXPECT_EQ(sig.settings.do_sample, true);
  EXPECT_FLOAT_EQ(*sig.settings.temperature, 0.6f);
  EXPECT_EQ(sig.settings.max_length, 4096);
  EXPECT_EQ(*sig.settings.eos_token_id, (std::vector<int32_t>{128001, 128009}));
  EXPECT_FALSE(sig.settings.pad_token_id);  // null: unset
  EXPECT_EQ(sig.not_applied, std::vector<std::string>{"suppress_tokens"});

  const auto config = parse_model_server_config(
      "model_config_list { config { name: 'm' base_path: '/m' generate_signature {"
      " signature_name: 'generate' max_new_tokens: 7 temperature: 0.25 seed: 9 } } }",
      "t.config");
  apply_signature_config(sig, config.model_config_list().config(0).generate_signature());
  EXPECT_EQ(sig.name, "generate");
  EXPECT_EQ(sig.output, "output_0");
  EXPECT_EQ(sig.settings.max_new_tokens, 7);
  EXPECT_FLOAT_EQ(*sig.settings.temperature, 0.25f);
  EXPECT_FLOAT_EQ(*sig.settings.top_p, 0.9f);  // the file's, not overridden
  EXPECT_EQ(sig.settings.seed, 9u);

  GenerateSettings s = sig.settings;
  s.merge(read_generate_settings(json{{"temperature", json::array({1.5})}, {"top_k", 3}}, "input",
                                 true));
  EXPECT_FLOAT_EQ(*s.temperature, 1.5f);  // a [1] tensor is the scalar
  EXPECT_EQ(s.top_k, 3);
  EXPECT_EQ(s.max_new_tokens, 7);
}

TEST(GenerateSignature, ConfigValidationNamesTheModel) {
  for (const char* bad : {"generate_signature { signature_name: 'tokenflow' }",
                          "generate_signature { early_stopping: true eos_token_id: -4 }"}) {
    const std::string text =
        std::string("model_config_list { config { name: 'gpt' base_path: '/m' ") + bad + " } }";
    try {
      parse_model_server_config(text, "t.config");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'gpt'"), std::string::npos) << e.what();
    }
  }
}

TEST(GenerateSignature, RowsFromPaddedInputs) {
  const GenerateInput in =
      read_generate_columns(json{{"input_ids", {{0, 0, 5, 6}, {7, 8, 9, 0}}},
                                 {"attention_mask", {{0, 0, 1, 1}, {1, 1, 1, 0}}}});
  ASSERT_EQ(in.rows.size(), 2u);
  EXPECT_EQ(in.rows[0].lead, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(in.rows[0].ids, (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(in.rows[1].lead.empty());
  EXPECT_EQ(in.rows[1].ids, (std::vector<int32_t>{7, 8, 9}));  // right padding dropped
  // The answer: lead, ids, new tokens, padded to the longest row.
  const auto out = generate_output(in.rows, {{{1}}, {{2, 3, 4}}}, -1);
  EXPECT_EQ(out, (std::vector<std::vector<int32_t>>{{0, 0, 5, 6, 1, -1}, {7, 8, 9, 2, 3, 4}}));
  EXPECT_THROW(read_generate_columns(json{{"input_ids", {{1, 2}}}, {"attention_mask", {{1}}}}),
               HttpError);
}

TEST(GenerateSignature, RowParamsFollowGenerate) {
  GenerateRow row{{0}, {5, 6}};
  GenerateSettings s;
  GenerateRowParams p = generate_row_params(s, row, 0, {2}, 64);
  EXPECT_EQ(p.params.max_tokens, 20 - 3);  // max_length 20 counts the padded positions
  EXPECT_TRUE(p.params.greedy());
  s.do_sample = true;
  s.num_return_sequences = 3;
  s.eos_token_id = std::vector<int32_t>{9};
  p = generate_row_params(s, row, 0, {2}, 64);
  EXPECT_EQ(p.params.top_k, 50);  // GenerationConfig's default when sampling
  EXPECT_EQ(p.params.n, 3);
  EXPECT_EQ(p.sequences, 3);
  EXPECT_TRUE(p.params.ignore_eos);  // its own end-of-sequence id instead of the model's
  EXPECT_EQ(p.params.stop_token_ids, std::vector<int32_t>{9});
  EXPECT_EQ(generate_pad_id(s, {2}), 9);
  s.max_new_tokens = 60;  // 2 prompt tokens + 60 > a context of 61
  EXPECT_THROW(generate_row_params(s, row, 0, {2}, 61), HttpError);
}

TEST(GenerateSignature, AnEncoderDecoderAnswersWithTheDecodersSequences) {
  // TFT5ForConditionalGeneration.generate: the rows are the encoder's input; max_length counts
  // the decoder's tokens from its start token; the answer is [start, new tokens..., pad].
  GenerateRow row{{0, 0}, std::vector<int32_t>(50, 7)};
  GenerateSettings s;
  GenerateRowParams p = generate_row_params(s, row, 0, {1}, 64, /*decoder_start=*/0);
  EXPECT_EQ(p.params.max_tokens, 20 - 1) << "not max_length minus the encoder's 52 positions";
  s.max_new_tokens = 63;  // 1 + 63 decoder tokens fit a context of 64, beside 50 encoder ones
  EXPECT_EQ(generate_row_params(s, row, 0, {1}, 64, 0).params.max_tokens, 63);
  s.max_new_tokens = 64;
  EXPECT_THROW(generate_row_params(s, row, 0, {1}, 64, 0), HttpError);
  GenerateRow longer{{}, std::vector<int32_t>(65, 7)};  // the encoder's input past the context
  s.max_new_tokens = 4;
  EXPECT_THROW(generate_row_params(s, longer, 0, {1}, 64, 0), HttpError);
  const auto out = generate_output({row, longer}, {{{5, 6}}, {{8}}}, /*pad=*/0, /*start=*/0);
  EXPECT_EQ(out, (std::vector<std::vector<int32_t>>{{0, 5, 6}, {0, 8, 0}}));
}

TEST(GenerateSignature, PredictBodiesPickTheirSignature) {
  EXPECT_TRUE(
      read_predict_body(json::parse(R"({"inputs": {"input_ids": [[1]], "attention_mask": [[1]]}})"))
          .generate);
  EXPECT_FALSE(read_predict_body(json::parse(R"({"instances": [{"input_ids": [1]}]})")).generate);
  EXPECT_FALSE(read_predict_body(json::parse(R"({"instances": ["Once"]})")).generate);
  EXPECT_TRUE(
      read_predict_body(json::parse(R"({"signature_name": "gen", "inputs": {"input_ids": [[1]]}})"))
          .generate);
  EXPECT_THROW(read_predict_body(json::parse(
                   R"({"instances": [{"input_ids": [1], "do_sample": true, "stop": ["x"]}]})")),
               HttpError);
}

}  // namespace
}  // namespace tf
