// Fuzz target: the tokenizer.json loader on arbitrary bytes, then encode/decode round trips of
// text taken from the same bytes on whatever loaded, and a pair of texts joined.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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
    // A pair as the post-processor joins it (cross-encoders): an id and a type for each token.
    std::vector<int32_t> pair, types;
    tok->encode_pair(text.substr(0, 40), text.substr(40), pair, types);
    if (pair.size() != types.size()) __builtin_trap();
    for (int32_t id : pair) {
      if (id < 0 || id >= tok->vocab_size()) __builtin_trap();
    }
  } catch (const tf::Error&) {
  }
  return 0;
}
