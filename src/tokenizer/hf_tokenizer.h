#pragma once
// A Hugging Face `tokenizers` pipeline: added tokens split off first, then normalizer,
// pre-tokenizer, model (BPE or Unigram), post-processor; and the decoder chain back. Built from
// tokenizer.json, from GPT-2's vocab.json + merges.txt, or in code (a GGUF vocabulary).

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/subword_model.h"
#include "tokenizer/tokenizer.h"

namespace tf {

// BERT's tokenizer as transformers' BertConverter builds it from a WordPiece vocabulary.
struct BertTokenizerOptions {
  bool lowercase = true;
  std::optional<bool> strip_accents;  // unset: as lowercase
  bool chinese_chars = true;
  std::string unk = "[UNK]", cls = "[CLS]", sep = "[SEP]", pad = "[PAD]", mask = "[MASK]";
};

class HfTokenizer final : public Tokenizer {
 public:
  using AddedToken = tf::AddedToken;
  // One piece of a post-processor's pair template: special ids (sequence -1) or sequence A (0)
  // or B (1), and the type id of its tokens.
  struct TemplatePiece {
    int32_t sequence = -1;
    std::vector<int32_t> ids;
    int32_t type_id = 0;
  };

  // Parses tokenizer.json text. `source` names the file in errors.
  static std::unique_ptr<HfTokenizer> from_json(std::string_view json_text,
                                                const std::string& source);
  // A pipeline put together in code (a GGUF vocabulary): any part but the model may be null.
  static std::unique_ptr<HfTokenizer> from_parts(
      std::unique_ptr<Normalizer> normalizer, std::unique_ptr<PreTokenizer> pre_tokenizer,
      std::unique_ptr<SubwordModel> model, std::unique_ptr<Decoder> decoder,
      std::vector<AddedToken> added, std::vector<int32_t> prefix, std::vector<int32_t> suffix);
  // BertNormalizer, BertPreTokenizer, WordPiece, [CLS] A [SEP] (pairs [CLS] A [SEP] B [SEP]),
  // the WordPiece decoder. Throws Error if a special token is missing from the vocabulary.
  static std::unique_ptr<HfTokenizer> from_bert_vocab(const TokenIdMap& vocab,
                                                      const BertTokenizerOptions& options,
                                                      const std::string& source);
  // GPT-2's encoder.json/vocab.json + vocab.bpe/merges.txt (byte-level BPE, <|endoftext|>).
  static std::unique_ptr<HfTokenizer> from_gpt2_files(const std::string& vocab_path,
                                                      const std::string& merges_path);

  int64_t vocab_size() const override { return vocab_size_; }
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  void encode_pair(std::string_view a, std::string_view b, std::vector<int32_t>& ids,
                   std::vector<int32_t>& type_ids) const override;
  std::string decode_bytes(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  std::string id_to_piece(int32_t id) const override;
  std::optional<int32_t> piece_to_id(std::string_view piece) const override;
  bool is_special(int32_t id) const override;
  size_t max_bytes_per_token() const override { return max_bytes_per_token_; }

  const std::vector<AddedToken>& added_tokens() const { return added_.all(); }
  // Ids the post-processor puts before and after a single sequence.
  const std::vector<int32_t>& prefix_ids() const { return prefix_ids_; }
  const std::vector<int32_t>& suffix_ids() const { return suffix_ids_; }
  void set_special_affixes(std::vector<int32_t> prefix, std::vector<int32_t> suffix) {
    prefix_ids_ = std::move(prefix);
    suffix_ids_ = std::move(suffix);
  }

 private:
  HfTokenizer() = default;
  void index_added_tokens(std::vector<AddedToken> added, const std::string& source);
  void encode_text(std::string_view text, bool at_input_start, std::vector<int32_t>& out) const;

  size_t max_bytes_per_token_ = 0;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<SubwordModel> model_;
  std::unique_ptr<Decoder> decoder_;
  AddedTokens added_;
  std::vector<int32_t> prefix_ids_, suffix_ids_;
  std::vector<TemplatePiece> pair_template_;
  int64_t vocab_size_ = 0;
};

}  // namespace tf
