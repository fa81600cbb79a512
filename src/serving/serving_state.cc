#include "serving/serving_state.h"

#include <fmt/format.h>

#include <cmath>

namespace tf {

void check_request_limits(const ServingLimits& limits, const GenerationRequest& r) {
  if (limits.max_prompt_tokens > 0 &&
      static_cast<int64_t>(r.prompt.size()) > limits.max_prompt_tokens) {
    throw HttpError(400,
                    fmt::format("the prompt has {} tokens; this server takes at most {}",
                                r.prompt.size(), limits.max_prompt_tokens),
                    "prompt_too_long", "prompt");
  }
  if (limits.max_tokens_cap > 0 && r.params.max_tokens > limits.max_tokens_cap) {
    throw HttpError(400,
                    fmt::format("'max_tokens' is {}; this server allows at most {}",
                                r.params.max_tokens, limits.max_tokens_cap),
                    "", "max_tokens");
  }
}

std::shared_ptr<Admission> ServingState::admit(const RequestRecord& record,
                                               const std::string& model, double tokens) {
  if (!record.key) return nullptr;
  const KeyPolicy& key = *record.key;
  if (!key.allows(model)) {
    throw HttpError(403, fmt::format("this API key may not use model '{}'", model),
                    "model_not_allowed");
  }
  const double wait = limiter.admit(key, tokens);
  if (wait > 0) {
    throw HttpError(
        429, fmt::format("rate limit of API key '{}' reached: retry in {:.1f} s", key.name, wait),
        "rate_limit_exceeded")
        .retry_after(static_cast<int>(std::ceil(wait)));
  }
  return std::make_shared<Admission>(limiter, key, tokens);
}

}  // namespace tf
