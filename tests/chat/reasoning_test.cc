// Reasoning (issue 24): <think> blocks split from the answer as vLLM's deepseek_r1 / qwen3
// parsers split them, whether the prompt opened the block or the output does, and the same
// split when the text streams in pieces that cut the markers anywhere.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "chat/reasoning.h"

namespace tf {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(TF_SOURCE_DIR) + "/tests/chat/chat_templates/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << "no fixture " << name;  // a moved file is a failure
  return ss.str();
}

TEST(Reasoning, TemplatesAndPrompts) {
  EXPECT_TRUE(template_reasons(fixture("qwen3.jinja")));
  EXPECT_TRUE(template_reasons(fixture("qwen3_thinking_2507.jinja")));
  EXPECT_FALSE(template_reasons(fixture("qwen2.5_instruct.jinja")));
  EXPECT_FALSE(template_reasons(fixture("llama3.1_instruct.jinja")));
  EXPECT_TRUE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n"));
}

TEST(Reasoning, Splits) {
  auto check = [](const std::string& text, bool opened, std::optional<std::string> reasoning,
                  const std::string& content) {
    const ReasoningSplit s = split_reasoning(text, opened);
    EXPECT_EQ(s.reasoning, reasoning) << text;
    EXPECT_EQ(s.content, content) << text;
  };
  check("<think>\nWhy? Because.\n</think>\n\nThe answer.", false, "\nWhy? Because.\n",
        "The answer.");
  check("The answer, no thinking.", false, std::nullopt, "The answer, no thinking.");
  check("  <think>cut short by max_tokens", false, "cut short by max_tokens", "");
  check("Because.\n</think>\n\nAnswer", true, "Because.\n", "Answer");
  check("still thinking", true, "still thinking", "");
  check("a <think> in the middle", false, std::nullopt, "a <think> in the middle");
}

TEST(Reasoning, StreamingEqualsTheWholeSplit) {
  const std::pair<std::string, bool> cases[] = {
      {"<think>\nWhy? Because.\n</think>\n\nThe answer.", false},
      {"The answer, no thinking.", false},
      {"  <think>cut short", false},
      {"<thi", false},
      {"Because.\n</think>\n\nAnswer", true},
      {"still </thin", true},
      {"<think>a</think>", false},
  };
  for (const auto& [text, opened] : cases) {
    const ReasoningSplit whole = split_reasoning(text, opened);
    for (size_t piece : {1u, 2u, 3u, 5u, 100u}) {
      ReasoningStream s(opened);
      std::string reasoning, content;
      for (size_t at = 0; at < text.size(); at += piece) {
        const auto d = s.push(text.substr(at, piece));
        reasoning += d.reasoning;
        content += d.content;
        EXPECT_EQ(reasoning.find("</think>"), std::string::npos);
      }
      const auto d = s.finish();
      reasoning += d.reasoning;
      content += d.content;
      EXPECT_EQ(reasoning, whole.reasoning.value_or("")) << text << " / " << piece;
      EXPECT_EQ(content, whole.content) << text << " / " << piece;
    }
  }
}

}  // namespace
}  // namespace tf
