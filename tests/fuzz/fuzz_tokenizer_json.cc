// Fuzz target: the tokenizer.json loader on arbitrary bytes, then encode/decode round trips of
// text taken from the same bytes on whatever loaded.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "tokenizer/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    auto tok = tf::HfTokenizer::from_json(bytes, "fuzz.json");
    const std::string text(bytes.substr(0, 128));
    const auto ids = tok->encode(text, true);
    for (int32_t id : ids) {
      if (id < 0 || id >= tok->vocab_size()) __builtin_trap();
    }
    (void)tok->decode(ids, false);
  } catch (const tf::Error&) {
  }
  return 0;
}
