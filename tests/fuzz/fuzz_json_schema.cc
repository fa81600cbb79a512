// Fuzz target: the JSON Schema compiler on arbitrary JSON (what parses as JSON), the GBNF it
// writes parsed back, and a recognizer run over the input's own bytes. Any outcome but a
// grammar or a tf::Error is a bug: a crash, a sanitizer report, another exception type, a hang,
// or generated GBNF that does not parse.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"
#include "sampling/grammar.h"
#include "sampling/json_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto schema = nlohmann::ordered_json::parse(text, nullptr, false);
  if (schema.is_discarded()) return 0;
  std::string gbnf;
  try {
    gbnf = tf::json_schema_to_gbnf(schema);
  } catch (const tf::Error&) {
    return 0;
  }
  try {
    const tf::Grammar g = tf::parse_gbnf(gbnf);
    tf::GrammarMatcher m(g);
    (void)m.accept(text.substr(0, 128));
    (void)m.allowed({"{", "\"", "a", "1", "-", "[", "]", "}", ",", ":", "null"});
  } catch (const tf::Error& e) {
    // The compiler's own output must parse; only a left-recursive $ref cycle may not.
    if (std::string(e.what()).find("left-recursive") == std::string::npos &&
        std::string(e.what()).find("too ambiguous") == std::string::npos &&
        std::string(e.what()).find("nest too deeply") == std::string::npos &&
        std::string(e.what()).find("beyond 1M elements") == std::string::npos) {
      std::fprintf(stderr, "%s\n--- grammar ---\n%s\n", e.what(), gbnf.c_str());
      std::abort();
    }
  }
  return 0;
}
