#pragma once
// Finds and loads the tokenizer that belongs to a model, with the special tokens and chat
// template its config files declare.

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tf {

struct LoadedTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;  // nullptr when the model ships none we can read
  std::string source;                    // the file it came from
  std::string chat_template;             // from tokenizer_config.json; empty if none
  std::string bos_token, eos_token;      // as text, for chat templates
  std::vector<int32_t> stop_ids;  // every end-of-sequence id (generation_config may list several)
};

// `path` is a model directory, a directory holding only tokenizer files, or a model file (a
// llama2.c .bin: its tokenizer is looked for beside it). `explicit_path` (a tokenizer.json,
// tokenizer.model, llama2.c tokenizer .bin, or a directory) overrides the search. In a directory
// the order is spiece.model, tokenizer.json, tokenizer.model, vocab.json + merges.txt (or
// encoder.json + vocab.bpe), vocab.txt (BERT), tokenizer.bin / tok*.bin. model_vocab_size (0 if
// unknown) is needed for llama2.c vocabularies, which do not store their size.
LoadedTokenizer load_tokenizer(const std::string& path, int64_t model_vocab_size,
                               const std::string& explicit_path = "");

// Compatibility shorthand: just the tokenizer (nullptr if none).
std::unique_ptr<Tokenizer> load_tokenizer_for(const std::string& model_path, int64_t vocab_size,
                                              const std::string& explicit_path = "");

}  // namespace tf
