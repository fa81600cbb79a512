// Fuzz target: encode and decode arbitrary bytes (invalid UTF-8 included) with the real GPT-2
// and Llama 2 tokenizers, and decode arbitrary id sequences, streaming and whole.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer_loader.h"
#include "tokenizer/unicode.h"

namespace {
const tf::Tokenizer& tokenizer(int which) {
  static const auto gpt2 = tf::load_tokenizer_for(TF_SHARED_DIR "/tokenizers/gpt2", 0);
  static const auto llama =
      tf::load_tokenizer_for(TF_SHARED_DIR "/tokenizers/llama2/tokenizer.model", 0);
  return which == 0 ? *gpt2 : *llama;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const tf::Tokenizer& tok = tokenizer(data[0] & 1);
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const auto ids = tok.encode(text, true);
    for (int32_t id : ids) {
      if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
    }
    const std::string round = tok.decode(ids, false);
    // Byte-level BPE is lossless, invalid UTF-8 included (both sides sanitized alike).
    if ((data[0] & 1) == 0 && round != tf::unicode::sanitize_utf8(text)) __builtin_trap();
    // The bytes reinterpreted as ids: decode must not read outside the vocabulary.
    std::vector<int32_t> raw;
    for (size_t i = 0; i + 4 <= text.size(); i += 4) {
      int32_t v;
      std::memcpy(&v, text.data() + i, 4);
      raw.push_back(v % static_cast<int32_t>(tok.vocab_size()));
    }
    tf::IncrementalDetokenizer d(tok, {});
    for (int32_t id : raw) {
      if (id >= 0) (void)d.push(id);
    }
    (void)d.flush();
  } catch (const tf::Error&) {
  }
  return 0;
}
