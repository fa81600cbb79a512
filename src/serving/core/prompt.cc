#include "serving/core/prompt.h"

#include <fmt/format.h>

#include "chat/chat_format.h"
#include "core/error.h"
#include "serving/core/api_common.h"

namespace tf {

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view text,
                                   bool add_special_tokens, int64_t context, const char* field) {
  if (context > 0) {
    const size_t at_least = tokenizer.min_tokens_for_bytes(text.size());
    if (at_least >= static_cast<size_t>(context)) {
      throw HttpError(400,
                      fmt::format("This model's maximum context length is {} tokens, the prompt "
                                  "has at least {} tokens ({} bytes)",
                                  context, at_least, text.size()),
                      "context_length_exceeded", field);
    }
  }
  return tokenizer.encode(text, add_special_tokens);
}

std::vector<int32_t> render_chat_prompt(
    const ChatFormat& chat, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
    const LoadedTokenizer& tokenizer, int64_t context, const nlohmann::json& template_kwargs,
    const nlohmann::ordered_json& tools, std::string* text_out) {
  if (!tokenizer.tokenizer) fail("this model has no tokenizer, so it cannot take chat messages");
  const std::string text = chat.render(messages, add_generation_prompt, tokenizer.bos_token,
                                       tokenizer.eos_token, template_kwargs, tools);
  if (text_out) *text_out = text;
  return encode_prompt(*tokenizer.tokenizer, text, /*add_special_tokens=*/false, context,
                       "messages");
}

std::string token_bytes(const Tokenizer* tok, int32_t id) {
  if (!tok) return std::to_string(id);
  const int32_t one[] = {id};
  return tok->decode_bytes(one, /*skip_special_tokens=*/false);
}

nlohmann::ordered_json token_logprobs_json(const Tokenizer* tok,
                                           const std::vector<SampleResult>& lps) {
  const auto bytes = [](const std::string& t) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (unsigned char c : t) out.push_back(static_cast<int>(c));
    return out;
  };
  nlohmann::ordered_json content = nlohmann::ordered_json::array();
  for (const auto& r : lps) {
    const std::string t = token_bytes(tok, r.token);
    nlohmann::ordered_json top = nlohmann::ordered_json::array();
    for (const auto& alt : r.top) {
      const std::string a = token_bytes(tok, alt.token);
      top.push_back({{"token", a}, {"logprob", alt.logprob}, {"bytes", bytes(a)}});
    }
    content.push_back(
        {{"token", t}, {"logprob", r.logprob}, {"bytes", bytes(t)}, {"top_logprobs", top}});
  }
  return content;
}

}  // namespace tf
