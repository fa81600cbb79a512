#pragma once
// OpenAI-style request bodies (/v1/completions, /v1/chat/completions) into what the engine runs:
// the prompt's token ids and SamplingParams. Every parameter keeps its OpenAI name and meaning,
// plus the extensions vLLM accepts (top_k, min_p, repetition_penalty, min_tokens, ignore_eos,
// stop_token_ids, skip_special_tokens, ...). A wrong type or range throws Error naming the field.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "model/model_config.h"
#include "sampling/sampling_params.h"
#include "serving/completion_request.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf {

// The sampling parameters of a body. chat: max_completion_tokens, logprobs as a bool with
// top_logprobs. default_max_tokens applies when the body gives none.
// Limits on "stop": strings per request and their bytes in all.
inline constexpr size_t kMaxStopStrings = 32;
inline constexpr size_t kMaxStopBytes = 16384;
// Chat messages (and Responses input items) one request may carry: each is rendered through
// the chat template, so their count is work, not only bytes.
inline constexpr size_t kMaxMessages = 4096;
// Token ids a /tokenize answer or a /detokenize request may hold.
inline constexpr size_t kMaxTokenIds = size_t{1} << 20;

// A token id from JSON: an integer in 0..2^31-1, else an Error naming key (no wrapping: 2^32
// is not token 0).
int32_t token_id(const nlohmann::json& v, const char* key);

SamplingParams parse_sampling_params(const nlohmann::json& body, bool chat,
                                     int32_t default_max_tokens);

// A prompt's text as ids. With a context (> 0), a text whose length alone proves it cannot fit
// (Tokenizer::min_tokens_for_bytes >= context) is refused before it is encoded: HttpError 400
// context_length_exceeded naming field. The encoding stops at the thread's CancelToken.
std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view text,
                                   bool add_special_tokens, int64_t context, const char* field);

// Every prompt of a completions body as sent: a string, a list of strings, a list of token ids,
// or a list of lists of token ids (none empty).
std::vector<PromptInput> read_completion_prompts(const nlohmann::json& body,
                                                 const char* field = "prompt");

// The messages of a chat body, checked: a non-empty list of objects with a string role and a
// string (or list of text parts) content.
std::vector<ChatMessage> read_chat_messages(const nlohmann::json& body);

// Chat messages rendered with the model's chat template (or the built-in one for its family),
// then tokenized without adding special tokens again (refused before that when the rendered
// text cannot fit the model's context, as encode_prompt does).
std::vector<int32_t> render_chat_prompt(
    const std::vector<ChatMessage>& messages, bool add_generation_prompt,
    const LoadedTokenizer& tokenizer, const ModelConfig& config,
    const nlohmann::json& template_kwargs = nlohmann::json::object(),
    const nlohmann::ordered_json& tools = nullptr, std::string* text = nullptr);

// The stop strings' limits (kMaxStopStrings, kMaxStopBytes): FieldError naming "stop".
void check_stop_limits(const SamplingParams& params);

// The chat template a model uses: its own, else the built-in one for its family.
std::string chat_template_source(const LoadedTokenizer& tokenizer, const ModelConfig& config);

}  // namespace tf
