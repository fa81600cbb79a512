// The OpenAI response shapes as pure functions (serving/openai_render.h): the exact JSON of a
// whole response, stream chunks, the chat role and usage chunks, and both logprobs shapes.
#include "serving/openai/openai_render.h"
#include "serving/core/prompt.h"
#include "serving/openai/openai_request.h"

#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "core/error.h"
#include "serving/core/api_common.h"
#include "serving/core/completion_request.h"

namespace tf {
namespace {

GeneratedSequence seq(std::string text, FinishReason finish, std::vector<int32_t> tokens) {
  GeneratedSequence s;
  s.text = std::move(text);
  s.finish = finish;
  s.tokens = std::move(tokens);
  return s;
}

OpenAiShape completions(int32_t n) {
  OpenAiShape s;
  s.id = std::string("cmpl-1");
  s.model = std::string("m");
  s.created = 7;
  s.choices_per_prompt = n;
  return s;
}

JobSummary summary(std::vector<std::vector<size_t>> returned) {
  JobSummary s;
  s.returned = std::move(returned);
  s.prompt_tokens = 3;
  s.completion_tokens = 3;
  s.cached_prompt_tokens = 1;
  return s;
}

TEST(OpenAiRender, CompletionsResponseWithEcho) {
  OpenAiShape shape = completions(2);
  shape.echo = {"Once"};
  const std::vector<std::vector<GeneratedSequence>> results = {
      {seq(" upon", FinishReason::kLength, {5, 6}), seq("!", FinishReason::kStop, {9})}};
  EXPECT_EQ(dump_json(openai_response(shape, results, summary({{0, 1}}))),
            R"({"id":"cmpl-1","object":"text_completion","created":7,"model":"m","choices":[)"
            R"({"index":0,"text":"Once upon","logprobs":null,"finish_reason":"length",)"
            R"("stop_reason":null},{"index":1,"text":"Once!","logprobs":null,)"
            R"("finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":3,)"
            R"("completion_tokens":3,"total_tokens":6,"prompt_tokens_details":)"
            R"({"cached_tokens":1}}})");
}

TEST(OpenAiRender, ChatResponseReturnsThePickedSequencesWithChoiceIndicesPerPrompt) {
  OpenAiShape shape = completions(1);
  shape.id = "chatcmpl-2";
  shape.chat = true;
  // Two prompts; best_of picked sequence 1 of the first.
  const std::vector<std::vector<GeneratedSequence>> results = {
      {seq("no", FinishReason::kStop, {1}), seq("yes", FinishReason::kStop, {2})},
      {seq("hi", FinishReason::kLength, {3, 4})}};
  EXPECT_EQ(dump_json(openai_response(shape, results, summary({{1}, {0}}))),
            R"({"id":"chatcmpl-2","object":"chat.completion","created":7,"model":"m","choices":[)"
            R"({"index":0,"message":{"role":"assistant","content":"yes"},"logprobs":null,)"
            R"("finish_reason":"stop","stop_reason":null},{"index":1,"message":{"role":)"
            R"("assistant","content":"hi"},"logprobs":null,"finish_reason":"length",)"
            R"("stop_reason":null}],"usage":{"prompt_tokens":3,"completion_tokens":3,)"
            R"("total_tokens":6,"prompt_tokens_details":{"cached_tokens":1}}})");
}

TEST(OpenAiRender, StreamChunks) {
  OpenAiShape shape = completions(2);
  shape.echo = {"A", "B"};
  RequestOutput out;
  out.index = 1;
  out.text = " x";
  // Prompt 1, sequence 1: choice 3; the prompt's text first when echoing.
  auto c = openai_stream_chunk(shape, 1, out, /*with_echo=*/true);
  ASSERT_TRUE(c);
  EXPECT_EQ(dump_json(*c),
            R"({"id":"cmpl-1","object":"text_completion","created":7,"model":"m","choices":[)"
            R"({"index":3,"text":"B x","logprobs":null,"finish_reason":null}]})");
  EXPECT_EQ((*openai_stream_chunk(shape, 1, out, false))["choices"][0]["text"], " x");
  // Nothing to say: no chunk. A beam beyond the returned ones: no chunk.
  RequestOutput empty;
  EXPECT_FALSE(openai_stream_chunk(shape, 0, empty, false));
  out.index = 2;
  EXPECT_FALSE(openai_stream_chunk(shape, 0, out, false));

  shape.chat = true;
  shape.echo.clear();
  RequestOutput fin;
  fin.finish = FinishReason::kStop;
  EXPECT_EQ(dump_json(*openai_stream_chunk(shape, 0, fin, false)),
            R"({"id":"cmpl-1","object":"chat.completion.chunk","created":7,"model":"m",)"
            R"("choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]})");
  EXPECT_EQ(dump_json(openai_role_chunk(shape, 1)),
            R"({"id":"cmpl-1","object":"chat.completion.chunk","created":7,"model":"m",)"
            R"("choices":[{"index":1,"delta":{"role":"assistant","content":""},)"
            R"("logprobs":null,"finish_reason":null}]})");
  EXPECT_EQ(dump_json(openai_usage_chunk(shape, summary({{0}}))),
            R"({"id":"cmpl-1","object":"chat.completion.chunk","created":7,"model":"m",)"
            R"("choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3,)"
            R"("total_tokens":6,"prompt_tokens_details":{"cached_tokens":1}}})");
}

TEST(OpenAiRender, LogprobsInBothShapes) {
  SampleResult r;
  r.token = 5;
  r.logprob = -0.5f;
  r.top = {{5, -0.5f}, {7, -1.0f}};
  // Without a tokenizer a token is its id as text; offsets count bytes from the given start.
  EXPECT_EQ(dump_json(completion_logprobs(nullptr, {r, r}, 4)),
            R"({"tokens":["5","5"],"token_logprobs":[-0.5,-0.5],"top_logprobs":[)"
            R"({"5":-0.5,"7":-1.0},{"5":-0.5,"7":-1.0}],"text_offset":[4,5]})");
  // Chat's members in OpenAI's order (token, logprob, bytes, top_logprobs).
  EXPECT_EQ(dump_json(chat_logprobs(nullptr, {r})),
            R"({"content":[{"token":"5","logprob":-0.5,"bytes":[53],"top_logprobs":[)"
            R"({"token":"5","logprob":-0.5,"bytes":[53]},{"token":"7","logprob":-1.0,)"
            R"("bytes":[55]}]}],"refusal":null})");
}

TEST(ChatTemplateKwargs, ReachTheTemplateAndAreCheckedFirst) {
  using nlohmann::json;
  const json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                     {"chat_template_kwargs", {{"enable_thinking", false}}}};
  const CompletionRequest r = read_openai_request(body, /*chat=*/true);
  EXPECT_EQ(r.chat_template_kwargs, (json{{"enable_thinking", false}}));
  // Qwen3's template: thinking off renders the empty think block after the generation prompt.
  const ChatTemplate qwen3 = ChatTemplate::parse(builtin_chat_template("qwen3"));
  const std::string off =
      qwen3.apply({{"user", "Hi"}}, true, "", "<|im_end|>", r.chat_template_kwargs);
  EXPECT_NE(off.find("<|im_start|>assistant\n<think>\n\n</think>\n\n"), std::string::npos) << off;
  const std::string on = qwen3.apply({{"user", "Hi"}}, true, "", "<|im_end|>");
  EXPECT_EQ(on.find("<think>"), std::string::npos) << on;
  // Not an object, or a field the request has its own parameter for: 400 naming it.
  for (const json& bad : {json("enable_thinking"), json{{"messages", json::array()}},
                          json{{"add_generation_prompt", false}}}) {
    json b = body;
    b["chat_template_kwargs"] = bad;
    try {
      read_openai_request(b, true);
      ADD_FAILURE() << bad.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("chat_template_kwargs"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tf
