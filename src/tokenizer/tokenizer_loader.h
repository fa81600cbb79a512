#pragma once

#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace tf {

// Finds the tokenizer that belongs to a model: `explicit_path` when given, else a llama2.c
// tokenizer.bin (or a single tok*.bin) beside a .bin checkpoint or inside a model directory.
// Returns nullptr when there is none we can read yet.
std::unique_ptr<Tokenizer> load_tokenizer_for(const std::string& model_path, int64_t vocab_size,
                                              const std::string& explicit_path = "");

}  // namespace tf
