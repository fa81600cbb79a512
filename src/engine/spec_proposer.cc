#include "engine/spec_proposer.h"

#include <algorithm>

#include "core/error.h"

namespace tf {

std::vector<int32_t> ngram_propose(std::span<const int32_t> tokens, const NgramConfig& c) {
  if (c.min_n < 1 || c.max_n < c.min_n || c.num_tokens < 1)
    fail("n-gram speculation needs 1 <= min_n <= max_n and num_tokens >= 1 (got {}, {}, {})",
         c.min_n, c.max_n, c.num_tokens);
  const int64_t len = static_cast<int64_t>(tokens.size());
  const int64_t lowest = c.max_window > 0 ? std::max<int64_t>(0, len - c.max_window) : 0;
  for (int64_t n = std::min<int64_t>(c.max_n, len - 1); n >= c.min_n; --n) {
    const auto suffix = tokens.subspan(static_cast<size_t>(len - n));
    // The most recent earlier occurrence: it starts before the suffix does and leaves at least
    // one token after it to propose.
    for (int64_t start = len - n - 1; start >= lowest; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t count = std::min<int64_t>(c.num_tokens, len - from);
      return {tokens.begin() + from, tokens.begin() + from + count};
    }
  }
  return {};
}

}  // namespace tf
