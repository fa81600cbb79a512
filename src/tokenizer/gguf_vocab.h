#pragma once
// The tokenizer a GGUF file carries in its metadata (tokenizer.ggml.*): the vocabulary, scores,
// special ids and chat template.

#include <string>

#include "tokenizer/tokenizer_loader.h"

namespace tf {

struct GgufFile;

// tokenizer.ggml.model "llama" (SentencePiece BPE by scores with <0xNN> byte fallback, run as
// llama2.c runs it) is taken; another model is an Error naming it.
LoadedTokenizer load_gguf_tokenizer(const GgufFile& file, const std::string& path);
// Maps and parses the file first.
LoadedTokenizer load_gguf_tokenizer(const std::string& path);

}  // namespace tf
