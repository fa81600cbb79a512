#pragma once
// The BPE model of Hugging Face tokenizers: a vocabulary, ranked merges, and the algorithm that
// applies the lowest-ranked merge first until none applies. Linear-log in the word length
// (a heap of candidate merges), so a megabyte-long word costs no more than its size suggests.

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/subword_model.h"

namespace tf {

struct BpeOptions {
  bool byte_fallback = false;  // unknown characters become <0xNN> tokens (Llama 2, Mistral)
  bool ignore_merges = false;  // a word that is itself in the vocab is emitted whole (Llama 3)
  std::optional<std::string> unk_token;
  bool fuse_unk = false;  // consecutive unknowns become one unk
};

class BpeModel final : public SubwordModel {
 public:
  // vocab: token -> id; merges: pairs in rank order. Throws Error if a merge names a token that
  // is not in the vocab, or its result is not.
  BpeModel(TokenIdMap vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeOptions options);

  // Appends the ids of one pre-tokenized, normalized word.
  void encode(std::string_view word, std::vector<int32_t>& out) const override;

  std::optional<int32_t> token_to_id(std::string_view token) const override;
  // Empty for an id the vocab does not have.
  const std::string& id_to_token(int32_t id) const override;
  // One past the largest id.
  int64_t id_limit() const override { return static_cast<int64_t>(id_to_token_.size()); }
  const BpeOptions& options() const { return options_; }
  // The most bytes of a word one id can stand for (the longest token: a merge's token is the
  // concatenation of its parts, <0xNN> and unk stand for at most 4 bytes); 0 when unknowns fuse.
  size_t max_bytes_per_token() const override;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void push_unknown(std::string_view ch, std::vector<int32_t>& syms, bool& last_was_unk) const;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  TokenIdMap vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  BpeOptions options_;
  std::optional<int32_t> unk_id_;
  int32_t byte_ids_[256];  // <0xNN> tokens, -1 where missing

  // Natural text repeats its words: a bounded cache of word -> ids skips the merge loop for most
  // of them (shared by all threads; cleared when full).
  static constexpr size_t kCacheEntries = 1 << 16;
  static constexpr size_t kCacheMaxWordBytes = 64;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace tf
