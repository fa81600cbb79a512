#pragma once
// tokenflow's request fields under the names every door shares (OpenAI's, plus the extensions
// vLLM accepts: top_k, min_p, repetition_penalty, min_tokens, ignore_eos, stop_token_ids,
// skip_special_tokens, ...): the sampling parameters of a JSON object, token ids, and the limits
// on what one request may hold. The OpenAI doors, Predict's tokenflow signature and batch files
// read through these; other doors map their own names onto SamplingParams and check the same
// limits. A wrong type or range throws FieldError naming the field.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "sampling/sampling_params.h"

namespace tf {

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
// A list of token ids (each as token_id reads it).
std::vector<int32_t> token_ids(const nlohmann::json& v, const char* key);

// The sampling parameters of a body. chat: max_completion_tokens, logprobs as a bool with
// top_logprobs. default_max_tokens applies when the body gives none.
SamplingParams parse_sampling_params(const nlohmann::json& body, bool chat,
                                     int32_t default_max_tokens);

// The stop strings' limits (kMaxStopStrings, kMaxStopBytes): FieldError naming "stop".
void check_stop_limits(const SamplingParams& params);

}  // namespace tf
