// Fuzz target: the GBNF grammar parser on arbitrary text and, for what parses, the recognizer
// on the same bytes fed whole and in pieces. Any outcome but an answer or a tf::Error is a bug
// (a crash, a sanitizer report, another exception type, a hang).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "sampling/grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const tf::Grammar g = tf::parse_gbnf(text);
    tf::GrammarMatcher whole(g);
    (void)whole.accept(text.substr(0, 256));
    (void)whole.can_end();
    tf::GrammarMatcher pieces(g);
    for (size_t i = 0; i < std::min<size_t>(size, 64); i += 3)
      (void)pieces.accept(text.substr(i, 3));
    (void)pieces.allowed({"{", "\"", "a", "\xCE", "\xB1", "0"});
  } catch (const tf::Error&) {
  }
  return 0;
}
