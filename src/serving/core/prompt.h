#pragma once
// Prompts into token ids, for every door: a text encoded under the model's context limit, chat
// messages rendered with the model's chat format; and a token back into the bytes that
// logprobs show.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_format.h"
#include "model/model_config.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf {

// A prompt's text as ids. With a context (> 0), a text whose length alone proves it cannot fit
// (Tokenizer::min_tokens_for_bytes >= context) is refused before it is encoded: HttpError 400
// context_length_exceeded naming field. The encoding stops at the thread's CancelToken.
std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view text,
                                   bool add_special_tokens, int64_t context, const char* field);

// Chat messages rendered with the model's chat format (chat/chat_format.h: its template parsed
// once at load), then tokenized without adding special tokens again (refused before that when
// the rendered text cannot fit the context, as encode_prompt does).
std::vector<int32_t> render_chat_prompt(
    const ChatFormat& chat, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
    const LoadedTokenizer& tokenizer, int64_t context,
    const nlohmann::json& template_kwargs = nlohmann::json::object(),
    const nlohmann::ordered_json& tools = nullptr, std::string* text = nullptr);

// A token's bytes as logprobs show it (its id as text without a tokenizer).
std::string token_bytes(const Tokenizer* tok, int32_t id);
// Generated tokens' logprobs in the shape OpenAI's chat API set and Ollama's follows:
// [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}].
nlohmann::ordered_json token_logprobs_json(const Tokenizer* tok,
                                           const std::vector<SampleResult>& lps);

}  // namespace tf
