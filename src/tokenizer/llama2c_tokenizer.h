#pragma once
// llama2.c's tokenizer.bin: SentencePiece BPE pieces with scores, encoded the way llama2.c's
// run.c does it (dummy-prefix space, per-character lookup with <0xNN> byte fallback, then greedy
// merging of the best-scoring adjacent pair), so our prompts give the same ids as the reference.

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tf {

class Llama2cTokenizer final : public Tokenizer {
 public:
  Llama2cTokenizer() {
    bos_id_ = 1;
    eos_id_ = 2;
  }
  // Parses the file's bytes; vocab_size comes from the model, since the file does not store it.
  static std::unique_ptr<Llama2cTokenizer> parse(const uint8_t* data, size_t size,
                                                 int64_t vocab_size, const std::string& path);
  static std::unique_ptr<Llama2cTokenizer> load(const std::string& path, int64_t vocab_size);
  // From pieces (spaces as plain spaces, bytes as <0xNN>) and their scores. Without types, ids
  // 0, 1, 2 are <unk>, BOS and EOS (llama2.c's layout); with SentencePiece's token types (GGUF's
  // tokenizer.ggml.token_type: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,
  // 6 byte), unknown, control and unused pieces never match text and control pieces never
  // print, wherever they are. Byte fallback uses the <0xNN> pieces wherever they are. source
  // names the origin in errors.
  static std::unique_ptr<Llama2cTokenizer> from_pieces(std::vector<std::string> pieces,
                                                       std::vector<float> scores,
                                                       const std::string& source,
                                                       const std::vector<int32_t>* types = nullptr);
  // Whether encode(..., true) starts with BOS (GGUF's tokenizer.ggml.add_bos_token).
  void set_add_bos(bool add) { add_bos_ = add; }

  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }
  // add_special_tokens adds BOS, as run.c does.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode_bytes(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  std::string id_to_piece(int32_t id) const override;
  std::optional<int32_t> piece_to_id(std::string_view piece) const override;
  bool is_special(int32_t id) const override {
    return id >= 0 && id < static_cast<int32_t>(special_.size()) && special_[id] != 0;
  }
  size_t max_bytes_per_token() const override { return max_bytes_per_token_; }

  // The bytes token `id` contributes when it follows `prev` (-1 at the start): run.c's decode.
  std::string decode_token(int32_t prev, int32_t id) const;

  const std::string& piece(int32_t id) const { return pieces_.at(id); }
  float score(int32_t id) const { return scores_.at(id); }

 private:
  void merge_pairs(std::vector<int32_t>& ids) const;
  size_t max_bytes_per_token_ = 0;  // 0: some bytes have no piece
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<int> byte_value_;   // -1, or the byte an <0xNN> piece stands for
  int32_t byte_id_[256];          // the piece of each byte, -1 if none
  std::vector<uint8_t> special_;  // never printed
  bool add_bos_ = true;
  std::unordered_map<std::string, int32_t> ids_;  // text pieces only (no specials, no bytes)
};

}  // namespace tf
