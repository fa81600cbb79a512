#pragma once
// Chat templates: the Jinja2 programs Hugging Face models ship in tokenizer_config.json
// ("chat_template") that turn a conversation into the prompt text the model was trained on.
// Rendering matches Python's jinja2 as transformers configures it (sandboxed, trim_blocks,
// lstrip_blocks, raise_exception, strftime_now, tojson without HTML escaping) byte for byte, for
// the subset of Jinja2 chat templates use; anything outside it is refused with a tf::Error that
// names the construct and line.

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf {

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}
  std::string role;
  std::string content;
  // An assistant's tool calls as transformers hands them to templates: [{"id", "type":
  // "function", "function": {"name", "arguments": an object}}]; null when none.
  nlohmann::ordered_json tool_calls;
  std::string tool_call_id;  // a "tool" message: the call it answers
  std::string name;          // a "tool" (or "function") message: the function's name
  // An assistant's earlier reasoning, handed to templates under both names they read:
  // "reasoning_content" (Qwen3's) and "thinking" (gpt-oss's); neither when empty.
  std::string reasoning;
  bool operator==(const ChatMessage&) const = default;
};

// Bounds on one render, so that no template (or hostile input) runs away. Exceeding one is a
// tf::Error of kind kResourceExhausted.
struct ChatTemplateLimits {
  size_t max_output_bytes = size_t{64} << 20;  // the output, and any string built on the way
  int64_t max_steps = 50'000'000;              // evaluations, statements, loop iterations
  int max_depth = 500;                         // nested evaluation and macro calls
  std::chrono::milliseconds max_time{2000};    // wall time for one render (0: none)
};

class ChatTemplate {
 public:
  // Parses once; throws tf::Error naming an unsupported construct ("chat template: unsupported
  // tag 'include' at line 3") or the syntax error and its line.
  static ChatTemplate parse(std::string_view source);

  // Renders with an arbitrary context (messages, add_generation_prompt, bos_token, eos_token,
  // tools, ...). Dict order matters to tojson; nlohmann::json sorts object keys, ordered_json keeps
  // them as given (as Python's json.loads would). Errors (raise_exception, a type error, a limit)
  // throw tf::Error; raise_exception's message follows "chat template: " verbatim.
  std::string render(const nlohmann::ordered_json& context,
                     const ChatTemplateLimits& limits = {}) const;
  std::string render(const nlohmann::json& context, const ChatTemplateLimits& limits = {}) const;

  // messages + add_generation_prompt + bos_token + eos_token, plus `extra` (an object of more
  // variables: the chat API's chat_template_kwargs, e.g. Qwen3's enable_thinking), plus
  // `tools` when not null (the chat API's tools as sent, members in order).
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                    const std::string& bos_token, const std::string& eos_token,
                    const nlohmann::json& extra = nlohmann::json::object(),
                    const nlohmann::ordered_json& tools = nullptr) const;

 private:
  struct Parsed;
  explicit ChatTemplate(std::shared_ptr<const Parsed> parsed);

  std::shared_ptr<const Parsed> parsed_;  // immutable: renders may run concurrently
};

// Built-in templates for models that ship none: "chatml", "llama2", "llama3", "mistral",
// "zephyr", "gemma", "tinyllama" (zephyr's format), "qwen3", "gemma3", "phi4", "gpt-oss". Throws
// tf::Error for an unknown name, listing the known ones.
std::string builtin_chat_template(std::string_view family);
std::vector<std::string> builtin_chat_template_names();

}  // namespace tf
