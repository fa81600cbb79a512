#pragma once
// Hugging Face tokenizers' pre-tokenizers: split normalized text into the words that the BPE
// model encodes one by one (and, for byte-level models, map bytes to the byte alphabet).

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace tf {

struct Word {
  std::string text;
  bool at_input_start = false;  // begins at offset 0 of the original input (Metaspace "first")
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces each word with its parts, in order.
  virtual void split(std::vector<Word>& words) const = 0;
  // True if the words hold every byte of the input (mapped or grown, never dropped).
  virtual bool keeps_all_text() const { return false; }
};

// The GPT-2 pre-tokenization pattern (ByteLevel's use_regex).
extern const char* const kGpt2SplitPattern;

// Metaspace's prepend scheme ("always", "first", "never"), from prepend_scheme or the legacy
// add_prefix_space flag; shared by the Metaspace pre-tokenizer and decoder.
std::string metaspace_prepend_scheme(const nlohmann::json& spec);
// Metaspace's replacement character (default U+2581); an Error unless it is one character.
std::string metaspace_replacement(const nlohmann::json& spec);

// Builds from the "pre_tokenizer" object of tokenizer.json (null gives nullptr).
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec);
// ByteLevel with GPT-2's regex, as for vocab.json + merges.txt models.
std::unique_ptr<PreTokenizer> make_byte_level_pre_tokenizer(bool add_prefix_space);

}  // namespace tf
