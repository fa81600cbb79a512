#include "serving/serving_state.h"

#include <fmt/format.h>

#include <cmath>

namespace tf {

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
