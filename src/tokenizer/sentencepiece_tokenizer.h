#pragma once
// SentencePiece .model files (Llama 2, Mistral, TinyLlama's tokenizer.model) through the
// SentencePiece library itself, so ids match the reference by construction. The library is
// reached through libtf_spm_shim.so, loaded in isolation (see spm_shim.cc for why); pieces and
// their kinds are copied out at load, so only encoding calls into it.

#include <memory>
#include <string>

#include "tokenizer/added_tokens.h"
#include "tokenizer/tokenizer.h"

#include <unordered_map>
#include <vector>

namespace tf {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  static std::unique_ptr<SentencePieceTokenizer> load(const std::string& path);
  static std::unique_ptr<SentencePieceTokenizer> from_bytes(const std::string& bytes,
                                                            const std::string& source);
  ~SentencePieceTokenizer() override;

  int64_t vocab_size() const override;
  // add_special_tokens adds BOS (as LlamaTokenizer's add_bos_token does) and EOS if enabled.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode_bytes(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  std::string id_to_piece(int32_t id) const override;
  std::optional<int32_t> piece_to_id(std::string_view piece) const override;
  bool is_special(int32_t id) const override;

  // Tokens matched whole before the library sees the text (T5's <extra_id_N> sentinels, a
  // tokenizer_config.json's added_tokens_decoder): the text between them is encoded piece by
  // piece, each stretch as its own sentence (as transformers' slow tokenizers do).
  void set_added_tokens(std::vector<AddedToken> tokens, const std::string& source);
  const AddedTokens& added_tokens() const { return added_; }

  void set_add_bos(bool v) { add_bos_ = v; }
  void set_add_eos(bool v) { add_eos_ = v; }

 private:
  SentencePieceTokenizer() = default;
  void encode_piece(std::string_view text, std::vector<int32_t>& out) const;

  void* handle_ = nullptr;  // the shim's processor
  AddedTokens added_;
  std::vector<std::string> pieces_;
  std::vector<uint8_t> flags_;  // bit 0 control, bit 1 byte, bit 2 unknown
  std::unordered_map<std::string, int32_t> piece_ids_;
  int32_t unk_id_ = -1;
  bool add_bos_ = true;
  bool add_eos_ = false;
};

}  // namespace tf
