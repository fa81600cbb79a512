#pragma once
// Tokens matched whole in the text before any model sees it (tokenizer.json's added_tokens,
// SentencePiece's control and user-defined pieces, T5's <extra_id_N> sentinels): the text is
// split at them, leftmost first and longest among those starting at one place, honouring each
// token's lstrip / rstrip / single_word.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/function_ref.h"

namespace tf {

struct AddedToken {
  int32_t id;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

class AddedTokens {
 public:
  AddedTokens() = default;
  // Throws Error naming `source` for an empty content or an id outside 0..2^24-1.
  AddedTokens(std::vector<AddedToken> tokens, const std::string& source);

  bool empty() const { return tokens_.empty(); }
  const std::vector<AddedToken>& all() const { return tokens_; }
  const AddedToken* by_id(int32_t id) const;
  std::optional<int32_t> id_of(std::string_view content) const;
  // One past the largest id (0 when empty).
  int64_t id_limit() const { return id_limit_; }
  // True if a token drops text next to it (lstrip / rstrip).
  bool strips() const;

  // Calls segment(text, at_input_start) for each stretch of text between added tokens (empty
  // stretches are skipped) and pushes each added token's id to `out` in order.
  void split(std::string_view text, FunctionRef<void(std::string_view, bool)> segment,
             std::vector<int32_t>& out) const;

 private:
  std::vector<AddedToken> tokens_;
  std::vector<std::vector<size_t>> by_first_byte_ =
      std::vector<std::vector<size_t>>(256);  // longest first
  std::unordered_map<int32_t, size_t> by_id_;
  int64_t id_limit_ = 0;
};

}  // namespace tf
