// The gRPC API's pure parts: a GenerateRequest's OpenAI body (every field, the chat shapes), the
// mapping of errors to gRPC codes and back, and the REST prompt parser it relies on.
#include <gtest/gtest.h>

#include "core/error.h"
#include "serving/grpc_call.h"
#include "serving/grpc_generation.h"
#include "serving/openai_request.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf {
namespace {

using nlohmann::json;

TEST(GrpcBody, EveryFieldKeepsItsRestName) {
  v1::GenerateRequest r;
  r.set_model("m@stable");
  r.set_text("Hello");
  auto* s = r.mutable_sampling();
  s->set_max_tokens(7);
  s->set_min_tokens(2);
  s->set_temperature(0.0f);  // set, so greedy: not the default
  s->set_top_k(5);
  s->set_top_p(0.5f);
  s->set_min_p(0.1f);
  s->set_typical_p(0.9f);
  s->set_seed(-3);
  s->set_repetition_penalty(1.1f);
  s->set_presence_penalty(0.5f);
  s->set_frequency_penalty(-0.5f);
  (*s->mutable_logit_bias())[42] = -100.0f;
  s->set_no_repeat_ngram_size(3);
  s->add_bad_words_ids()->add_ids(9);
  s->add_stop("\n");
  s->add_stop_token_ids(2);
  s->set_ignore_eos(true);
  s->set_include_stop_str_in_output(true);
  s->set_n(2);
  s->set_best_of(4);
  s->set_logprobs(3);
  s->set_length_penalty(0.7f);
  s->set_skip_special_tokens(false);
  r.set_add_special_tokens(false);
  r.set_user("u1");
  r.set_priority(-1);
  r.set_cache_salt("salt");
  bool chat = true;
  const json b = openai_body_of(r, /*stream=*/false, chat);
  EXPECT_FALSE(chat);
  const json want = {{"model", "m@stable"},
                     {"prompt", "Hello"},
                     {"max_tokens", 7},
                     {"min_tokens", 2},
                     {"temperature", 0.0},
                     {"top_k", 5},
                     {"top_p", 0.5},
                     {"min_p", 0.1f},
                     {"typical_p", 0.9f},
                     {"seed", -3},
                     {"repetition_penalty", 1.1f},
                     {"presence_penalty", 0.5},
                     {"frequency_penalty", -0.5},
                     {"logit_bias", {{"42", -100.0}}},
                     {"no_repeat_ngram_size", 3},
                     {"bad_words_ids", {{9}}},
                     {"stop", {"\n"}},
                     {"stop_token_ids", {2}},
                     {"ignore_eos", true},
                     {"include_stop_str_in_output", true},
                     {"n", 2},
                     {"best_of", 4},
                     {"logprobs", 3},
                     {"length_penalty", 0.7f},
                     {"skip_special_tokens", false},
                     {"add_special_tokens", false},
                     {"user", "u1"},
                     {"priority", -1},
                     {"cache_salt", "salt"}};
  EXPECT_EQ(b, want) << b.dump();
  // The REST parser reads them back as given.
  const SamplingParams p = parse_sampling_params(b, false, 16);
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_EQ(p.temperature, 0.0f);
  EXPECT_EQ(p.top_p, 0.5f);
  EXPECT_EQ(p.min_p, 0.1f);
  EXPECT_EQ(p.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(p.logprobs, 3);
  ASSERT_EQ(p.logit_bias.size(), 1u);
  EXPECT_EQ(p.logit_bias[0].first, 42);
}

TEST(GrpcBody, UnsetFieldsAreAbsentSoRestDefaultsApply) {
  v1::GenerateRequest r;
  r.mutable_token_ids()->add_ids(1);
  bool chat = false;
  const json b = openai_body_of(r, /*stream=*/true, chat);
  EXPECT_EQ(b, (json{{"prompt", {1}}, {"stream", true}})) << b.dump();
  const SamplingParams p = parse_sampling_params(b, false, 16);
  EXPECT_EQ(p.max_tokens, 16);
  EXPECT_EQ(p.temperature, 1.0f);
  EXPECT_FALSE(p.logprobs.has_value());
}

TEST(GrpcBody, ChatTakesTheChatShapes) {
  v1::GenerateRequest r;
  auto* m = r.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("Hi");
  r.mutable_chat()->set_add_generation_prompt(false);
  r.mutable_sampling()->set_logprobs(2);
  bool chat = false;
  const json b = openai_body_of(r, false, chat);
  EXPECT_TRUE(chat);
  EXPECT_EQ(b["messages"], (json::array({{{"role", "user"}, {"content", "Hi"}}})));
  EXPECT_EQ(b["add_generation_prompt"], false);
  EXPECT_EQ(b["logprobs"], true);  // chat: a flag and top_logprobs
  EXPECT_EQ(b["top_logprobs"], 2);
  EXPECT_EQ(parse_sampling_params(b, true, 16).logprobs, 2);
}

TEST(GrpcBody, APromptIsRequiredAndTokenIdsNotEmpty) {
  bool chat = false;
  v1::GenerateRequest none;
  try {
    openai_body_of(none, false, chat);
    FAIL() << "no prompt was accepted";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "prompt");
  }
  v1::GenerateRequest empty;
  empty.mutable_token_ids();
  EXPECT_THROW(openai_body_of(empty, false, chat), HttpError);
}

TEST(GrpcStatus, ErrorsMapToTheirCodesAndBack) {
  const std::pair<int, grpc::StatusCode> table[] = {
      {400, grpc::StatusCode::INVALID_ARGUMENT},   {401, grpc::StatusCode::UNAUTHENTICATED},
      {403, grpc::StatusCode::PERMISSION_DENIED},  {404, grpc::StatusCode::NOT_FOUND},
      {429, grpc::StatusCode::RESOURCE_EXHAUSTED}, {503, grpc::StatusCode::UNAVAILABLE},
      {504, grpc::StatusCode::DEADLINE_EXCEEDED},  {500, grpc::StatusCode::INTERNAL},
      {499, grpc::StatusCode::CANCELLED}};
  for (const auto& [http, code] : table) {
    const grpc::Status s = grpc_status_of(HttpError(http, "why"));
    EXPECT_EQ(s.error_code(), code) << http;
    EXPECT_EQ(s.error_message(), "why");
    EXPECT_EQ(http_status_of(code), http);
  }
  // Errors of other kinds by their kind: invalid input, missing things, overload.
  EXPECT_EQ(grpc_status_of(Error(ErrorKind::kInvalidArgument, "x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(grpc_status_of(Error(ErrorKind::kUnavailable, "x")).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(grpc_status_of(std::runtime_error("x")).error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_STREQ(grpc_code_name(grpc::StatusCode::RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
}

TEST(CompletionPrompt, TextThatEncodesToNothingIsRefused) {
  // GPT-2 adds no BOS: "" has no tokens, and a prompt must have one (found by the gRPC fuzzer).
  const LoadedTokenizer tok =
      load_tokenizer(std::string(TF_SHARED_DIR) + "/tokenizers/gpt2", 50257);
  EXPECT_THROW(parse_completion_prompts(json{{"prompt", ""}}, tok.tokenizer.get()), Error);
  EXPECT_THROW(parse_completion_prompts(json{{"prompt", {"a", ""}}}, tok.tokenizer.get()), Error);
  EXPECT_EQ(parse_completion_prompts(json{{"prompt", "Hi"}}, tok.tokenizer.get()).size(), 1u);
}

}  // namespace
}  // namespace tf
