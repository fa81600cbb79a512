#include "tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/mapped_file.h"

namespace tf {

SentencePieceTokenizer::SentencePieceTokenizer()
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& path) {
  return from_bytes(read_file(path), "'" + path + "'");
}

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::from_bytes(
    const std::string& bytes, const std::string& source) {
  auto tok = std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer());
  const auto status = tok->sp_->LoadFromSerializedProto(bytes);
  if (!status.ok()) fail("{}: not a SentencePiece model: {}", source, status.ToString());
  if (tok->sp_->GetPieceSize() <= 0) fail("{}: SentencePiece model has no pieces", source);
  tok->bos_id_ = tok->sp_->bos_id();
  tok->eos_id_ = tok->sp_->eos_id();
  return tok;
}

int64_t SentencePieceTokenizer::vocab_size() const {
  return sp_->GetPieceSize();
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text,
                                                    bool add_special_tokens) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) fail("SentencePiece could not encode the text: {}", status.ToString());
  std::vector<int32_t> out;
  out.reserve(ids.size() + 2);
  if (add_special_tokens && add_bos_ && bos_id_ >= 0) out.push_back(bos_id_);
  out.insert(out.end(), ids.begin(), ids.end());
  if (add_special_tokens && add_eos_ && eos_id_ >= 0) out.push_back(eos_id_);
  return out;
}

std::string SentencePieceTokenizer::decode_bytes(std::span<const int32_t> ids,
                                                 bool skip_special_tokens) const {
  // Decode piece by piece ourselves: the library turns byte pieces of an incomplete character
  // into U+FFFD, which would break streaming of multi-byte characters.
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (sp_->IsControl(id) || (skip_special_tokens && is_special(id))) continue;
    if (sp_->IsByte(id)) {
      const std::string p = sp_->IdToPiece(id);  // "<0xNN>"
      out += static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16));
      first = false;
      continue;
    }
    std::string p = sp_->IsUnknown(id) ? std::string(" \xE2\x81\x87 ") : sp_->IdToPiece(id);
    std::string text;
    for (size_t i = 0; i < p.size();) {
      if (p.compare(i, 3, "\xE2\x96\x81") == 0) {  // U+2581 marks a space
        text += ' ';
        i += 3;
      } else {
        text += p[i++];
      }
    }
    // SentencePiece drops the dummy-prefix space of the first piece it decodes.
    if (first && !text.empty() && text[0] == ' ') text.erase(0, 1);
    out += text;
    first = false;
  }
  return out;
}

std::string SentencePieceTokenizer::id_to_piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return sp_->IdToPiece(id);
}

std::optional<int32_t> SentencePieceTokenizer::piece_to_id(std::string_view piece) const {
  const int id = sp_->PieceToId(piece);
  if (id == sp_->unk_id() && piece != sp_->IdToPiece(sp_->unk_id())) return std::nullopt;
  return id;
}

bool SentencePieceTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && (sp_->IsControl(id) || sp_->IsUnknown(id));
}

}  // namespace tf
