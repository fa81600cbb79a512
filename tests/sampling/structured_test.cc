// Regular expressions, choices and JSON Schema compiled to GBNF (issue 24): each grammar's
// language checked against an independent judge — std::regex (ECMAScript) for patterns, the
// schema's rule written out in C++ for integer and number bounds, property orders and counts —
// and each unenforceable keyword refused by name.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <regex>
#include <string>

#include "core/error.h"
#include "model/test_util.h"
#include "sampling/grammar.h"
#include "sampling/json_schema.h"
#include "sampling/regex_grammar.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf {
namespace {

using ojson = nlohmann::ordered_json;

bool accepts(const Grammar& g, const std::string& s) {
  GrammarMatcher m(g);
  return m.accept(s) && m.can_end();
}

Grammar schema_grammar(const char* schema) {
  return parse_gbnf(json_schema_to_gbnf(ojson::parse(schema)));
}

std::string schema_error(const char* schema) {
  try {
    parse_gbnf(json_schema_to_gbnf(ojson::parse(schema)));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string regex_error(const char* pattern) {
  try {
    parse_gbnf(regex_to_gbnf(pattern));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A random vocabulary of JSON-ish pieces: shared prefixes, tokens spanning several JSON
// symbols, multi-byte and partial UTF-8.
std::vector<std::string> random_vocab(size_t n, uint64_t seed) {
  const std::vector<std::string> atoms = {
      "{", "}", "[", "]", "\"",   ":",    ",",  " ", "a", "b", "é", "\xC3", "\xA9", "1",
      "0", "-", ".", "e", "true", "null", "\\", "u", "k", "2", "T", "Z",    "@",    "x"};
  std::mt19937_64 rng(seed);
  std::vector<std::string> vocab;
  for (size_t t = 0; t < n; ++t) {
    std::string tok;
    const int len = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < len; ++k) tok += atoms[rng() % atoms.size()];
    vocab.push_back(tok);
  }
  vocab.push_back("");  // a special token: no bytes
  return vocab;
}

// The cached masks (CompiledGrammar) answer exactly what trying each token alone answers, at
// every point of documents, the first time a context is met and again from the cache.
TEST(CompiledGrammar, CachedMasksEqualTokenByTokenMasks) {
  const auto vocab = std::make_shared<const GrammarVocab>(random_vocab(4000, 9));
  const std::pair<std::string, std::vector<std::string>> cases[] = {
      // The last nests past kContextFrames: the uncertain tokens are checked on the whole stack.
      {kJsonGbnf,
       {R"({"ab": [1, -0.5e1, "x\u00e9é"], "c": {}})", R"(["k", {"a": null}])",
        R"([[[[{"a": [{"b": "x\"y", "c": [[1, 2.5], {"d": true}]}]}]]], "e"])"}},
      {json_schema_to_gbnf(ojson::parse(
           R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},
               "n":{"type":"integer","minimum":-20,"maximum":300},"t":{"type":"array",
               "items":{"enum":["ab","k"]}},"d":{"type":"string","format":"date-time"}},
               "required":["name","n"],"additionalProperties":{"type":"boolean"}})")),
       {R"({"name":"é\"a","n":-17,"t":["k","ab"],"d":"2024-01-02T03:04:05Z"})",
        R"({"name":"","n":300,"kx":true})"}},
  };
  for (const auto& [gbnf, docs] : cases) {
    const auto compiled = vocab->compile(gbnf);
    EXPECT_EQ(vocab->compile(gbnf), compiled);  // one per text
    for (int pass = 0; pass < 2; ++pass) {
      for (const auto& doc : docs) {
        GrammarMatcher m(compiled->grammar());
        size_t allowed_total = 0;
        for (size_t i = 0; i <= doc.size(); ++i) {
          const std::vector<bool> naive = m.allowed(vocab->bytes);
          ASSERT_EQ(compiled->allowed(m), naive)
              << "pass " << pass << " after " << doc.substr(0, i);
          allowed_total += static_cast<size_t>(std::count(naive.begin(), naive.end(), true));
          if (i < doc.size()) {
            ASSERT_TRUE(m.accept(doc.substr(i, 1))) << doc.substr(0, i + 1);
          }
        }
        EXPECT_GT(allowed_total, doc.size());  // the masks were not all empty
      }
    }
    EXPECT_GT(compiled->contexts(), 0u);
  }
}

// The same on real vocabularies (GPT-2's byte-level BPE, 50257 tokens; Llama 2's SentencePiece
// with byte fallback, 32000): many tokens per trie path, tokens that end in the middle of a
// UTF-8 character, and the byte tokens that spell one character twice.
TEST(CompiledGrammar, RealVocabulariesMatchTokenByToken) {
  const std::string schema = json_schema_to_gbnf(ojson::parse(R"({"type":"object",
      "properties":{"name":{"type":"string","minLength":1,"maxLength":12},
      "age":{"type":"integer","minimum":0,"maximum":120},"email":{"type":"string","format":"email"},
      "tags":{"type":"array","items":{"enum":["cat","dog","sun"]},"maxItems":3},
      "lines":{"type":"array","items":{"type":"object","properties":{
        "sku":{"type":"string","pattern":"^[A-Z]{3}-\\d{2}$"},"qty":{"type":"integer"}}}}},
      "required":["name","age"]})"));
  const std::vector<std::string> docs = {
      R"({"name":"Ann é","age":7,"email":"a.b@c.io","tags":["cat","sun"],"lines":[{"sku":"ABC-12","qty":-3}]})",
      R"({"name":"\"q","age":120})"};
  for (const char* dir : {"/tokenizers/gpt2", "/tokenizers/llama2/tokenizer.model",
                          "/models/stories260K/tok512.bin"}) {
    SCOPED_TRACE(dir);
    LoadedTokenizer tok = load_tokenizer(testing::shared_dir() + dir,
                                         std::string(dir).ends_with("tok512.bin") ? 512 : 0);
    const auto vocab = std::make_shared<const GrammarVocab>(tok.tokenizer->vocabulary_bytes());
    const auto compiled = vocab->compile(schema);
    for (const auto& doc : docs) {
      GrammarMatcher m(compiled->grammar());
      for (size_t i = 0; i <= doc.size(); ++i) {
        const std::vector<bool> naive = m.allowed(vocab->bytes);
        const std::vector<bool> cached = compiled->allowed(m);
        ASSERT_EQ(cached.size(), naive.size());
        for (size_t t = 0; t < naive.size(); ++t)
          ASSERT_EQ(cached[t], naive[t])
              << "token " << t << " '" << vocab->bytes[t] << "' after " << doc.substr(0, i);
        if (i < doc.size()) {
          ASSERT_TRUE(m.accept(doc.substr(i, 1))) << doc.substr(0, i + 1);
        }
      }
    }
  }
}

// The mask applied to logits word by word: the same as bit by bit, over a length that is not a
// multiple of 64, a mask shorter than the logits, and logits already -inf.
TEST(CompiledGrammar, ApplyTokenMaskEqualsBitByBit) {
  std::mt19937_64 rng(5);
  for (size_t n : {1u, 63u, 64u, 65u, 200u, 1000u}) {
    std::vector<uint64_t> mask((n + 63) / 64 - (n > 128 ? 1 : 0));
    for (auto& w : mask) w = rng() % 3 == 0 ? 0 : rng() % 3 == 0 ? ~uint64_t{0} : rng();
    std::vector<float> logits(n);
    for (auto& l : logits) l = rng() % 5 == 0 ? -INFINITY : static_cast<float>(rng() % 100);
    std::vector<float> expect = logits;
    bool any_expected = false;
    for (size_t t = 0; t < n; ++t) {
      const bool on = t / 64 < mask.size() && (mask[t / 64] >> (t % 64) & 1);
      if (!on) expect[t] = -INFINITY;
      any_expected = any_expected || (on && logits[t] > -INFINITY);
    }
    EXPECT_EQ(apply_token_mask(logits, mask), any_expected) << n;
    EXPECT_EQ(logits, expect) << n;
  }
}

TEST(RegexGrammar, SameLanguageAsStdRegexOnRandomStrings) {
  const char* patterns[] = {"a|bc",
                            "(ab)*c?",
                            "[a-c]{2,3}",
                            "[^ab]x",
                            "\\d+(\\.\\d{1,2})?",
                            "(?:x|y)+z{0,2}",
                            "a.c",
                            "[\\w-]{1,3}@",
                            "c(ol|ou)?r?",
                            "(a|b)*abb",
                            "\\s*x\\s*",
                            "[A-Z][a-z]*( [A-Z][a-z]*)*",
                            "^a+$",
                            "x{2,}y{,2}",
                            "[\\d.]+|-",
                            "(?<name>ab|c)\\1?"};
  std::mt19937 rng(5);
  for (const char* p : patterns) {
    if (std::string(p).find("\\1") != std::string::npos) continue;  // std::regex would backref
    const Grammar g = parse_gbnf(regex_to_gbnf(p));
    std::string ecma = p;
    // ECMAScript spells {,n} as {0,n}.
    for (size_t at; (at = ecma.find("{,")) != std::string::npos;) ecma.replace(at, 2, "{0,");
    const std::regex re(ecma, std::regex::ECMAScript);
    // The pattern's own characters and a few others, so that random strings often match.
    std::string alphabet = "1 aZ\n";
    for (const char* c = p; *c; ++c)
      if ((std::isalnum(static_cast<unsigned char>(*c)) || std::strchr(" .-@", *c)) &&
          alphabet.find(*c) == std::string::npos)
        alphabet += *c;
    int matched = 0;
    for (int trial = 0; trial < 4000; ++trial) {
      std::string s;
      const int len = static_cast<int>(rng() % 9);
      for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
      const bool want = std::regex_match(s, re);
      matched += want;
      ASSERT_EQ(accepts(g, s), want) << p << " on '" << s << "'";
    }
    // Random strings must hit both sides for the comparison to mean something.
    EXPECT_GT(matched, 0) << p;
    EXPECT_LT(matched, 4000) << p;
  }
  // Known members, which random strings would not find.
  const Grammar money = parse_gbnf(regex_to_gbnf("\\d+(\\.\\d{1,2})?"));
  for (const char* s : {"0", "12.5", "999.99"}) EXPECT_TRUE(accepts(money, s)) << s;
  for (const char* s : {"", ".5", "1.", "1.234"}) EXPECT_FALSE(accepts(money, s)) << s;
  const Grammar names = parse_gbnf(regex_to_gbnf("[A-Z][a-z]*( [A-Z][a-z]*)*"));
  EXPECT_TRUE(accepts(names, "Ada Lovelace"));
  EXPECT_FALSE(accepts(names, "Ada lovelace"));
  const Grammar group = parse_gbnf(regex_to_gbnf("(?P<x>ab|c)+"));
  EXPECT_TRUE(accepts(group, "abcab"));
  EXPECT_FALSE(accepts(group, "abb"));
}

TEST(RegexGrammar, UnicodeAndEscapes) {
  const Grammar g = parse_gbnf(regex_to_gbnf("[é-ë]\\u00e9\\x41\\t[^\\s\\d]"));
  EXPECT_TRUE(accepts(g, "êéA\tz"));
  EXPECT_TRUE(accepts(g, "ëéA\t✓"));
  EXPECT_FALSE(accepts(g, "êéA\t7"));
  EXPECT_FALSE(accepts(g, "eéA\tz"));
}

TEST(RegexGrammar, JsonStringModeWritesEscapes) {
  const std::string expr = regex_gbnf_expression("a\"[\\\\x]\\n", true);
  const Grammar g = parse_gbnf("root ::= " + expr + "\n");
  EXPECT_TRUE(accepts(g, "a\\\"\\\\\\n"));  // a \" \\ \n as a JSON string's text
  EXPECT_TRUE(accepts(g, "a\\\"x\\n"));
  EXPECT_FALSE(accepts(g, "a\"x\n"));  // raw quote and newline: not inside a JSON string
}

TEST(RegexGrammar, RefusesWhatItCannotFollowByName) {
  EXPECT_NE(regex_error("(a)\\1").find("backreferences"), std::string::npos);
  // Bytes that decode past U+10FFFF, to a surrogate, or overlong are not characters (the fuzz
  // target found a class of them turned into a grammar escape beyond U+10FFFF).
  for (const char* bad : {"[\xF6\x90\x80\x80]", "\xF4\x90\x80\x80", "\xED\xA0\x80", "\xC0\xAF",
                          "[a-\xF7\xBF\xBF\xBF]"})
    EXPECT_NE(regex_error(bad).find("invalid UTF-8"), std::string::npos) << bad;
  EXPECT_NE(regex_error("a(?=b)").find("lookaround"), std::string::npos);
  EXPECT_NE(regex_error("\\bword").find("word boundaries"), std::string::npos);
  EXPECT_NE(regex_error("(?i)abc").find("inline flags"), std::string::npos);
  EXPECT_NE(regex_error("a++").find("possessive"), std::string::npos);
  EXPECT_NE(regex_error("a**").find("multiple repeat"), std::string::npos);
  EXPECT_NE(regex_error("*a").find("nothing to repeat"), std::string::npos);
  EXPECT_NE(regex_error("(ab").find("missing ')'"), std::string::npos);
  EXPECT_NE(regex_error("ab)").find("unbalanced"), std::string::npos);
  EXPECT_NE(regex_error("[z-a]").find("backwards"), std::string::npos);
  EXPECT_NE(regex_error("a$b").find("'$'"), std::string::npos);
  EXPECT_NE(regex_error("a^b").find("'^'"), std::string::npos);
  EXPECT_NE(regex_error("a{2000}").find("above 1000"), std::string::npos);
  EXPECT_NE(regex_error("[abc").find("unterminated"), std::string::npos);
  EXPECT_NE(regex_error("\\q").find("unknown escape"), std::string::npos);
  EXPECT_EQ(regex_error("a{x}"), "");  // a plain '{', as Python reads it
}

TEST(RegexGrammar, ChoiceIsExactlyOneOfTheStrings) {
  const Grammar g = parse_gbnf(choice_to_gbnf({"yes", "no", "maybe \"so\"", ""}));
  for (const char* s : {"yes", "no", "maybe \"so\"", ""}) EXPECT_TRUE(accepts(g, s)) << s;
  for (const char* s : {"ye", "yesno", "Yes", "maybe"}) EXPECT_FALSE(accepts(g, s)) << s;
  EXPECT_THROW(choice_to_gbnf({}), Error);
}

// Integer bounds: every value in a window accepted iff in range, as the schema says.
// Issue 49: an enum is factored by common prefixes, so that a matcher has one way to continue
// per distinct next character, not one per value (20,000 values held 20,000 stacks at the
// first character, and every mask needed a context per stack). The language is unchanged:
// every value, and nothing else.
TEST(JsonSchemaGrammar, LargeEnumsAreFactoredAndExact) {
  std::mt19937_64 rng(7);
  ojson values = ojson::array();
  std::vector<std::string> words;
  for (int i = 0; i < 20000; ++i) {
    std::string w;
    const int len = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < len; ++k) w += static_cast<char>('a' + rng() % 6);
    words.push_back(w);
    values.push_back(w);
  }
  values.push_back("é\"x");  // escapes and multi-byte characters
  values.push_back(12);
  values.push_back(nullptr);
  const Grammar g = parse_gbnf(json_schema_to_gbnf(ojson{{"enum", values}}));
  GrammarMatcher m(g);
  EXPECT_LE(m.ways(), 4u);  // '"', '1', 'n'
  ASSERT_TRUE(m.accept("\""));
  EXPECT_LE(m.ways(), 8u);  // a..f, and the "é" value's first character
  for (size_t i = 0; i < words.size(); i += 37) {
    EXPECT_TRUE(accepts(g, "\"" + words[i] + "\"")) << words[i];
    EXPECT_FALSE(accepts(g, "\"" + words[i] + "g\"")) << words[i];
  }
  EXPECT_TRUE(accepts(g, R"("é\"x")"));
  EXPECT_TRUE(accepts(g, "12"));
  EXPECT_TRUE(accepts(g, "null"));
  EXPECT_FALSE(accepts(g, "1"));
  EXPECT_FALSE(accepts(g, "\"\""));
  // Values that are prefixes of others: "ab" and "abc" both, "a" alone too.
  const Grammar p = schema_grammar(R"({"enum": ["abc", "ab", "a", "abd", "b"]})");
  for (const char* yes : {"\"abc\"", "\"ab\"", "\"a\"", "\"abd\"", "\"b\""})
    EXPECT_TRUE(accepts(p, yes)) << yes;
  for (const char* no : {"\"abe\"", "\"\"", "\"abcd\"", "\"ba\"", "\"abc"})
    EXPECT_FALSE(accepts(p, no)) << no;
}

TEST(JsonSchemaGrammar, IntegerBoundsExactlyOverAWindow) {
  struct Case {
    const char* schema;
    std::optional<int64_t> lo, hi;
  };
  const Case cases[] = {
      {R"({"type":"integer","minimum":0,"maximum":150})", 0, 150},
      {R"({"type":"integer","minimum":-37,"maximum":1024})", -37, 1024},
      {R"({"type":"integer","minimum":-999,"maximum":-100})", -999, -100},
      {R"({"type":"integer","exclusiveMinimum":7,"exclusiveMaximum":93})", 8, 92},
      {R"({"type":"integer","minimum":5,"maximum":5})", 5, 5},
      {R"({"type":"integer","minimum":198})", 198, std::nullopt},
      {R"({"type":"integer","maximum":-3})", std::nullopt, -3},
      {R"({"type":"integer","maximum":77})", std::nullopt, 77},
      {R"({"type":"integer","minimum":-12})", -12, std::nullopt},
      {R"({"type":"integer","minimum":1.5,"maximum":9.5})", 2, 9},
      {R"({"type":"integer","minimum":10,"exclusiveMinimum":true,"maximum":20})", 11, 20},
  };
  for (const auto& c : cases) {
    const Grammar g = schema_grammar(c.schema);
    for (int64_t v = -1300; v <= 1300; ++v) {
      const bool want = (!c.lo || v >= *c.lo) && (!c.hi || v <= *c.hi);
      ASSERT_EQ(accepts(g, std::to_string(v)), want) << c.schema << " " << v;
    }
    EXPECT_FALSE(accepts(g, "007")) << c.schema;
    EXPECT_FALSE(accepts(g, "-0")) << c.schema;
    EXPECT_FALSE(accepts(g, "1.0")) << c.schema;
    if (!c.hi) {
      EXPECT_TRUE(accepts(g, "123456789012")) << c.schema;
    }
    if (!c.lo) {
      EXPECT_TRUE(accepts(g, "-123456789012")) << c.schema;
    }
  }
}

TEST(JsonSchemaGrammar, NumberBoundsWithFractions) {
  const Grammar g = schema_grammar(R"({"type":"number","minimum":-5,"maximum":10})");
  for (const char* s : {"-5", "-5.0", "-4.99", "0", "0.5", "-0.25", "9.999", "10", "10.00"})
    EXPECT_TRUE(accepts(g, s)) << s;
  for (const char* s : {"-5.01", "-6", "10.01", "11", "1e3", "05", "1."})
    EXPECT_FALSE(accepts(g, s)) << s;
  const Grammar pos = schema_grammar(R"({"type":"number","minimum":2})");
  for (const char* s : {"2", "2.5", "3", "1000000.25"}) EXPECT_TRUE(accepts(pos, s)) << s;
  for (const char* s : {"1.99", "-3", "0"}) EXPECT_FALSE(accepts(pos, s)) << s;
  const Grammar plain = schema_grammar(R"({"type":"number"})");
  for (const char* s : {"-0.5", "1e-7", "3.25E+2", "0"}) EXPECT_TRUE(accepts(plain, s)) << s;
  EXPECT_FALSE(accepts(plain, "+1"));
  EXPECT_NE(schema_error(R"({"type":"number","exclusiveMinimum":0})").find("exclusive"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"type":"number","minimum":0.5})").find("minimum"), std::string::npos);
}

// Every subset and order of four members: accepted iff the required ones are there, in the
// schema's order (the order properties are listed in, not sorted), and no others.
TEST(JsonSchemaGrammar, PropertiesInSchemaOrderWithOptionalOnes) {
  const Grammar g = schema_grammar(
      R"({"type":"object","properties":{"z":{"type":"integer"},"b":{"type":"boolean"},
          "m":{"type":"null"},"a":{"type":"string","maxLength":3}},"required":["b","a"]})");
  const std::vector<std::pair<std::string, std::string>> members = {
      {"z", "1"}, {"b", "true"}, {"m", "null"}, {"a", "\"hi\""}};
  std::vector<int> idx = {0, 1, 2, 3};
  for (int mask = 0; mask < 16; ++mask) {
    std::vector<int> chosen;
    for (int k : idx)
      if (mask & (1 << k)) chosen.push_back(k);
    std::sort(chosen.begin(), chosen.end());
    do {
      std::string s = "{";
      for (size_t i = 0; i < chosen.size(); ++i)
        s += fmt::format("{}\"{}\":{}", i ? "," : "", members[chosen[i]].first,
                         members[chosen[i]].second);
      s += "}";
      const bool has_required = (mask & 2) && (mask & 8);
      const bool in_order = std::is_sorted(chosen.begin(), chosen.end());
      ASSERT_EQ(accepts(g, s), has_required && in_order) << s;
    } while (std::next_permutation(chosen.begin(), chosen.end()));
  }
  EXPECT_FALSE(accepts(g, R"({"b":true,"a":"hi","q":1})"));  // no additional properties
  EXPECT_FALSE(accepts(g, R"({"b":true, "a":"hi"})"));       // compact: no whitespace
}

TEST(JsonSchemaGrammar, AdditionalPropertiesNeverRepeatADefinedKey) {
  const Grammar g = schema_grammar(
      R"({"properties":{"a":{"type":"string","maxLength":2},"ab":{"type":"null"}},
          "additionalProperties":{"type":"integer"}})");
  for (const char* s : {"{}", R"({"a":"x"})", R"({"a":"x","b":1})", R"({"b":1,"c":2})",
                        R"({"abc":3})", R"({"":4})", R"({"ab":null,"a2":5})"})
    EXPECT_TRUE(accepts(g, s)) << s;
  for (const char* s : {R"({"a":1})", R"({"ab":7})", R"({"a":"x","a":2})", R"({"b":"x"})"})
    EXPECT_FALSE(accepts(g, s)) << s;
  const Grammar any = schema_grammar(R"({"type":"object"})");
  EXPECT_TRUE(accepts(any, R"({"k":[1,{"n":null}],"s":"v"})"));
  EXPECT_FALSE(accepts(any, "[1]"));
}

TEST(JsonSchemaGrammar, ArraysCountItemsAndTuples) {
  const Grammar g =
      schema_grammar(R"({"type":"array","items":{"enum":[1,2]},"minItems":2,"maxItems":4})");
  for (int n = 0; n <= 6; ++n) {
    std::string s = "[";
    for (int k = 0; k < n; ++k) s += (k ? ",1" : "2");
    s += "]";
    EXPECT_EQ(accepts(g, s), n >= 2 && n <= 4) << s;
  }
  const Grammar t = schema_grammar(
      R"({"prefixItems":[{"type":"string","maxLength":1},{"type":"boolean"}],"items":{"type":"null"},"minItems":1,"maxItems":4})");
  for (const char* s :
       {R"(["a"])", R"(["a",true])", R"(["a",false,null])", R"(["",true,null,null])"})
    EXPECT_TRUE(accepts(t, s)) << s;
  for (const char* s : {"[]", R"([true])", R"(["a",null])", R"(["a",true,null,null,null])"})
    EXPECT_FALSE(accepts(t, s)) << s;
  const Grammar closed = schema_grammar(R"({"prefixItems":[{"type":"integer"}],"items":false})");
  EXPECT_TRUE(accepts(closed, "[]"));
  EXPECT_TRUE(accepts(closed, "[3]"));
  EXPECT_FALSE(accepts(closed, "[3,4]"));
}

TEST(JsonSchemaGrammar, CombinatorsRefsAndRecursion) {
  const Grammar tree = schema_grammar(
      R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
          "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v","kids"]}},
          "$ref":"#/$defs/node"})");
  EXPECT_TRUE(
      accepts(tree, R"({"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]},{"v":4,"kids":[]}]})"));
  EXPECT_FALSE(accepts(tree, R"({"v":1,"kids":[{"v":2}]})"));
  const Grammar any_of = schema_grammar(
      R"({"anyOf":[{"type":"string","maxLength":2},{"type":"integer","minimum":5}]})");
  for (const char* s : {"\"ab\"", "5", "60"}) EXPECT_TRUE(accepts(any_of, s)) << s;
  for (const char* s : {"\"abc\"", "4", "null"}) EXPECT_FALSE(accepts(any_of, s)) << s;
  const Grammar one_of = schema_grammar(
      R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind","x"]},
                   {"type":"object","properties":{"kind":{"const":"b"}},"required":["kind"]}]})");
  EXPECT_TRUE(accepts(one_of, R"({"kind":"a","x":1})"));
  EXPECT_TRUE(accepts(one_of, R"({"kind":"b"})"));
  EXPECT_FALSE(accepts(one_of, R"({"kind":"a"})"));
  const Grammar all_of = schema_grammar(
      R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                   {"properties":{"b":{"type":"boolean"}},"required":["b"]}]})");
  EXPECT_TRUE(accepts(all_of, R"({"a":1,"b":true})"));
  EXPECT_FALSE(accepts(all_of, R"({"a":1})"));
  const Grammar sib =
      schema_grammar(R"({"type":"object","properties":{"t":{"type":"integer"}},"required":["t"],
      "anyOf":[{"properties":{"u":{"type":"null"}},"required":["u"]},{"properties":{"v":{"type":"null"}},"required":["v"]}]})");
  EXPECT_TRUE(accepts(sib, R"({"t":1,"u":null})"));
  EXPECT_TRUE(accepts(sib, R"({"t":1,"v":null})"));
  EXPECT_FALSE(accepts(sib, R"({"t":1})"));
  const Grammar e = schema_grammar(
      R"({"enum":["red",2,null,{"k":[true]}],"type":["string","integer","object"]})");
  for (const char* s : {"\"red\"", "2", R"({"k":[true]})"}) EXPECT_TRUE(accepts(e, s)) << s;
  EXPECT_FALSE(accepts(e, "null"));  // not of the listed types
  const Grammar nullable = schema_grammar(R"({"type":"string","maxLength":1,"nullable":true})");
  EXPECT_TRUE(accepts(nullable, "null"));
  EXPECT_TRUE(accepts(nullable, "\"x\""));
}

TEST(JsonSchemaGrammar, StringFormatsLengthsAndPatterns) {
  const Grammar date = schema_grammar(R"({"type":"string","format":"date"})");
  for (const char* s : {"\"2024-02-28\"", "\"1999-12-31\"", "\"2024-04-30\"", "\"0001-01-01\""})
    EXPECT_TRUE(accepts(date, s)) << s;
  for (const char* s :
       {"\"0000-01-01\"", "\"2024-02-30\"", "\"2024-04-31\"", "\"2024-13-01\"", "\"2024-1-01\""})
    EXPECT_FALSE(accepts(date, s)) << s;
  const Grammar dt = schema_grammar(R"({"type":"string","format":"date-time"})");
  EXPECT_TRUE(accepts(dt, "\"2024-05-06T07:08:09Z\""));
  EXPECT_TRUE(accepts(dt, "\"2024-05-06T23:59:59.123+05:30\""));
  EXPECT_FALSE(accepts(dt, "\"2024-05-06T24:00:00Z\""));
  EXPECT_FALSE(accepts(dt, "\"2024-05-06T07:08:09\""));  // RFC 3339 needs the offset
  const Grammar uuid = schema_grammar(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(accepts(uuid, "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_FALSE(accepts(uuid, "\"123e4567-e89b-12d3-a456-42661417400\""));
  const Grammar email = schema_grammar(R"({"type":"string","format":"email"})");
  EXPECT_TRUE(accepts(email, "\"ada.l+x@example.co.uk\""));
  EXPECT_FALSE(accepts(email, "\"ada@localhost\""));
  EXPECT_FALSE(accepts(email, "\"@example.com\""));
  const Grammar ip = schema_grammar(R"({"type":"string","format":"ipv4"})");
  EXPECT_TRUE(accepts(ip, "\"255.0.10.199\""));
  EXPECT_FALSE(accepts(ip, "\"256.0.0.1\""));
  EXPECT_FALSE(accepts(ip, "\"01.0.0.1\""));
  const Grammar len = schema_grammar(R"({"type":"string","minLength":2,"maxLength":3})");
  for (const char* s : {"\"ab\"", "\"a\\nb\"", "\"\\u00e9\\\"x\"", "\"été\""})
    EXPECT_TRUE(accepts(len, s)) << s;
  for (const char* s : {"\"a\"", "\"abcd\"", "\"a\nb\""}) EXPECT_FALSE(accepts(len, s)) << s;
  const Grammar pat = schema_grammar(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})");
  EXPECT_TRUE(accepts(pat, "\"AB-123\""));
  EXPECT_FALSE(accepts(pat, "\"AB-1234\""));
}

TEST(JsonSchemaGrammar, WhitespaceOnlyWhereAllowed) {
  const auto text = json_schema_to_gbnf(
      ojson::parse(
          R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]})"),
      {"[ ]?"});
  const Grammar g = parse_gbnf(text);
  EXPECT_TRUE(accepts(g, R"({ "a" : [ 1 , 2 ] })"));
  EXPECT_TRUE(accepts(g, R"({"a":[1,2]})"));
  EXPECT_FALSE(accepts(g, "{  \"a\":[]}"));
}

TEST(JsonSchemaGrammar, RefusesWhatItCannotEnforceByName) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"string","not":{"const":"a"}})", "'not' is not supported"},
      {R"({"properties":{"a":{"type":"integer","multipleOf":3}}})", "#/properties/a: 'multipleOf'"},
      {R"({"type":"array","uniqueItems":true})", "'uniqueItems'"},
      {R"({"type":"object","minProperties":1})", "'minProperties'"},
      {R"({"type":"object","patternProperties":{"x":{}}})", "'patternProperties'"},
      {R"({"if":{},"then":{}})", "'if'"},
      {R"({"type":"string","format":"hostname"})", "format 'hostname'"},
      {R"({"oneOf":[{"type":"integer"},{"type":"number"}]})",
       "'oneOf' alternatives that may overlap"},
      {R"({"$ref":"#/$defs/missing"})", "points at nothing"},
      {R"({"$ref":"https://example.com/s.json"})", "not in this document"},
      {R"({"type":"strin"})", "unknown type 'strin'"},
      {R"({"type":"integer","minimum":5,"maximum":4})", "no value"},
      {R"({"type":"string","maxLength":5000})", "'maxLength' above 1000"},
      {R"({"type":"string","pattern":"(a)\\1"})", "'pattern': regex: backreferences"},
      {R"({"allOf":[{"type":"string"},{"type":"integer"}]})", "types no value has"},
      {R"({"required":["x"],"properties":{},"additionalProperties":false})",
       "required property 'x'"},
      {R"({"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/a"}}})", "left-recursive"},
      {R"(false)", "matches nothing"},
      {R"({"enum":[]})", "'enum'"},
      // A "nullable" that is no boolean (fuzz_json_schema: the JSON library's exception escaped).
      {R"({"type":"array","nullable":3})", "'nullable' must be true or false"},
      {R"({"properties":{"a":{"allOf":[{"nullable":"yes"}]}}})",
       "'nullable' must be true or false"},
  };
  for (const auto& [schema, want] : cases) {
    const std::string err = schema_error(schema);
    EXPECT_NE(err.find(want), std::string::npos) << schema << " -> " << err;
  }
}

}  // namespace
}  // namespace tf
