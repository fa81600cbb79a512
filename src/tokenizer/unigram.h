#pragma once
// The Unigram model (Kudo 2018) of SentencePiece and Hugging Face tokenizers: every piece has a
// log-probability, and a word is split into the pieces whose scores sum highest (Viterbi over
// the lattice of pieces that match at each character). A character no piece covers becomes the
// unknown piece, scored below every real piece (min - 10, as both implementations do); a run
// of unknowns is one unknown id, or its bytes as <0xNN> pieces with byte_fallback.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/subword_model.h"

namespace tf {

// SentencePiece's piece types (also GGUF's tokenizer.ggml.token_type).
enum class PieceType : uint8_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

struct UnigramPiece {
  std::string text;
  double score = 0.0;
  PieceType type = PieceType::kNormal;
};

struct UnigramOptions {
  std::optional<int32_t> unk_id;
  bool byte_fallback = false;
  // Which pieces the lattice holds and which set the unknown's score. false (tokenizer.json, as
  // Hugging Face tokenizers does): every piece, the minimum over all. true (a SentencePiece
  // model or GGUF "t5" vocabulary, as SentencePiece and llama.cpp do): normal, user-defined
  // and unused pieces, the minimum over normal ones.
  bool sentencepiece_lattice = false;
};

class UnigramModel final : public SubwordModel {
 public:
  // Throws Error naming `source` for an empty vocabulary, a piece that is empty or listed
  // twice, a score that is not finite, or an unk_id outside the vocabulary.
  UnigramModel(std::vector<UnigramPiece> pieces, UnigramOptions options, const std::string& source);

  void encode(std::string_view word, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  const std::string& id_to_token(int32_t id) const override;
  int64_t id_limit() const override { return static_cast<int64_t>(pieces_.size()); }
  size_t max_bytes_per_token() const override { return 0; }  // a run of unknowns is one id

  const UnigramPiece& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  std::optional<int32_t> unk_id() const { return options_.unk_id; }

 private:
  int32_t child(int32_t node, unsigned char byte) const;
  void emit_unknown(std::string_view text, std::vector<int32_t>& out) const;

  std::vector<UnigramPiece> pieces_;
  UnigramOptions options_;
  TokenIdMap ids_;
  double unk_score_ = 0.0;
  // A byte trie of the lattice's pieces: node 0 is the root; edges keyed (node << 8 | byte).
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> node_piece_;  // the piece ending at a node, -1 if none
  int32_t byte_ids_[256];            // <0xNN> pieces, -1 where missing
  std::string source_;
};

}  // namespace tf
