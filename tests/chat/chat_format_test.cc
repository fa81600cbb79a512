// ChatFormat: the template parsed once at load, the tool format and think blocks told once, an
// operator's template and variables (--chat-template, --chat-template-kwargs) read and refused
// as vLLM's flags are.
#include "chat/chat_format.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace tf {
namespace {

using json = nlohmann::json;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatFormat, BuiltOnceWithToolFormatReasoningAndDefaultVariables) {
  const auto f = ChatFormat::from_source(builtin_chat_template("qwen3"), std::nullopt,
                                         json{{"enable_thinking", false}});
  EXPECT_EQ(f->error(), "");
  EXPECT_EQ(f->tool_format(), ToolFormat::kHermes);  // told from the template's markers
  EXPECT_TRUE(f->reasons());
  const std::vector<ChatMessage> msgs = {{"user", "hi"}};
  // The format's variables apply unless the request sets its own.
  const std::string off = f->render(msgs, true, "", "");
  EXPECT_NE(off.find("<think>\n\n</think>"), std::string::npos) << off;
  const std::string on = f->render(msgs, true, "", "", json{{"enable_thinking", true}});
  EXPECT_EQ(on.find("<think>\n\n</think>"), std::string::npos) << on;
  // The operator's parser wins over the template's markers.
  EXPECT_EQ(
      ChatFormat::from_source(builtin_chat_template("qwen3"), ToolFormat::kMistral)->tool_format(),
      ToolFormat::kMistral);
  const auto plain = ChatFormat::from_source(builtin_chat_template("chatml"));
  EXPECT_FALSE(plain->reasons());
  EXPECT_EQ(plain->render(msgs, true, "", ""),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

// A gpt-oss checkpoint without a template of its own gets the harmony builtin.
TEST(ChatFormat, AGptOssModelWithoutATemplateSpeaksHarmony) {
  ModelConfig config;
  config.architecture = "GptOssForCausalLM";
  config.vocab_size = 201088;
  const auto f = ChatFormat::for_model(LoadedTokenizer{}, config);
  EXPECT_EQ(f->error(), "");
  EXPECT_EQ(f->tool_format(), ToolFormat::kHarmony);
  EXPECT_TRUE(f->reasons());
  const std::string prompt = f->render({{"user", "hi"}}, true, "", "");
  EXPECT_TRUE(prompt.ends_with("<|start|>user<|message|>hi<|end|><|start|>assistant")) << prompt;
  EXPECT_NE(prompt.find("Reasoning: medium"), std::string::npos) << prompt;
}

TEST(ChatFormat, ATemplateThatDoesNotParseIsKeptAsTheError) {
  const auto f = ChatFormat::from_source("{% for m in messages %}{{ m.content }}");
  EXPECT_NE(f->error(), "");
  const std::string e = error_of([&] { (void)f->render({{"user", "hi"}}, true, "", ""); });
  EXPECT_EQ(e, f->error());
}

TEST(ChatFormat, TemplateSpecsAreANameAFileOrTheTemplate) {
  EXPECT_EQ(chat_template_from_spec("chatml"), builtin_chat_template("chatml"));
  EXPECT_EQ(chat_template_from_spec("{{ messages[0].content }}"), "{{ messages[0].content }}");
  const std::string path =
      (std::filesystem::temp_directory_path() / "tf_chat_format_test.jinja").string();
  {
    std::ofstream out(path);
    out << "{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}";
  }
  const auto f = ChatFormat::from_source(chat_template_from_spec(path));
  EXPECT_EQ(f->render({{"user", "hi"}}, false, "", ""), "[user] hi");
  std::remove(path.c_str());
  const std::string e = error_of([] { (void)chat_template_from_spec("no-such-template"); });
  EXPECT_NE(e.find("neither a file, a template, nor a built-in template's name"), std::string::npos)
      << e;
}

TEST(ChatFormat, KwargsMustBeAnObjectThatLeavesTheRequestsOwnFieldsAlone) {
  EXPECT_EQ(chat_template_kwargs_from_text(R"({"enable_thinking": false})", "--x"),
            (json{{"enable_thinking", false}}));
  EXPECT_NE(error_of([] {
              (void)chat_template_kwargs_from_text("[1]", "--x");
            }).find("--x must be a JSON object"),
            std::string::npos);
  EXPECT_NE(error_of([] { (void)chat_template_kwargs_from_text("{oops", "--x"); }).find("--x"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              (void)chat_template_kwargs_from_text(R"({"messages": []})", "--x");
            }).find("may not set 'messages'"),
            std::string::npos);
}

}  // namespace
}  // namespace tf
