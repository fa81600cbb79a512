// Tool calling (issue 24): reading tools and tool_choice, telling the format from real chat
// templates, parsing each format's calls (and refusing what is not a call of a given tool),
// streaming with held-back markers equal to parsing the whole, and the forced-call grammar's
// language: exactly calls of the tools, with arguments valid for their schemas.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "chat/tool_calls.h"
#include "sampling/grammar.h"
#include "serving/core/api_common.h"
#include "serving/core/tool_fields.h"

namespace tf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(TF_SOURCE_DIR) + "/tests/chat/chat_templates/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << name;
  return ss.str();
}

const char* kTools = R"({"tools": [
  {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
     "unit": {"enum": ["c", "f"]}}, "required": ["city"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
   "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}
]})";

ToolRequest tools_with(const std::string& extra) {
  json body = json::parse(kTools);
  if (!extra.empty()) body.update(json::parse(extra));
  return read_tool_request(body, ojson::parse(body.dump()));
}

const std::vector<std::string> kNames = {"get_weather", "add"};

TEST(ToolCalls, FormatToldFromRealTemplates) {
  EXPECT_EQ(detect_tool_format(fixture("qwen2.5_instruct.jinja")), ToolFormat::kHermes);
  EXPECT_EQ(detect_tool_format(fixture("qwen3.jinja")), ToolFormat::kHermes);
  EXPECT_EQ(detect_tool_format(fixture("llama3.1_instruct.jinja")), ToolFormat::kLlama3Json);
  EXPECT_EQ(detect_tool_format(fixture("llama3.2_instruct.jinja")), ToolFormat::kLlama3Json);
  EXPECT_EQ(detect_tool_format(fixture("mistral_v0.3_instruct.jinja")), ToolFormat::kMistral);
  EXPECT_EQ(detect_tool_format(fixture("llama2_chat.jinja")), ToolFormat::kJson);
  EXPECT_EQ(tool_format_named("hermes"), ToolFormat::kHermes);
  EXPECT_EQ(tool_format_named("nope"), std::nullopt);
}

TEST(ToolCalls, ReadsToolsAndChoice) {
  const ToolRequest r = tools_with(R"({"tool_choice": {"type": "function",
                                      "function": {"name": "add"}}, "parallel_tool_calls": false})");
  EXPECT_EQ(r.names, kNames);
  EXPECT_EQ(r.choice, ToolRequest::kNamed);
  EXPECT_EQ(r.named, "add");
  EXPECT_FALSE(r.parallel);
  EXPECT_TRUE(r.forced());
  // The parameter schema keeps the order sent.
  EXPECT_EQ(r.parameters[0]["properties"].begin().key(), "city");
  EXPECT_FALSE(tools_with(R"({"tool_choice": "none"})").active());
  EXPECT_TRUE(tools_with("").active());
  EXPECT_FALSE(tools_with("").forced());
}

TEST(ToolCalls, BadToolsAre400NamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"tools": {}})", "tools"},
      {R"({"tools": [{"type": "retrieval"}]})", "tools"},
      {R"({"tools": [{"type": "function", "function": {"name": ""}}]})", "tools"},
      {R"({"tools": [{"type": "function", "function": {"name": "a", "parameters": 3}}]})", "tools"},
      {R"x({"tools": [{"type": "function", "function": {"name": "a", "parameters":
          {"type": "object", "properties": {"x": {"type": "string", "pattern": "(?=a)"}}}}}]})x",
       "tools"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}},
                     {"type": "function", "function": {"name": "a"}}]})",
       "tools"},
      {R"({"tool_choice": "always"})", "tool_choice"},
      {R"({"tool_choice": "required"})", "tool_choice"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}],
           "tool_choice": {"type": "function", "function": {"name": "b"}}})",
       "tool_choice"},
      {R"({"parallel_tool_calls": "yes"})", "parallel_tool_calls"},
  };
  for (const auto& [body, field] : cases) {
    const json b = json::parse(body);
    try {
      (void)read_tool_request(b, ojson::parse(body));
      ADD_FAILURE() << body;
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status(), 400) << body;
      EXPECT_EQ(e.param(), field) << body << ": " << e.what();
    }
  }
}

void expect_calls(const ParsedToolOutput& p, const std::vector<std::pair<std::string, json>>& want,
                  const std::optional<std::string>& content) {
  ASSERT_EQ(p.calls.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(p.calls[i].name, want[i].first);
    EXPECT_EQ(json::parse(p.calls[i].arguments), want[i].second);
    EXPECT_EQ(p.calls[i].id.rfind("call_", 0), 0u);
  }
  EXPECT_EQ(p.content, content);
}

TEST(ToolCalls, ParsesEachFormat) {
  expect_calls(parse_tool_calls("Let me look.\n<tool_call>\n{\"name\": \"get_weather\", "
                                "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                                "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, "
                                "\"b\": 2}}\n</tool_call>",
                                ToolFormat::kHermes, kNames),
               {{"get_weather", {{"city", "Paris"}}}, {"add", {{"a", 1}, {"b", 2}}}},
               "Let me look.");
  // A call cut short by max_tokens (no closing tag) still parses when its JSON is whole.
  expect_calls(parse_tool_calls("<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, "
                                "\"b\": 2}}",
                                ToolFormat::kHermes, kNames),
               {{"add", {{"a", 1}, {"b", 2}}}}, std::nullopt);
  // Cut inside the closing tag: the part of "</tool_call>" there is not the call's (vLLM's
  // hermes parser reads it so).
  for (const char* cut : {"\n</", "\n</tool_", "\n</tool_call", " \n"}) {
    expect_calls(parse_tool_calls(std::string("<tool_call>\n{\"name\": \"add\", \"arguments\": "
                                              "{\"a\": 1, \"b\": 2}}") +
                                      cut,
                                  ToolFormat::kHermes, kNames),
                 {{"add", {{"a", 1}, {"b", 2}}}}, std::nullopt);
  }
  // A second call cut before it is whole: the first, complete, stands (tool_choice "required"
  // cut by max_tokens returns the calls it finished).
  expect_calls(parse_tool_calls("<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, "
                                "\"b\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_w",
                                ToolFormat::kHermes, kNames),
               {{"add", {{"a", 1}, {"b", 2}}}}, std::nullopt);
  // A list of calls cut by max_tokens: the complete ones stand (json and mistral's lists).
  expect_calls(parse_tool_calls("[{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}, "
                                "{\"name\": \"get_wea",
                                ToolFormat::kJson, kNames),
               {{"add", {{"a", 1}, {"b", 2}}}}, std::nullopt);
  expect_calls(parse_tool_calls("[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1, "
                                "\"b\": 2}}, {\"name\"",
                                ToolFormat::kMistral, kNames),
               {{"add", {{"a", 1}, {"b", 2}}}}, std::nullopt);
  expect_calls(parse_tool_calls("<|python_tag|>{\"name\": \"get_weather\", \"parameters\": "
                                "{\"city\": \"Oslo\"}}",
                                ToolFormat::kLlama3Json, kNames),
               {{"get_weather", {{"city", "Oslo"}}}}, std::nullopt);
  expect_calls(parse_tool_calls("{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}; "
                                "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"a;b\"}}",
                                ToolFormat::kLlama3Json, kNames),
               {{"add", {{"a", 1}, {"b", 2}}}, {"get_weather", {{"city", "a;b"}}}}, std::nullopt);
  expect_calls(parse_tool_calls("[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1, "
                                "\"b\": 2}}]",
                                ToolFormat::kMistral, kNames),
               {{"add", {{"a", 1}, {"b", 2}}}}, std::nullopt);
  expect_calls(
      parse_tool_calls("[TOOL_CALLS]add[ARGS]{\"a\": 3, \"b\": 4}", ToolFormat::kMistral, kNames),
      {{"add", {{"a", 3}, {"b", 4}}}}, std::nullopt);
  expect_calls(parse_tool_calls("[{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 5, \\\"b\\\": "
                                "6}\"}]",
                                ToolFormat::kJson, kNames),
               {{"add", {{"a", 5}, {"b", 6}}}}, std::nullopt);
  expect_calls(parse_tool_calls("{\"tool_calls\": [{\"type\": \"function\", \"function\": "
                                "{\"name\": \"add\", \"arguments\": {\"a\": 0, \"b\": 0}}}]}",
                                ToolFormat::kJson, kNames),
               {{"add", {{"a", 0}, {"b", 0}}}}, std::nullopt);
}

TEST(ToolCalls, WhatIsNotACallOfAGivenToolStaysContent) {
  for (const auto& [text, format] : std::vector<std::pair<std::string, ToolFormat>>{
           {"Once upon a time", ToolFormat::kHermes},
           {"<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>",
            ToolFormat::kHermes},
           {"<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1,", ToolFormat::kHermes},
           {"[{\"name\": \"add\", \"arguments\": {\"a\": 1,", ToolFormat::kJson},
           {"[{\"name\": \"rm_rf\", \"arguments\": {}}, {\"na", ToolFormat::kJson},
           {"{\"name\": \"add\", \"parameters\": [1, 2]}", ToolFormat::kLlama3Json},
           {"{\"answer\": 42}", ToolFormat::kJson},
           {"[TOOL_CALLS] not json", ToolFormat::kMistral}}) {
    const ParsedToolOutput p = parse_tool_calls(text, format, kNames);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
  EXPECT_EQ(parse_tool_calls("", ToolFormat::kHermes, kNames).content, std::nullopt);
}

// Fed in every split into pieces, the stream sends content that is a prefix of the whole
// parse's, never any of a call's text, and ends with the whole parse.
TEST(ToolCalls, StreamingEqualsTheWholeParse) {
  const std::vector<std::pair<std::string, ToolFormat>> outputs = {
      {"Sure.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>",
       ToolFormat::kHermes},
      {"a < b <tool and <tool_call> broken", ToolFormat::kHermes},
      {"Plain prose <tool_ca", ToolFormat::kHermes},
      {"  {\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}", ToolFormat::kLlama3Json},
      {"Hi {\"name\": \"add\"}", ToolFormat::kJson},
      {"Calling. [TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]",
       ToolFormat::kMistral},
  };
  for (const auto& [text, format] : outputs) {
    const ParsedToolOutput whole = parse_tool_calls(text, format, kNames);
    for (size_t piece : {1u, 2u, 3u, 7u, 1000u}) {
      ToolCallStream s(format);
      std::string sent;
      for (size_t at = 0; at < text.size(); at += piece) {
        sent += s.push(text.substr(at, piece));
        if (!whole.calls.empty()) {
          EXPECT_EQ(sent.find("<tool_call>"), std::string::npos) << text;
          EXPECT_EQ(sent.find("\"name\""), std::string::npos) << text;
        }
      }
      std::string rest;
      const ParsedToolOutput p = s.finish(kNames, rest);
      ASSERT_EQ(p.calls.size(), whole.calls.size()) << text;
      for (size_t i = 0; i < p.calls.size(); ++i)
        EXPECT_EQ(p.calls[i].arguments, whole.calls[i].arguments);
      if (whole.calls.empty()) {
        EXPECT_EQ(sent + rest, text) << "piece " << piece;
      } else {
        const std::string content = whole.content.value_or("");
        EXPECT_EQ(content.rfind(sent.substr(0, content.size()), 0), 0u) << text;
        EXPECT_EQ((sent + rest).substr(0, content.size()), content) << text;
      }
    }
  }
}

bool accepts(const Grammar& g, const std::string& s) {
  GrammarMatcher m(g);
  return m.accept(s) && m.can_end();
}

TEST(ToolCalls, ForcedCallGrammarHoldsExactlyCallsOfTheTools) {
  const ToolRequest required = tools_with(R"({"tool_choice": "required"})");
  const Grammar hermes = parse_gbnf(tool_call_grammar(required, ToolFormat::kHermes));
  const std::string w = R"({"name":"get_weather","arguments":{"city":"Paris","unit":"c"}})";
  const std::string a = R"({"name":"add","arguments":{"a":1,"b":-2}})";
  EXPECT_TRUE(accepts(hermes, "<tool_call>\n" + w + "\n</tool_call>"));
  EXPECT_TRUE(accepts(
      hermes, "<tool_call>\n" + w + "\n</tool_call>\n<tool_call>\n" + a + "\n</tool_call>"));
  EXPECT_FALSE(accepts(hermes, "<tool_call>\n" +
                                   std::string(R"({"name":"add","arguments":{"a":1}})") +
                                   "\n</tool_call>"));  // b is required
  EXPECT_FALSE(accepts(
      hermes, "<tool_call>\n" +
                  std::string(R"({"name":"get_weather","arguments":{"city":"Paris","unit":"k"}})") +
                  "\n</tool_call>"));
  EXPECT_FALSE(accepts(
      hermes, "<tool_call>\n" + std::string(R"({"name":"rm","arguments":{}})") + "\n</tool_call>"));
  EXPECT_FALSE(accepts(hermes, "Sure! <tool_call>\n" + a + "\n</tool_call>"));
  // Named, not parallel: that one tool, once.
  const ToolRequest named = tools_with(
      R"({"tool_choice": {"type": "function", "function": {"name": "add"}},
          "parallel_tool_calls": false})");
  const Grammar one = parse_gbnf(tool_call_grammar(named, ToolFormat::kJson));
  EXPECT_TRUE(accepts(one, "[" + a + "]"));
  EXPECT_FALSE(accepts(one, "[" + w + "]"));
  EXPECT_FALSE(accepts(one, "[" + a + "," + a + "]"));
  const Grammar llama = parse_gbnf(tool_call_grammar(required, ToolFormat::kLlama3Json));
  EXPECT_TRUE(accepts(llama, R"({"name":"add","parameters":{"a":1,"b":2}})"));
  EXPECT_FALSE(accepts(llama, a));  // Llama 3 writes "parameters"
  // Whatever the grammar takes, the parser reads back as the same calls.
  for (ToolFormat f :
       {ToolFormat::kHermes, ToolFormat::kLlama3Json, ToolFormat::kMistral, ToolFormat::kJson}) {
    const std::string out = f == ToolFormat::kHermes ? "<tool_call>\n" + a + "\n</tool_call>"
                            : f == ToolFormat::kLlama3Json
                                ? std::string(R"({"name":"add","parameters":{"a":1,"b":-2}})")
                                : "[" + a + "]";
    ASSERT_TRUE(accepts(parse_gbnf(tool_call_grammar(required, f)), out)) << tool_format_name(f);
    const ParsedToolOutput p = parse_tool_calls(out, f, kNames);
    ASSERT_EQ(p.calls.size(), 1u) << tool_format_name(f);
    EXPECT_EQ(json::parse(p.calls[0].arguments), json::parse(R"({"a":1,"b":-2})"));
  }
}

}  // namespace
}  // namespace tf
