#include "chat/chat_format.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/reasoning.h"
#include "core/error.h"
#include "core/json.h"

namespace tf {

std::shared_ptr<const ChatFormat> ChatFormat::from_source(std::string source,
                                                          std::optional<ToolFormat> tool_format,
                                                          nlohmann::json kwargs) {
  auto f = std::make_shared<ChatFormat>();
  f->source_ = std::move(source);
  f->kwargs_ = kwargs.is_object() ? std::move(kwargs) : nlohmann::json::object();
  try {
    f->template_.emplace(ChatTemplate::parse(f->source_));
  } catch (const Error& e) {
    f->error_ = e.what();
  }
  f->tool_format_ = tool_format ? *tool_format : detect_tool_format(f->source_);
  // Harmony's analysis channel is the reasoning, whatever the template says of think blocks.
  f->reasons_ = template_reasons(f->source_) || f->tool_format_ == ToolFormat::kHarmony;
  return f;
}

std::shared_ptr<const ChatFormat> ChatFormat::for_model(const LoadedTokenizer& tokenizer,
                                                        const ModelConfig& config,
                                                        std::optional<ToolFormat> tool_format) {
  return from_source(chat_template_source(tokenizer, config), tool_format);
}

std::string ChatFormat::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                               const std::string& bos_token, const std::string& eos_token,
                               const nlohmann::json& kwargs,
                               const nlohmann::ordered_json& tools) const {
  if (!template_) fail(ErrorKind::kInvalidArgument, "{}", error_);
  if (kwargs_.empty())
    return template_->apply(messages, add_generation_prompt, bos_token, eos_token, kwargs, tools);
  nlohmann::json merged = kwargs_;
  if (kwargs.is_object())
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) merged[it.key()] = it.value();
  return template_->apply(messages, add_generation_prompt, bos_token, eos_token, merged, tools);
}

std::string chat_template_source(const LoadedTokenizer& tokenizer, const ModelConfig& config) {
  if (!tokenizer.chat_template.empty()) return tokenizer.chat_template;
  const std::string& a = config.architecture;
  if (a == "Qwen3ForCausalLM" || a == "Qwen3MoeForCausalLM") return builtin_chat_template("qwen3");
  if (a == "Qwen2ForCausalLM" || a == "Qwen2MoeForCausalLM" || a == "GPT2LMHeadModel")
    return builtin_chat_template("chatml");
  if (a == "MistralForCausalLM" || a == "MixtralForCausalLM")
    return builtin_chat_template("mistral");
  if (a == "Gemma3ForCausalLM") return builtin_chat_template("gemma3");
  if (a == "GemmaForCausalLM" || a == "Gemma2ForCausalLM") return builtin_chat_template("gemma");
  if (a == "Phi3ForCausalLM" && config.vocab_size == 100352) return builtin_chat_template("phi4");
  if (a == "GptOssForCausalLM") return builtin_chat_template("gpt-oss");
  if (config.vocab_size >= 128000) return builtin_chat_template("llama3");
  return builtin_chat_template("llama2");
}

std::string chat_template_from_spec(const std::string& spec) {
  if (spec.find("{{") != std::string::npos || spec.find("{%") != std::string::npos) return spec;
  std::error_code ec;
  if (std::filesystem::is_regular_file(spec, ec)) {
    std::ifstream in(spec, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (!in && !in.eof())
      fail(ErrorKind::kInvalidArgument, "chat template {}: cannot read it", spec);
    if (ss.str().size() > (size_t{1} << 20))
      fail(ErrorKind::kInvalidArgument, "chat template {}: larger than 1 MiB", spec);
    return ss.str();
  }
  try {
    return builtin_chat_template(spec);
  } catch (const Error&) {
    fail(ErrorKind::kInvalidArgument,
         "chat template '{}' is neither a file, a template, nor a built-in template's name "
         "(chatml, llama2, llama3, mistral, zephyr, gemma, gemma3, tinyllama, qwen3, phi4)",
         spec);
  }
}

nlohmann::json chat_template_kwargs_from_text(const std::string& text, const std::string& what) {
  nlohmann::json kw;
  try {
    kw = parse_json(text, what);
  } catch (const Error& e) {
    fail(ErrorKind::kInvalidArgument, "{}: {}", what, e.what());
  }
  if (!kw.is_object()) fail(ErrorKind::kInvalidArgument, "{} must be a JSON object", what);
  for (const char* reserved : {"messages", "add_generation_prompt", "bos_token", "eos_token"})
    if (kw.contains(reserved))
      fail(ErrorKind::kInvalidArgument, "{} may not set '{}' (the request's own)", what, reserved);
  return kw;
}

}  // namespace tf
