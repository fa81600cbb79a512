// Ollama's bodies read into the typed request (issue 50): name:tag resolution, options mapped
// onto the sampling parameters (and what is refused by name), tool turns matched to their calls,
// /api/generate's templated and raw prompts, the embed bodies, and parameter sizes as Ollama
// writes them. The server-level behaviour is tests/serving/test_ollama.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "serving/core/api_common.h"
#include "serving/ollama/ollama_api.h"
#include "serving/ollama/ollama_request.h"

namespace tf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

OllamaRequest chat(const std::string& text) {
  return read_ollama_chat(json::parse(text), ojson::parse(text), false);
}
OllamaRequest generate(const std::string& text) {
  return read_ollama_generate(json::parse(text), ojson::parse(text), false);
}
// The 400's message for a body read by fn.
template <typename Fn>
std::string refusal(Fn fn) {
  try {
    fn();
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(OllamaRequest, NameTagsResolveToVersionsAndLabels) {
  const auto has = [](const std::string& model, const std::string& label) {
    return model == "llama" && label == "stable";
  };
  EXPECT_EQ(ollama_model_field("llama", has), "llama");
  EXPECT_EQ(ollama_model_field("llama:latest", has), "llama");
  EXPECT_EQ(ollama_model_field("llama:7", has), "llama:7");
  EXPECT_EQ(ollama_model_field("llama:stable", has), "llama@stable");
  EXPECT_EQ(ollama_model_field("llama:canary", has), "llama:canary");  // not found later
  EXPECT_EQ(ollama_model_field("other:stable", has), "other:stable");
  EXPECT_EQ(ollama_model_field("llama@stable", has), "llama@stable");
  EXPECT_EQ(ollama_model_field("llama:", has), "llama:");
}

TEST(OllamaRequest, OptionsMapOntoTheSamplingParameters) {
  const OllamaRequest o = chat(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
      "options": {"num_predict": 7, "temperature": 0.5, "top_k": 3, "top_p": 0.8, "min_p": 0.1,
                  "typical_p": 0.9, "repeat_penalty": 1.3, "repeat_last_n": -1,
                  "presence_penalty": 0.2, "frequency_penalty": -0.4, "seed": 42,
                  "stop": ["\n\n", "END"], "num_ctx": 128, "num_gpu": 99, "use_mmap": false}})");
  const CompletionRequest& r = o.request;
  EXPECT_TRUE(r.chat);
  EXPECT_TRUE(r.stream);  // Ollama streams unless told not to
  EXPECT_FALSE(r.max_tokens_given);
  EXPECT_EQ(r.default_max_tokens, 7);  // fitted to the context, not refused past it
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_EQ(r.params.top_k, 3);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.8f);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.params.typical_p, 0.9f);
  EXPECT_FLOAT_EQ(r.params.repetition_penalty, 1.3f);
  EXPECT_FLOAT_EQ(r.params.presence_penalty, 0.2f);
  EXPECT_FLOAT_EQ(r.params.frequency_penalty, -0.4f);
  EXPECT_EQ(r.params.seed, 42u);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(r.context_limit, 128);
  // -1 and -2: up to the context; seed -1: a random seed; repeat_last_n 0: no penalty.
  const OllamaRequest d = chat(R"({"model": "m", "messages": [], "stream": false,
      "options": {"num_predict": -2, "seed": -1, "repeat_penalty": 1.5, "repeat_last_n": 0,
                  "temperature": 2.0}})");
  EXPECT_TRUE(d.load_only);
  EXPECT_FALSE(d.request.stream);
  EXPECT_EQ(d.request.default_max_tokens, INT32_MAX);
  EXPECT_FALSE(d.request.params.seed.has_value());
  EXPECT_FLOAT_EQ(d.request.params.repetition_penalty, 1.0f);
}

TEST(OllamaRequest, WhatCannotBeHonouredIsRefusedByName) {
  const std::string conv = R"("model": "m", "messages": [{"role": "user", "content": "hi"}])";
  for (const auto& [extra, words] : std::vector<std::pair<std::string, std::string>>{
           {R"("options": {"mirostat": 1})", "mirostat"},
           {R"("options": {"tfs_z": 0.5})", "tfs_z"},
           {R"("options": {"repeat_penalty": 1.2, "repeat_last_n": 64})", "repeat_last_n"},
           {R"("options": {"repeat_penalty": 0})", "repeat_penalty"},
           {R"("options": {"num_predict": 0})", "num_predict"},
           {R"("options": {"num_predict": 2.5})", "num_predict"},
           {R"("options": {"temperature": "hot"})", "temperature"},
           {R"("options": {"flux": 1})", "flux"},
           {R"("options": [1])", "options"},
           {R"("format": "yaml")", "format"},
           {R"("think": 3)", "think"},
           {R"("top_logprobs": 2)", "logprobs"},
           {R"("logprobs": true, "top_logprobs": 50)", "top_logprobs"},
           {R"("keep_alive": [])", "keep_alive"},
           {R"("colour": 1)", "colour"}}) {
    EXPECT_NE(refusal([&] { chat("{" + conv + ", " + extra + "}"); }).find(words),
              std::string::npos)
        << extra;
  }
  EXPECT_NE(refusal([&] {
              chat(R"({"model": "m", "messages": [{"role": "user", "content": "x",
                       "images": ["aGk="]}]})");
            }).find("images"),
            std::string::npos);
  EXPECT_NE(refusal([&] { chat(R"({"messages": []})"); }).find("model"), std::string::npos);
  EXPECT_NE(
      refusal([&] { generate(R"({"model": "m", "prompt": "x", "suffix": "y"})"); }).find("suffix"),
      std::string::npos);
  EXPECT_NE(refusal([&] {
              generate(R"({"model": "m", "prompt": "x", "context": [1]})");
            }).find("context"),
            std::string::npos);
}

TEST(OllamaRequest, ToolTurnsAnswerTheirCalls) {
  const OllamaRequest o = chat(R"({"model": "m", "messages": [
      {"role": "user", "content": "Weather and time in Paris?"},
      {"role": "assistant", "content": "", "thinking": "two calls",
       "tool_calls": [{"function": {"name": "weather", "arguments": {"city": "Paris"}}},
                      {"function": {"name": "time", "arguments": "{\"tz\": \"CET\"}"}}]},
      {"role": "tool", "tool_name": "time", "content": "12:00"},
      {"role": "tool", "content": "sunny"}],
      "tools": [{"type": "function", "function": {"name": "weather", "parameters": {
                 "type": "object", "properties": {"city": {"type": "string"}}}}}]})");
  const auto& m = o.request.messages;
  ASSERT_EQ(m.size(), 4u);
  ASSERT_EQ(m[1].tool_calls.size(), 2u);
  EXPECT_EQ(m[1].tool_calls[0]["id"], "call_0");
  EXPECT_EQ(m[1].tool_calls[0]["type"], "function");
  EXPECT_EQ(m[1].tool_calls[0]["function"]["arguments"], ojson({{"city", "Paris"}}));
  EXPECT_EQ(m[1].tool_calls[1]["function"]["arguments"], ojson({{"tz", "CET"}}));
  EXPECT_EQ(m[1].content, "");  // the earlier thinking is not put back
  // The tool named answers its call; an unnamed one the first call still open.
  EXPECT_EQ(m[2].role, "tool");
  EXPECT_EQ(m[2].tool_call_id, "call_1");
  EXPECT_EQ(m[2].name, "time");
  EXPECT_EQ(m[3].tool_call_id, "call_0");
  EXPECT_EQ(m[3].name, "weather");
  EXPECT_EQ(o.request.tools.names, std::vector<std::string>{"weather"});
  EXPECT_TRUE(o.request.tools.active());
  EXPECT_FALSE(o.request.tools.forced());  // Ollama has no tool_choice
}

TEST(OllamaRequest, GenerateRendersAUserTurnOrSendsTheRawPrompt) {
  const OllamaRequest t = generate(
      R"({"model": "m", "prompt": "Tell me", "system": "Be brief", "think": false,
          "format": {"type": "object"}})");
  EXPECT_TRUE(t.request.chat);
  ASSERT_EQ(t.request.messages.size(), 2u);
  EXPECT_EQ(t.request.messages[0], ChatMessage("system", "Be brief"));
  EXPECT_EQ(t.request.messages[1], ChatMessage("user", "Tell me"));
  EXPECT_EQ(t.request.chat_template_kwargs["enable_thinking"], false);
  EXPECT_EQ(t.request.output.kind, OutputConstraint::kJsonSchema);
  EXPECT_EQ(t.request.output.field, "format");
  const OllamaRequest r = generate(R"({"model": "m", "prompt": "Once", "raw": true,
                                       "format": "json", "think": "low"})");
  EXPECT_FALSE(r.request.chat);
  ASSERT_EQ(r.request.prompts.size(), 1u);
  EXPECT_EQ(r.request.prompts[0].text, "Once");
  EXPECT_EQ(r.request.default_max_tokens, INT32_MAX);  // Ollama's num_predict -1
  EXPECT_EQ(r.request.output.kind, OutputConstraint::kJsonObject);
  EXPECT_EQ(r.request.chat_template_kwargs["reasoning_effort"], "low");
  EXPECT_TRUE(generate(R"({"model": "m"})").load_only);
}

TEST(OllamaRequest, EmbedBodies) {
  const OllamaEmbedRequest e =
      read_ollama_embed(json::parse(R"({"model": "m", "input": ["a", "b"], "truncate": false,
                      "dimensions": 64, "keep_alive": "1m"})"),
                        false);
  EXPECT_EQ(e.inputs.inputs.size(), 2u);
  EXPECT_FALSE(e.inputs.truncate);
  EXPECT_EQ(e.dimensions, 64);
  EXPECT_TRUE(
      read_ollama_embed(json::parse(R"({"model": "m", "input": "a"})"), false).inputs.truncate);
  const OllamaEmbedRequest l =
      read_ollama_embed(json::parse(R"({"model": "m", "prompt": "a"})"), true);
  EXPECT_TRUE(l.legacy);
  EXPECT_EQ(l.inputs.field, "prompt");
  EXPECT_NE(refusal([] {
              read_ollama_embed(json::parse(R"({"model": "m", "input": []})"), false);
            }).find("input"),
            std::string::npos);
  EXPECT_NE(refusal([] {
              read_ollama_embed(json::parse(R"({"model": "m", "input": "a", "prompt": "b"})"),
                                false);
            }).find("prompt"),
            std::string::npos);
}

TEST(OllamaRequest, ParameterSizesAsOllamaWritesThem) {
  EXPECT_EQ(ollama_parameter_size(292800), "293K");
  EXPECT_EQ(ollama_parameter_size(15'190'000), "15M");
  EXPECT_EQ(ollama_parameter_size(1'100'048'384), "1.1B");
  EXPECT_EQ(ollama_parameter_size(7'000'000'000), "7B");
  EXPECT_EQ(ollama_parameter_size(999), "999");
}

}  // namespace
}  // namespace tf
