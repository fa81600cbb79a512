// The harmony response format (gpt-oss, issue 53), from OpenAI's description of it: an assistant
// turn's messages on the analysis, commentary and final channels split into reasoning, content
// and tool calls, whichever order the header's words come in, and the same split when the output
// streams in pieces that cut its markers anywhere.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chat/harmony.h"
#include "chat/output_stream.h"
#include "chat/tool_calls.h"
#include "sampling/grammar.h"

namespace tf {
namespace {

// The format description's example turn: reasoning, a call, (the tool's answer in the next
// prompt), then the answer.
const std::string kCall =
    "<|channel|>analysis<|message|>Need to use function get_weather.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    "<|message|>{\"location\":\"San Francisco\"}<|call|>";
const std::string kAnswer =
    "<|channel|>analysis<|message|>User asks: \"What is 2 + 2?\" Simple arithmetic. Provide "
    "answer.<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>";

TEST(Harmony, ParsesMessagesAndHeaders) {
  const auto m = parse_harmony(kCall);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].channel, "analysis");
  EXPECT_EQ(m[0].body, "Need to use function get_weather.");
  EXPECT_TRUE(m[0].complete);
  EXPECT_EQ(m[1].channel, "commentary");
  EXPECT_EQ(m[1].recipient, "functions.get_weather");
  EXPECT_EQ(m[1].content_type, "json");
  EXPECT_EQ(m[1].body, "{\"location\":\"San Francisco\"}");
  // The recipient before the channel, a bare content type, and a body the output cut short.
  const auto r = parse_harmony(
      "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{\"q\": 1}");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].recipient, "functions.lookup");
  EXPECT_EQ(r[0].channel, "commentary");
  EXPECT_EQ(r[0].content_type, "json");
  EXPECT_FALSE(r[0].complete);
}

TEST(Harmony, SplitsReasoningContentAndCalls) {
  HarmonySplit s = split_harmony(kAnswer, {});
  EXPECT_TRUE(s.has_reasoning);
  EXPECT_EQ(s.reasoning, "User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.");
  EXPECT_EQ(s.content, "2 + 2 = 4.");
  EXPECT_TRUE(s.calls.empty());

  s = split_harmony(kCall, {"get_weather"});
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].name, "get_weather");
  EXPECT_EQ(s.calls[0].arguments, "{\"location\":\"San Francisco\"}");
  EXPECT_EQ(s.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_FALSE(s.has_content);
  // A tool that was not offered, or arguments that are not a JSON object: content, as written.
  s = split_harmony(kCall, {"other"});
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "{\"location\":\"San Francisco\"}");
  s = split_harmony("<|channel|>commentary to=functions.get_weather<|message|>not json<|call|>",
                    {"get_weather"});
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "not json");
  // A preamble (commentary with no recipient) is content; text of no channel is kept.
  s = split_harmony("<|channel|>commentary<|message|>Checking.<|end|>", {});
  EXPECT_EQ(s.content, "Checking.");
  s = split_harmony("plain words", {});
  EXPECT_EQ(s.content, "plain words");
  EXPECT_FALSE(s.has_reasoning);
}

TEST(Harmony, StreamsTheSameSplitWhereverThePiecesCut) {
  for (const std::string& text : {kAnswer, kCall}) {
    const HarmonySplit whole = split_harmony(text, {"get_weather"});
    for (size_t piece : {1u, 2u, 3u, 7u, 64u}) {
      HarmonyStream stream;
      std::string reasoning, content;
      for (size_t at = 0; at < text.size(); at += piece) {
        const HarmonyStream::Delta d = stream.push(text.substr(at, piece));
        // Nothing of a marker ever leaks into what is sent.
        EXPECT_EQ(d.reasoning.find("<|"), std::string::npos) << d.reasoning;
        EXPECT_EQ(d.content.find("<|"), std::string::npos) << d.content;
        reasoning += d.reasoning;
        content += d.content;
      }
      HarmonyStream::Delta rest;
      const HarmonySplit s = stream.finish({"get_weather"}, rest);
      reasoning += rest.reasoning;
      content += rest.content;
      EXPECT_EQ(reasoning, whole.reasoning) << "pieces of " << piece;
      EXPECT_EQ(content, whole.content) << "pieces of " << piece;
      EXPECT_EQ(s.calls.size(), whole.calls.size());
    }
  }
}

TEST(Harmony, ChatAnswersOfAHarmonyModel) {
  // The format is told from the template (gpt-oss's writes <|channel|>) and by parser name.
  EXPECT_EQ(detect_tool_format("{{- '<|start|>assistant<|channel|>final<|message|>' }}"),
            ToolFormat::kHarmony);
  EXPECT_EQ(tool_format_named("openai"), ToolFormat::kHarmony);
  auto tools = std::make_shared<ToolRequest>();
  tools->names = {"get_weather"};
  // Without tools the reasoning is split off all the same; with them, calls are parsed.
  ChatAnswerShape plain{true, false, nullptr, ToolFormat::kHarmony};
  ChatAnswerShape::Whole w = plain.split(kAnswer);
  EXPECT_EQ(w.reasoning, "User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.");
  EXPECT_EQ(w.content, "2 + 2 = 4.");
  ChatAnswerShape with_tools{true, false, tools, ToolFormat::kHarmony};
  w = with_tools.split(kCall);
  ASSERT_EQ(w.calls.size(), 1u);
  EXPECT_EQ(w.calls[0].name, "get_weather");
  EXPECT_FALSE(w.content.has_value());  // OpenAI's null: a call and no text
  EXPECT_EQ(parse_tool_calls(kCall, ToolFormat::kHarmony, {"get_weather"}).calls.size(), 1u);
  // Streamed through the chat door's stream: the same pieces.
  ChatOutputStream stream = with_tools.stream();
  std::string reasoning, content;
  std::vector<ToolCall> calls;
  for (size_t at = 0; at < kCall.size(); at += 5) {
    const bool done = at + 5 >= kCall.size();
    ChatOutputStream::Delta d = stream.push(std::string_view(kCall).substr(at, 5), done);
    reasoning += d.reasoning;
    content += d.content;
    if (done) calls = d.calls;
  }
  EXPECT_EQ(reasoning, "Need to use function get_weather.");
  EXPECT_EQ(content, "");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments, "{\"location\":\"San Francisco\"}");
}

// Streams of every shape (text before a header, whitespace-only stray text, preambles, calls to
// unknown recipients, headers never closed, bodies never ended), cut into random pieces: the
// deltas add up to the whole split, and a long answer streams in linear time (one message of
// 400 KB in 1-byte pieces would take minutes if each push re-read the answer).
TEST(Harmony, StreamedPiecesAddUpToTheWholeSplit) {
  const std::vector<std::string> texts = {
      "stray words<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final"
      "<|message|>done<|return|>",
      "  \n<|channel|>final<|message|>a<|end|>  <|start|>assistant<|channel|>commentary"
      "<|message|>preamble<|end|><|start|>assistant<|channel|>final<|message|>b",
      "<|channel|>commentary to=browser.search <|constrain|>json<|message|>{\"q\":1}<|call|>",
      "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final",
      "<|channel|>analysis<|message|>half a thought <|en",
      "plain text, no channels at all <| not a marker |>",
  };
  uint64_t rng = 7;
  auto next = [&] {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<size_t>(rng >> 33);
  };
  for (bool opened : {false, true}) {
    for (const std::string& text : texts) {
      const HarmonySplit whole = split_harmony(text, {"get_weather"}, opened);
      for (int trial = 0; trial < 20; ++trial) {
        HarmonyStream stream(opened);
        std::string reasoning, content;
        for (size_t at = 0; at < text.size();) {
          const size_t n = 1 + next() % 9;
          const HarmonyStream::Delta d = stream.push(text.substr(at, n));
          reasoning += d.reasoning;
          content += d.content;
          at += n;
        }
        HarmonyStream::Delta rest;
        stream.finish({"get_weather"}, rest);
        EXPECT_EQ(reasoning + rest.reasoning, whole.reasoning) << text << " opened " << opened;
        EXPECT_EQ(content + rest.content, whole.content) << text << " opened " << opened;
      }
    }
  }
  HarmonyStream stream;
  std::string body(400000, 'w'), got;
  got += stream.push("<|channel|>final<|message|>").content;
  for (char c : body) got += stream.push(std::string_view(&c, 1)).content;
  EXPECT_EQ(got, body);
}

// A prompt that ends inside the analysis channel: the output starts in the thought.
TEST(Harmony, AnOpenedThoughtIsReasoning) {
  const std::string out =
      "the sky scatters blue<|end|><|start|>assistant<|channel|>final<|message|>Rayleigh.";
  const HarmonySplit s = split_harmony(out, {}, true);
  EXPECT_EQ(s.reasoning, "the sky scatters blue");
  EXPECT_EQ(s.content, "Rayleigh.");
  HarmonyStream stream(true);
  std::string reasoning, content;
  for (size_t i = 0; i < out.size(); i += 5) {
    const HarmonyStream::Delta d = stream.push(out.substr(i, 5));
    reasoning += d.reasoning;
    content += d.content;
  }
  HarmonyStream::Delta rest;
  stream.finish({}, rest);
  EXPECT_EQ(reasoning + rest.reasoning, s.reasoning);
  EXPECT_EQ(content + rest.content, s.content);
}

// Forced calls: the grammar takes the format description's call (its thought first, or none)
// for the right tool's arguments only, through the special tokens themselves, and the split of
// what it took is that call.
TEST(Harmony, ForcedCallGrammarTakesOneCallOfAnOfferedTool) {
  const std::vector<std::string> specials = {"<|channel|>", "<|message|>", "<|end|>", "<|start|>",
                                             "<|constrain|>"};
  std::vector<std::string> bytes;
  std::map<std::string, uint32_t, std::less<>> ids;
  for (const std::string& s : specials) {
    ids[s] = static_cast<uint32_t>(bytes.size());
    bytes.push_back("");
  }
  for (int c = 0x20; c < 0x7F; ++c) bytes.push_back(std::string(1, static_cast<char>(c)));
  const GrammarVocab vocab(bytes, ids);
  ToolRequest tools;
  tools.names = {"get_weather", "get"};
  tools.parameters = {
      {{"type", "object"},
       {"properties", {{"location", {{"type", "string"}}}}},
       {"required", {"location"}}},
      {{"type", "object"}, {"properties", {{"n", {{"type", "integer"}}}}}, {"required", {"n"}}}};
  tools.choice = ToolRequest::kRequired;
  const auto g = vocab.compile(tool_call_grammar(tools, ToolFormat::kHarmony));
  // Feeds harmony text: its markers as their tokens, the rest a character at a time.
  auto feed = [&](const std::string& text) {
    GrammarMatcher m(g->grammar());
    for (size_t i = 0; i < text.size();) {
      bool ok = false;
      size_t len = 1;
      if (text[i] == '<' && text.compare(i, 2, "<|") == 0) {
        len = text.find("|>", i) + 2 - i;
        const uint32_t id = ids.at(text.substr(i, len));
        ok = g->allowed(m)[id] && m.accept_token(id, "");
      } else {
        ok = m.accept_token(static_cast<uint32_t>(specials.size()) + (text[i] - 0x20),
                            text.substr(i, 1));
      }
      if (!ok) return false;
      i += len;
    }
    return m.must_end();
  };
  const std::string call =
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
      "{\"location\":\"San Francisco\"}";
  EXPECT_TRUE(feed(call));
  EXPECT_TRUE(
      feed("<|channel|>analysis<|message|>Need to use function get_weather.<|end|>"
           "<|start|>assistant" +
           call));
  EXPECT_TRUE(feed("<|channel|>commentary to=functions.get json<|message|>{\"n\":3}"));
  EXPECT_FALSE(feed("<|channel|>commentary to=functions.get json<|message|>{\"location\":\"x\"}"));
  EXPECT_FALSE(feed("<|channel|>commentary to=functions.put json<|message|>{\"n\":3}"));
  EXPECT_FALSE(feed("<|channel|>final<|message|>{\"n\":3}"));
  // The tokens spelled as text are not the markers.
  GrammarMatcher m(g->grammar());
  EXPECT_FALSE(m.accept("<|channel|>"));
  const HarmonySplit s = split_harmony(call, tools.names);
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].name, "get_weather");
  EXPECT_EQ(s.calls[0].arguments, "{\"location\":\"San Francisco\"}");

  tools.choice = ToolRequest::kNamed;  // a named function: only its calls
  tools.named = "get";
  const auto named = vocab.compile(tool_call_grammar(tools, ToolFormat::kHarmony));
  GrammarMatcher n(named->grammar());
  ASSERT_TRUE(n.accept_token(ids.at("<|channel|>"), ""));
  EXPECT_TRUE(GrammarMatcher(n).accept("commentary to=functions.get "));
  EXPECT_FALSE(GrammarMatcher(n).accept("commentary to=functions.get_"));

  // A response format: the final channel's body.
  const auto fin = vocab.compile(harmony_final_grammar("root ::= \"yes\" | \"no\"\n"));
  GrammarMatcher f(fin->grammar());
  ASSERT_TRUE(f.accept_token(ids.at("<|channel|>"), ""));
  ASSERT_TRUE(f.accept("final"));
  ASSERT_TRUE(f.accept_token(ids.at("<|message|>"), ""));
  ASSERT_TRUE(f.accept("no"));
  EXPECT_TRUE(f.must_end());
}

}  // namespace
}  // namespace tf
