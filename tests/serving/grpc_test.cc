// The gRPC API's pure parts: a GenerateRequest read as the typed request (equal to REST's for the
// same fields), the answers as messages, the mapping of errors to gRPC codes and back.
#include <gtest/gtest.h>

#include <limits>

#include "core/error.h"
#include "serving/core/planner.h"
#include "serving/core/prompt.h"
#include "serving/core/request_fields.h"
#include "serving/grpc/grpc_call.h"
#include "serving/grpc/grpc_generation.h"
#include "serving/openai/openai_request.h"
#include "serving/tfserving/grpc_prediction_service.h"
#include "serving/tfserving/predict_plan.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf {
namespace {

using nlohmann::json;

// The same request read through gRPC and through REST is the same typed request: every field,
// its defaults when unset, the chat shapes.
TEST(GrpcRequest, EveryFieldReadsAsRestReadsIt) {
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
  (*s->mutable_logit_bias())[7] = 3.0f;
  s->set_no_repeat_ngram_size(3);
  s->add_bad_words_ids()->add_ids(9);
  s->add_stop("\n");
  s->add_stop_token_ids(2);
  s->set_ignore_eos(true);
  s->set_include_stop_str_in_output(true);
  s->set_early_stopping(true);
  s->set_n(2);
  s->set_best_of(4);
  s->set_logprobs(3);
  s->set_length_penalty(0.7f);
  s->set_skip_special_tokens(false);
  r.set_add_special_tokens(false);
  r.set_user("u1");
  r.set_priority(-1);
  r.set_cache_salt("salt");
  const CompletionRequest g = read_generate_request(r, /*stream=*/false);
  const json body = {{"model", "m@stable"},
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
                     {"logit_bias", {{"7", 3.0}, {"42", -100.0}}},
                     {"no_repeat_ngram_size", 3},
                     {"bad_words_ids", {{9}}},
                     {"stop", {"\n"}},
                     {"stop_token_ids", {2}},
                     {"ignore_eos", true},
                     {"include_stop_str_in_output", true},
                     {"early_stopping", true},
                     {"n", 2},
                     {"best_of", 4},
                     {"logprobs", 3},
                     {"length_penalty", 0.7f},
                     {"skip_special_tokens", false},
                     {"add_special_tokens", false},
                     {"user", "u1"},
                     {"priority", -1},
                     {"cache_salt", "salt"}};
  CompletionRequest rest = read_openai_request(body, false);
  rest.logged_prompt = g.logged_prompt;  // REST logs the body's field as written
  EXPECT_EQ(g, rest);
  EXPECT_EQ(g.params.max_tokens, 7);
  EXPECT_TRUE(g.max_tokens_given);
  EXPECT_EQ(g.params.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(g.params.logprobs, 3);
  EXPECT_TRUE(g.params.early_stopping);
  ASSERT_EQ(g.params.logit_bias.size(), 2u);
  EXPECT_EQ(g.params.logit_bias[0].first, 7);
  EXPECT_EQ(g.prompts, (std::vector<PromptInput>{{true, "Hello", {}}}));
}

TEST(GrpcRequest, UnsetFieldsTakeRestsDefaults) {
  v1::GenerateRequest r;
  r.mutable_token_ids()->add_ids(1);
  const CompletionRequest g = read_generate_request(r, /*stream=*/true);
  CompletionRequest rest = read_openai_request(json{{"prompt", {1}}, {"stream", true}}, false);
  EXPECT_EQ(g, rest);
  EXPECT_FALSE(g.max_tokens_given);
  EXPECT_EQ(g.params.temperature, 1.0f);
  EXPECT_FALSE(g.params.logprobs.has_value());
  EXPECT_TRUE(g.stream);
}

TEST(GrpcRequest, ChatTakesTheChatShapes) {
  v1::GenerateRequest r;
  auto* m = r.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("Hi");
  r.mutable_chat()->set_add_generation_prompt(false);
  r.mutable_sampling()->set_logprobs(2);
  const CompletionRequest g = read_generate_request(r, false);
  EXPECT_TRUE(g.chat);
  EXPECT_EQ(g.messages, (std::vector<ChatMessage>{{"user", "Hi"}}));
  EXPECT_FALSE(g.add_generation_prompt);
  EXPECT_EQ(g.params.logprobs, 2);
  const json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                     {"add_generation_prompt", false},
                     {"logprobs", true},
                     {"top_logprobs", 2}};
  CompletionRequest rest = read_openai_request(body, true);
  rest.logged_prompt = g.logged_prompt;
  EXPECT_EQ(g, rest);
}

TEST(GrpcRequest, BadInputNamesItsFieldAsRestDoes) {
  auto field = [](const v1::GenerateRequest& r) -> std::string {
    try {
      read_generate_request(r, false);
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status(), 400);
      return e.param();
    }
    return "(accepted)";
  };
  v1::GenerateRequest none;
  EXPECT_EQ(field(none), "prompt");
  v1::GenerateRequest empty;
  empty.mutable_token_ids();
  EXPECT_EQ(field(empty), "token_ids");
  v1::GenerateRequest negative;
  negative.mutable_token_ids()->add_ids(-1);
  EXPECT_EQ(field(negative), "prompt");
  v1::GenerateRequest nan;
  nan.set_text("x");
  nan.mutable_sampling()->set_temperature(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(field(nan), "temperature");
  v1::GenerateRequest stream_best_of;
  stream_best_of.set_text("x");
  stream_best_of.mutable_sampling()->set_best_of(3);
  EXPECT_EQ(field(stream_best_of), "(accepted)");  // unary: best_of > n is fine
  try {
    read_generate_request(stream_best_of, /*stream=*/true);
    FAIL() << "streamed best_of > n was accepted";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.param(), "best_of");
  }
  v1::GenerateRequest chat;
  chat.mutable_chat();
  EXPECT_EQ(field(chat), "messages");
  v1::GenerateRequest stops;
  stops.set_text("x");
  for (int i = 0; i < 33; ++i) stops.mutable_sampling()->add_stop("s");
  EXPECT_EQ(field(stops), "stop");
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
  ModelConfig cfg;
  cfg.vocab_size = 50257;
  cfg.max_seq_len = 1024;
  auto plan = [&](const json& body) {
    return plan_request(read_openai_request(body, false), tok, cfg, "id");
  };
  EXPECT_THROW(plan(json{{"prompt", ""}}), HttpError);
  EXPECT_THROW(plan(json{{"prompt", {"a", ""}}}), HttpError);
  EXPECT_EQ(plan(json{{"prompt", "Hi"}}).requests.size(), 1u);
  EXPECT_EQ(plan(json{{"prompt", {"Hi", "there"}}}).requests.size(), 2u);
}

// The answers as messages, from a job's results without a server.
TEST(GrpcRender, UnaryResponseStreamStepAndEnd) {
  std::vector<std::vector<GeneratedSequence>> results(2);
  results[0].resize(2);
  results[0][0].tokens = {5, 6};
  results[0][0].text = "ab";
  results[0][0].finish = FinishReason::kLength;
  results[0][1].tokens = {7};
  results[0][1].text = "c";
  results[0][1].finish = FinishReason::kStop;
  results[0][1].cumulative_logprob = -0.5;
  results[1].resize(1);
  results[1][0].tokens = {8};
  results[1][0].text = std::string("\xff", 1);  // half a character: sanitized
  results[1][0].finish = FinishReason::kAbort;
  JobSummary summary;
  summary.returned = {{1, 0}, {0}};  // best_of picked the second first
  summary.prompt_tokens = 4;
  summary.completion_tokens = 4;
  summary.cached_prompt_tokens = 2;
  v1::GenerateResponse resp;
  generate_response_proto(results, summary, false, nullptr, &resp);
  ASSERT_EQ(resp.sequences_size(), 3);
  EXPECT_EQ(resp.sequences(0).index(), 0);
  EXPECT_EQ(resp.sequences(0).text(), "c");
  EXPECT_EQ(resp.sequences(0).finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(resp.sequences(0).cumulative_logprob(), -0.5);
  EXPECT_EQ(resp.sequences(1).index(), 1);
  EXPECT_EQ(resp.sequences(1).token_ids_size(), 2);
  EXPECT_EQ(resp.sequences(2).index(), 0);
  EXPECT_EQ(resp.sequences(2).text(), "\xef\xbf\xbd");
  EXPECT_EQ(resp.sequences(2).finish_reason(), v1::FINISH_REASON_ABORT);
  EXPECT_EQ(resp.usage().total_tokens(), 8);
  EXPECT_EQ(resp.usage().cached_prompt_tokens(), 2);

  RequestOutput out;
  out.index = 1;
  out.token_ids = {9};
  out.text = "x";
  SampleResult lp;
  lp.token = 9;
  lp.logprob = -1.5f;
  out.logprobs = {lp};
  const auto step = stream_step_proto(out, 2, true, nullptr);
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(step->step().index(), 1);
  EXPECT_EQ(step->step().text(), "x");
  ASSERT_EQ(step->step().logprobs_size(), 1);
  EXPECT_EQ(step->step().logprobs(0).token(), "9");  // no tokenizer: the id as text
  EXPECT_EQ(step->step().finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
  EXPECT_FALSE(stream_step_proto(out, 1, true, nullptr).has_value());  // a beam beyond n
  EXPECT_FALSE(stream_step_proto(RequestOutput{}, 2, true, nullptr).has_value());  // nothing

  const auto end = stream_end_proto("cmpl-1", "m", 3, results, summary);
  EXPECT_EQ(end.end().id(), "cmpl-1");
  EXPECT_EQ(end.end().model_version(), 3);
  ASSERT_EQ(end.end().finish_reasons_size(), 3);
  EXPECT_EQ(end.end().finish_reasons(0), v1::FINISH_REASON_STOP);
  EXPECT_EQ(end.end().finish_reasons(2), v1::FINISH_REASON_ABORT);
  EXPECT_EQ(end.end().usage().prompt_tokens(), 4);
}

// Predict's answer in both APIs from one typed outputs record: REST's row and columnar JSON,
// gRPC's tensors (padded ids, lengths, the filter).
TEST(PredictRender, RowsColumnsAndTensors) {
  std::vector<std::vector<GeneratedSequence>> results(2);
  results[0].resize(1);
  results[0][0].tokens = {5, 6, 7};
  results[0][0].text = "abc";
  results[0][0].finish = FinishReason::kLength;
  SampleResult a, b;
  a.logprob = -0.5f;
  b.logprob = -0.25f;
  results[0][0].logprobs = {a, b, a};
  results[1].resize(1);
  results[1][0].tokens = {8};
  results[1][0].text = "d";
  results[1][0].finish = FinishReason::kStop;
  const PredictOutputs o = predict_outputs(results, {true, false});
  EXPECT_EQ(predict_response_json(o, true).dump(),
            R"({"predictions":[{"finish_reason":"length","logprobs":[-0.5,-0.25,-0.5],)"
            R"("output_ids":[5,6,7],"text":"abc"},{"finish_reason":"stop","output_ids":[8],)"
            R"("text":"d"}]})");
  EXPECT_EQ(predict_response_json(o, false).dump(),
            R"({"outputs":{"finish_reason":["length","stop"],"logprobs":[[-0.5,-0.25,-0.5],[]],)"
            R"("output_ids":[[5,6,7],[8]],"text":["abc","d"]}})");

  tfs::PredictResponse all;
  predict_response_proto(o, {}, &all);
  const auto& out = all.outputs();
  ASSERT_EQ(out.size(), 5u);
  const tensorflow::TensorProto& ids = out.at("output_ids");
  ASSERT_EQ(ids.tensor_shape().dim_size(), 2);
  EXPECT_EQ(ids.tensor_shape().dim(0).size(), 2);
  EXPECT_EQ(ids.tensor_shape().dim(1).size(), 3);
  EXPECT_EQ(std::vector<int32_t>(ids.int_val().begin(), ids.int_val().end()),
            (std::vector<int32_t>{5, 6, 7, 8, -1, -1}));
  EXPECT_EQ(out.at("output_lengths").int_val(1), 1);
  EXPECT_EQ(out.at("text").string_val(1), "d");
  EXPECT_EQ(out.at("finish_reason").string_val(0), "length");
  EXPECT_EQ(out.at("logprobs").float_val_size(), 6);
  EXPECT_EQ(out.at("logprobs").float_val(5), 0.0f);  // padding

  tfs::PredictRequest filtered;
  filtered.add_output_filter("text");
  tfs::PredictResponse some;
  predict_response_proto(o, filtered.output_filter(), &some);
  ASSERT_EQ(some.outputs().size(), 1u);
  EXPECT_TRUE(some.outputs().count("text"));
}

// gRPC's tensors read as REST's columnar body: the same typed input.
TEST(PredictRequest, TensorsReadAsTheColumnarBody) {
  tfs::PredictRequest req;
  tensorflow::TensorProto ids;
  ids.set_dtype(tensorflow::DT_INT32);
  ids.mutable_tensor_shape()->add_dim()->set_size(2);
  ids.mutable_tensor_shape()->add_dim()->set_size(2);
  for (int v : {1, 2, 3, 4}) ids.add_int_val(v);
  (*req.mutable_inputs())["input_ids"] = ids;
  tensorflow::TensorProto max;
  max.set_dtype(tensorflow::DT_INT32);
  max.mutable_tensor_shape()->add_dim()->set_size(1);
  max.add_int_val(5);
  (*req.mutable_inputs())["max_tokens"] = max;
  const PredictInput g = read_predict_request(req);
  const PredictInput rest =
      read_predict_body(json{{"inputs", {{"input_ids", {{1, 2}, {3, 4}}}, {"max_tokens", 5}}}});
  EXPECT_FALSE(g.rows);
  ASSERT_EQ(g.instances.size(), 2u);
  EXPECT_EQ(g.instances, rest.instances);
  EXPECT_EQ(g.instances[1].prompts[0].ids, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(g.instances[0].params.max_tokens, 5);
  tensorflow::TensorProto bogus = max;
  (*req.mutable_inputs())["bogus"] = bogus;
  EXPECT_THROW(read_predict_request(req), HttpError);
}

}  // namespace
}  // namespace tf
