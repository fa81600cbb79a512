// Fuzz target (issue 49): a grammar, a JSON schema or a regex (the input's first byte picks
// which; the text runs to the first NUL) compiled against a small vocabulary (special tokens
// among it, for <[ID]> and <TEXT> references) and driven through
// at most 32 decoding steps, each token chosen among those the mask allows by the input's
// remaining bytes, every step under a budget as the engine sets one. Checked: the mask equals
// the token-by-token answer (GrammarMatcher::allowed over the same trie), a token the mask
// allows is accepted, and the only failures are tf::Errors (a parse error, too many ways to
// continue, a budget used up). A crash, a sanitizer report, a hang or a wrong mask is a bug.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "sampling/grammar.h"
#include "sampling/json_schema.h"
#include "sampling/regex_grammar.h"

namespace {

// Single bytes (ASCII, and UTF-8 lead and continuation bytes), JSON-ish pieces and multi-byte
// characters: tokens that span several grammar symbols or part of one character.
const tf::GrammarVocab& vocab() {
  // Ids 0..2 are special (no bytes), the last two named for <TEXT> references.
  static const tf::GrammarVocab v(
      [] {
        std::vector<std::string> t = {"", "", ""};
        for (int c = 0x20; c < 0x7F; ++c) t.push_back(std::string(1, static_cast<char>(c)));
        for (const char* s :
             {"\n",  "\t",  "\xC3",  "\xA9", "\xE2\x82", "\xAC",  "é",    "€",  "\xF0\x9F\x98\x80",
              "{\"", "\":", "\",\"", "\"}",  "true",     "false", "null", "12", "-0.",
              "e+",  "ab",  "abc",   " the", "\\n",      "\\u00", "[]",   "{}", ", "})
          t.emplace_back(s);
        return t;
      }(),
      {{"<|end|>", 1}, {"<|call|>", 2}});
  return v;
}

void check(bool ok, const char* what, const std::string& grammar) {
  if (ok) return;
  std::fprintf(stderr, "%s\n--- grammar ---\n%s\n", what, grammar.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = all.find('\0');
  const std::string_view text = all.substr(0, nul);
  const std::string_view choices = nul == std::string_view::npos ? "" : all.substr(nul + 1);
  std::string gbnf;
  try {
    switch (data[0] % 3) {
      case 0:
        gbnf = std::string(text);
        break;
      case 1: {
        const auto schema = nlohmann::ordered_json::parse(text, nullptr, false);
        if (schema.is_discarded()) return 0;
        gbnf = tf::json_schema_to_gbnf(schema);
        break;
      }
      default:
        gbnf = tf::regex_to_gbnf(text);
    }
  } catch (const tf::Error&) {
    return 0;
  }
  try {
    const tf::GrammarVocab& v = vocab();
    const auto compiled = v.compile(gbnf);
    tf::GrammarMatcher m(compiled->grammar());
    for (size_t step = 0; step < 32; ++step) {
      // A budget per token, as the engine sets one (200 ms by default).
      tf::GrammarDeadline deadline(tf::ThreadCpuClock::now() + std::chrono::milliseconds(100),
                                   "the fuzz target's budget of 100 ms a token");
      const std::vector<bool> mask = compiled->allowed(m);
      if (step % 8 == 0) check(mask == m.allowed(v.trie), "mask != token-by-token answer", gbnf);
      std::vector<uint32_t> allowed;
      for (uint32_t t = 0; t < mask.size(); ++t)
        if (mask[t]) allowed.push_back(t);
      if (allowed.empty()) break;
      const uint8_t pick = step < choices.size() ? static_cast<uint8_t>(choices[step]) : 0;
      const uint32_t t = allowed[pick % allowed.size()];
      check(m.accept_token(t, v.bytes[t]), "an allowed token was refused", gbnf);
    }
  } catch (const tf::Error&) {
  }
  return 0;
}
