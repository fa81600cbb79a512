#pragma once
// Pre-tokenization regexes (GPT-2, Llama 3, Qwen2 patterns use Unicode classes and lookahead)
// through PCRE2 in UTF mode with Unicode properties, JIT-compiled when available.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf {

class Regex {
 public:
  // Throws Error with PCRE2's message and offset for a bad pattern.
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Non-overlapping matches, left to right, as [begin, end) byte ranges. Invalid UTF-8 in the
  // subject is allowed (it never matches a character class). Thread-safe.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::string pattern_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf
