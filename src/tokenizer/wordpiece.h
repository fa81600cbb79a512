#pragma once
// The WordPiece model of BERT (Wu et al. 2016; Hugging Face tokenizers' WordPiece): a word is
// split greedily into the longest vocabulary entry from its start, every later piece looked up
// with the continuing-subword prefix ("##"); a word with a part no entry covers, or longer than
// max_input_chars_per_word characters, is the unknown token whole.

#include <optional>
#include <string>
#include <vector>

#include "tokenizer/subword_model.h"

namespace tf {

struct WordPieceOptions {
  std::string unk_token = "[UNK]";
  std::string continuing_subword_prefix = "##";
  size_t max_input_chars_per_word = 100;
};

class WordPieceModel final : public SubwordModel {
 public:
  // Throws Error naming `source` if the unknown token is not in the vocabulary.
  WordPieceModel(TokenIdMap vocab, WordPieceOptions options, const std::string& source);

  void encode(std::string_view word, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  const std::string& id_to_token(int32_t id) const override;
  int64_t id_limit() const override { return static_cast<int64_t>(id_to_token_.size()); }
  // The unknown token stands for a whole word of up to max_input_chars_per_word characters.
  size_t max_bytes_per_token() const override { return 0; }

 private:
  TokenIdMap vocab_;
  std::vector<std::string> id_to_token_;
  WordPieceOptions options_;
  int32_t unk_id_ = 0;
};

// BERT's vocab.txt: one token per line, the line number its id.
TokenIdMap read_wordpiece_vocab(std::string_view text, const std::string& source);

}  // namespace tf
