// Fuzz target: the regex compiler (guided_regex, a schema's `pattern`) on arbitrary text, both
// as a whole-output pattern and inside a JSON string; the GBNF it writes must parse, and a
// recognizer runs over the input's own bytes. Any outcome but a grammar or a tf::Error is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"
#include "sampling/grammar.h"
#include "sampling/regex_grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool json : {false, true}) {
    std::string gbnf;
    try {
      gbnf = "root ::= " + tf::regex_gbnf_expression(text, json) + "\n";
    } catch (const tf::Error&) {
      continue;
    }
    try {
      const tf::Grammar g = tf::parse_gbnf(gbnf);
      tf::GrammarMatcher m(g);
      (void)m.accept(text.substr(0, 64));
      (void)m.can_end();
      (void)m.allowed({"a", "\\", "\"", "1", " ", "\xC3", "\xA9"});
    } catch (const tf::Error& e) {
      if (std::string(e.what()).find("too ambiguous") == std::string::npos &&
          std::string(e.what()).find("beyond 1M elements") == std::string::npos) {
        std::fprintf(stderr, "%s\n--- grammar ---\n%s\n", e.what(), gbnf.c_str());
        std::abort();
      }  // the compiler's own output must parse
    }
  }
  return 0;
}
