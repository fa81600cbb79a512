// Fuzz target: a model folder's tokenizer files as tokenflow finds and reads them when loading a
// model: tokenizer_config.json (special tokens, the chat template), generation_config.json (the
// end-of-sequence ids), GPT-2's encoder.json + vocab.bpe, a SentencePiece tokenizer.model, and
// BERT's vocab.txt.
// The first byte picks which set of files the rest of the input is split into (fuzz_file.h).
// Any outcome but a tokenizer or a tf::Error is a bug (a crash, a sanitizer report, a hang).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_file.h"
#include "tokenizer/tokenizer_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::vector<std::vector<std::string>> kSets = {
      {"encoder.json", "vocab.bpe", "tokenizer_config.json", "generation_config.json"},
      {"tokenizer.model", "tokenizer_config.json", "generation_config.json"},
      {"vocab.json", "merges.txt", "tokenizer_config.json"},
      {"vocab.txt", "tokenizer_config.json"},  // BERT's WordPiece vocabulary alone
  };
  // The first three sets by the first byte mod 3 (as the corpus was made), 0xFF the fourth.
  const auto& names = kSets[data[0] == 0xFF ? 3 : data[0] % 3];
  const auto dir = write_fuzz_folder("tf_fuzz_tok", data + 1, size - 1, names);
  try {
    tf::LoadedTokenizer t = tf::load_tokenizer(dir.string(), 0);
    if (t.tokenizer) {
      const auto ids = t.tokenizer->encode("Hello world, héllo 日本 \n\t<s>", true);
      (void)t.tokenizer->decode(ids);
    }
  } catch (const tf::Error&) {
  }
  return 0;
}
