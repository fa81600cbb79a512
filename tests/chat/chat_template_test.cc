// A chat template is an operator's file run on every request (issue 49): its render stops at a
// wall-time limit as well as at its step and size limits, and as soon as its request is
// cancelled (the client left), instead of holding a preparation thread for seconds.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "chat/chat_template.h"
#include "core/cancel.h"
#include "core/error.h"

namespace tf {
namespace {

// Ten billion loop iterations: far past any time limit, within the step limit set below.
const char* const kRunaway =
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";

using Clock = std::chrono::steady_clock;

TEST(ChatTemplateLimits, ARenderStopsAtItsTimeLimit) {
  ChatTemplateLimits limits;
  limits.max_steps = int64_t{1} << 60;
  limits.max_time = std::chrono::milliseconds(100);
  const ChatTemplate t = ChatTemplate::parse(kRunaway);
  const auto start = Clock::now();
  try {
    t.render(nlohmann::ordered_json::object(), limits);
    FAIL() << "the render must not finish";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("longer than 100 ms"), std::string::npos) << e.what();
  }
  // Stopped soon after the limit (a generous bound: a loaded machine, sanitizers).
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(20));
}

TEST(ChatTemplateLimits, ARenderStopsWhenItsRequestIsCancelled) {
  ChatTemplateLimits limits;
  limits.max_steps = int64_t{1} << 60;
  limits.max_time = std::chrono::milliseconds(0);  // none: only the cancel can stop it
  const ChatTemplate t = ChatTemplate::parse(kRunaway);
  CancelToken token;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    token.cancel();
  });
  CancelScope scope(&token);
  try {
    t.render(nlohmann::ordered_json::object(), limits);
    ADD_FAILURE() << "the render must not finish";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCancelled) << e.what();
  }
  canceller.join();
}

}  // namespace
}  // namespace tf

namespace tf {
namespace {

// An assistant turn's earlier reasoning reaches the template under both names templates read:
// Qwen3's reasoning_content and gpt-oss's thinking; a turn without any carries neither key.
TEST(ChatTemplateApply, ReasoningReachesTemplatesUnderBothNames) {
  const ChatTemplate t = ChatTemplate::parse(
      "{% for m in messages %}[{{ m.role }}|{{ m.reasoning_content is defined }}|"
      "{{ m.thinking if 'thinking' in m else '-' }}|{{ m.content }}]{% endfor %}");
  ChatMessage user("user", "2 + 2?");
  ChatMessage answer("assistant", "4");
  answer.reasoning = "Add them.";
  EXPECT_EQ(t.apply({user, answer}, false, "", ""),
            "[user|False|-|2 + 2?][assistant|True|Add them.|4]");
}

}  // namespace
}  // namespace tf
