#pragma once
// A model's conversation format, built once when the model loads and shared by every door, the
// CLI's `generate --chat` and batch files: the chat template (the model's own, the built-in one
// for its family, or an operator's override) parsed once, the tool-call format it writes (or the
// one --tool-call-parser names), and whether it writes think blocks. A template that does not
// parse does not stop the model from loading: the error is kept and every chat render reports
// it (completions still run).

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/tool_calls.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf {

class ChatFormat {
 public:
  // From a template's source. tool_format: the operator's choice, else told from the source;
  // kwargs: variables every render gets unless the request sets them (vLLM's
  // --chat-template-kwargs: Qwen3's enable_thinking).
  static std::shared_ptr<const ChatFormat> from_source(
      std::string source, std::optional<ToolFormat> tool_format = std::nullopt,
      nlohmann::json kwargs = nlohmann::json::object());
  // The model's template: its tokenizer's, else the built-in one for its family
  // (chat_template_source).
  static std::shared_ptr<const ChatFormat> for_model(
      const LoadedTokenizer& tokenizer, const ModelConfig& config,
      std::optional<ToolFormat> tool_format = std::nullopt);

  const std::string& source() const { return source_; }
  ToolFormat tool_format() const { return tool_format_; }
  // Whether the template writes think blocks (reasoning is split off the answer).
  bool reasons() const { return reasons_; }
  // The parse error ("" when the template parsed).
  const std::string& error() const { return error_; }

  // The conversation as prompt text (ChatTemplate::apply, kwargs over the format's own); throws
  // Error when the template did not parse or its render fails.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const std::string& bos_token, const std::string& eos_token,
                     const nlohmann::json& kwargs = nlohmann::json::object(),
                     const nlohmann::ordered_json& tools = nullptr) const;

 private:
  std::string source_;
  std::optional<ChatTemplate> template_;
  std::string error_;
  ToolFormat tool_format_ = ToolFormat::kJson;
  bool reasons_ = false;
  nlohmann::json kwargs_ = nlohmann::json::object();
};

// The chat template a model uses: its own, else the built-in one for its family.
std::string chat_template_source(const LoadedTokenizer& tokenizer, const ModelConfig& config);

// An operator's template (--chat-template, a model config's chat_template), as vLLM and
// llama-server take it: a built-in template's name ("chatml", "llama3", ...), a file, or the
// template itself (text holding "{{" or "{%"). Throws Error naming what it is not.
std::string chat_template_from_spec(const std::string& spec);
// --chat-template-kwargs: a JSON object of template variables; Error otherwise (what: the flag
// or field in the message).
nlohmann::json chat_template_kwargs_from_text(const std::string& text, const std::string& what);

}  // namespace tf
