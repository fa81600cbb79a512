// Unit tests of the serving layer's pure parts: TF Serving model paths, error bodies, best_of.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "serving/api_common.h"
#include "serving/generation_job.h"
#include "serving/openai_api.h"
#include "serving/tfserving_api.h"

namespace tf {
namespace {

TEST(ModelPath, ParsesTfServingGrammar) {
  auto p = parse_model_path("half_plus_two");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->name, "half_plus_two");
  EXPECT_FALSE(p->version || p->label || p->metadata);
  p = parse_model_path("m/versions/123/metadata");
  ASSERT_TRUE(p);
  EXPECT_EQ(*p->version, 123);
  EXPECT_TRUE(p->metadata);
  p = parse_model_path("m/labels/canary:predict");
  ASSERT_TRUE(p);
  EXPECT_EQ(*p->label, "canary");
  EXPECT_EQ(p->verb, "predict");
  p = parse_model_path("m:predict");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->verb, "predict");
  for (const char* bad : {"", "m/versions/x", "m/versions/", "m/versions/1/extra", "m/other", "/m",
                          "m/labels", "m/versions/99999999999999999999"}) {
    EXPECT_FALSE(parse_model_path(bad)) << bad;
  }
}

TEST(ErrorBody, OpenAiShapeWithStatusTypeAndParam) {
  auto j = nlohmann::json::parse(openai_error_body(400, "'temperature' must be a number"));
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_EQ(j["error"]["code"], "invalid_parameter");
  j = nlohmann::json::parse(openai_error_body(404, "no such model", "model_not_found", "model"));
  EXPECT_EQ(j["error"]["code"], "model_not_found");
  EXPECT_EQ(j["error"]["param"], "model");
  j = nlohmann::json::parse(openai_error_body(503, "busy"));
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(http_status_of(Error(ErrorKind::kNotFound, "x")), 404);
  EXPECT_EQ(http_status_of(Error(ErrorKind::kInternal, "x")), 500);
  EXPECT_EQ(http_status_of(HttpError(413, "x")), 413);
  EXPECT_EQ(http_status_of(std::runtime_error("x")), 500);
  // Odd bytes never make the JSON writer throw.
  EXPECT_NO_THROW(dump_json(nlohmann::json{{"text", std::string("\xff\xfe", 2)}}));
}

TEST(BestOf, KeepsTheMostLikelyBestFirst) {
  std::vector<GeneratedSequence> seqs(4);
  const double lp[] = {-3.0, -1.0, -2.0, -1.0};
  for (int i = 0; i < 4; ++i) seqs[i].cumulative_logprob = lp[i];
  EXPECT_EQ(best_sequences(seqs, 2), (std::vector<size_t>{1, 3}));
  EXPECT_EQ(best_sequences(seqs, 9).size(), 4u);
}

// Errors carry their field (FieldError), not a message for field_of to read: every parameter
// check names the body's field, chat's max_completion_tokens included.
TEST(PlanErrors, NameTheFieldTheyAreAbout) {
  ModelConfig cfg;
  cfg.vocab_size = 512;
  cfg.max_seq_len = 512;
  const LoadedTokenizer none;  // prompts as token ids
  auto param = [&](const char* text, bool chat) -> std::string {
    GenerationPlan p;
    try {
      parse_generation_body(nlohmann::json::parse(text), chat, none, cfg, p);
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status(), 400) << text;
      return e.param();
    }
    return "(accepted)";
  };
  EXPECT_EQ(param(R"({"prompt": [1], "temperature": -1})", false), "temperature");
  EXPECT_EQ(param(R"({"prompt": [1], "top_p": 1.5})", false), "top_p");
  EXPECT_EQ(param(R"({"prompt": [1], "n": 0})", false), "n");
  EXPECT_EQ(param(R"({"prompt": [1], "stop_token_ids": [9999]})", false), "stop_token_ids");
  EXPECT_EQ(param(R"({"prompt": [1], "seed": "x"})", false), "seed");
  EXPECT_EQ(param(R"({"prompt": [[1], "x"]})", false), "prompt");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "hi"}],
                     "max_completion_tokens": 0})",
                  true),
            "max_completion_tokens");
  EXPECT_EQ(param(R"({"prompt": [1], "max_tokens": 4})", false), "(accepted)");
}

}  // namespace
}  // namespace tf
