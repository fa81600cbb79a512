#pragma once
// SentencePiece's normalization: the precompiled character map a model carries (its
// normalizer_spec.precompiled_charsmap: nmt_nfkc and friends, compiled into a double-array trie
// of byte sequences and their replacements), and the whitespace rules around it (a dummy prefix,
// extra whitespace removed, spaces escaped as U+2581). tokenizer.json's "Precompiled" normalizer
// is the map alone; a GGUF "t5" vocabulary (llama.cpp's UGM) is the whole of it.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "tokenizer/normalizer.h"

namespace tf {

class PrecompiledCharsMap {
 public:
  // blob: <uint32 little-endian size of the trie in bytes><the trie's 32-bit units><the
  // replacements, each NUL-terminated>. Throws Error naming `source` if the blob is malformed;
  // every trie step is bounds-checked at use, so a corrupt trie cannot read outside the blob.
  PrecompiledCharsMap(std::string blob, const std::string& source);

  // The longest prefix of `text` the map replaces: (replacement, bytes consumed); consumed is 0
  // where no prefix matches.
  std::pair<std::string_view, size_t> longest_match(std::string_view text) const;
  // One step of SentencePiece's normalizer: the longest match, else the next UTF-8 character as
  // it is (an invalid byte becomes U+FFFD and consumes one byte).
  std::pair<std::string_view, size_t> next(std::string_view text) const;
  // Every step over the whole text.
  std::string apply(std::string_view text) const;

 private:
  uint32_t unit(size_t index) const;
  std::string blob_;
  size_t units_ = 0;         // trie units
  size_t replacements_ = 0;  // offset of the replacement strings in blob_
};

// SentencePiece's Normalizer::Normalize with its NormalizerSpec: the map (optional), then
// leading, trailing and repeated spaces removed (remove_extra_whitespaces), U+2581 before the
// text (add_dummy_prefix), spaces written as U+2581 (escape_whitespaces).
struct SentencePieceNormalizerSpec {
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

std::unique_ptr<Normalizer> make_sentencepiece_normalizer(std::string charsmap_blob,
                                                          SentencePieceNormalizerSpec spec,
                                                          const std::string& source);

// The "Precompiled" normalizer of tokenizer.json: the map alone (its precompiled_charsmap is
// base64). Hugging Face tokenizers applies it per grapheme cluster; this applies it as
// SentencePiece does (longest match first), which gives the same text wherever a cluster's
// prefix has no mapping of its own.
std::unique_ptr<Normalizer> make_precompiled_normalizer(std::string_view base64_charsmap,
                                                        const std::string& source);

// Standard base64 (RFC 4648; padding optional, whitespace skipped). Throws Error naming `what`
// on any other character.
std::string decode_base64(std::string_view text, const std::string& what);

}  // namespace tf
