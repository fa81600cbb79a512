// Fuzz target: the llama2.c tokenizer file parser, then encode/decode round trips of text taken
// from the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "tokenizer/llama2c_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int64_t vocab =
      data[0] %
      64;  // below 3 must be rejected  // small vocabularies: the parse must check every entry
  try {
    auto tok = tf::Llama2cTokenizer::parse(data + 1, size - 1, vocab, "fuzz.bin");
    const std::string text(reinterpret_cast<const char*>(data), std::min<size_t>(size, 64));
    auto ids = tok->encode(text, true);
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab) __builtin_trap();
    }
    (void)tok->decode(ids);
  } catch (const tf::Error&) {
  }
  return 0;
}
