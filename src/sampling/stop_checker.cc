#include "sampling/stop_checker.h"

#include <algorithm>

namespace tf {

StopChecker::StopChecker(std::vector<std::string> stop, bool include_stop_in_output)
    : stop_(std::move(stop)), include_(include_stop_in_output) {}

std::string StopChecker::push(std::string_view text) {
  if (stopped_) return "";
  pending_.append(text);
  // The earliest complete stop string wins.
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  for (const auto& s : stop_) {
    const size_t at = pending_.find(s);
    if (at != std::string::npos && (at < best || (at == best && s.size() > which->size()))) {
      best = at;
      which = &s;
    }
  }
  if (which != nullptr) {
    stopped_ = true;
    matched_ = *which;
    std::string out = pending_.substr(0, best + (include_ ? which->size() : 0));
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stop_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopChecker::flush() {
  if (stopped_) return "";
  std::string out = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace tf
