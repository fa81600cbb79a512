#pragma once
// The model step of a Hugging Face tokenizers pipeline: one pre-tokenized, normalized word to
// ids. BPE (bpe.h) and Unigram (unigram.h) implement it.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tf {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class SubwordModel {
 public:
  virtual ~SubwordModel() = default;
  // Appends the ids of one pre-tokenized, normalized word.
  virtual void encode(std::string_view word, std::vector<int32_t>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  // Empty for an id the vocab does not have.
  virtual const std::string& id_to_token(int32_t id) const = 0;
  // One past the largest id.
  virtual int64_t id_limit() const = 0;
  // The most bytes of a word one id can stand for; 0 when no bound holds (unknowns fused).
  virtual size_t max_bytes_per_token() const = 0;
};

}  // namespace tf
