// GBNF grammars (issue 24's first step): the parser's forms and errors, and the recognizer's
// answers on whole strings, on bytes split anywhere (partial UTF-8), and per token.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "core/error.h"
#include "sampling/grammar.h"
#include "sampling/regex_grammar.h"

namespace tf {
namespace {

// Whether the grammar accepts s as a whole sentence (fed in one piece, then byte by byte).
bool sentence(const Grammar& g, const std::string& s) {
  GrammarMatcher whole(g);
  const bool a = whole.accept(s) && whole.can_end();
  GrammarMatcher bytes(g);
  bool b = true;
  for (char c : s) b = b && bytes.accept(std::string(1, c));
  b = b && bytes.can_end();
  EXPECT_EQ(a, b) << s;
  return a;
}

std::string error_of(const char* text) {
  try {
    parse_gbnf(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The error compiling gbnf against vocab gives ("" when it compiles).
std::string compile_error(const GrammarVocab& vocab, const std::string& gbnf) {
  try {
    vocab.compile(gbnf);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Grammar, JsonAcceptsJsonAndNothingElse) {
  const Grammar g = parse_gbnf(kJsonGbnf);
  for (const char* ok : {R"({"a": [1, 2.5e-3, true, null], "b": {"c": "x\"y\u00e9"}})", "[]",
                         "-0.5", R"("héllo ✓")", "{ }", "[[[]]]"}) {
    EXPECT_TRUE(sentence(g, ok)) << ok;
  }
  for (const char* bad : {"{", R"({"a" 1})", "01", "[1,]", "tru", R"("\q")", "{} {}", "\"\x01\""}) {
    EXPECT_FALSE(sentence(g, bad)) << bad;
  }
  GrammarMatcher m(g);
  EXPECT_TRUE(m.accept("{\"k\": "));
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept("}"));  // refused, and the state is unchanged
  EXPECT_TRUE(m.accept("7}"));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.must_end());
}

TEST(Grammar, RepetitionsCountAsWritten) {
  const Grammar g = parse_gbnf("root ::= \"a\"{2,4} [xy]{3} \"b\"? (\"c\" | \"d\")+\n");
  EXPECT_TRUE(sentence(g, "aaxyxc"));
  EXPECT_TRUE(sentence(g, "aaaayyybdcd"));
  EXPECT_FALSE(sentence(g, "axyxc"));      // one a
  EXPECT_FALSE(sentence(g, "aaaaaxyxc"));  // five
  EXPECT_FALSE(sentence(g, "aaxyc"));      // two of [xy]
  EXPECT_FALSE(sentence(g, "aaxyxb"));     // no c or d
  // A long repetition keeps the recognizer's stacks shallow (tail calls).
  const Grammar many = parse_gbnf("root ::= \"x\"*\n");
  EXPECT_TRUE(sentence(many, std::string(20000, 'x')));
}

TEST(Grammar, PartialUtf8AcrossPiecesIsJudgedByWhatItCanBecome) {
  const Grammar g = parse_gbnf("root ::= [α-ω]+ \"✓\"\n");  // Greek letters, then a check mark
  GrammarMatcher m(g);
  const std::string alpha = "α";  // CE B1
  EXPECT_TRUE(m.accept(alpha.substr(0, 1)));
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.accept(alpha.substr(1)));
  EXPECT_FALSE(m.accept("\xD0"));     // a Cyrillic lead byte: no Greek letter or ✓ starts so
  EXPECT_TRUE(m.accept("\xE2\x9C"));  // the first two bytes of ✓ (E2 9C 93)
  EXPECT_FALSE(m.accept("\x94"));     // ✔ (E2 9C 94) is not ✓
  EXPECT_TRUE(m.accept("\x93"));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.accept("\x93"));  // a stray continuation byte
}

// Only well-formed UTF-8 spells a character: an overlong form (a byte-fallback token such as
// <0xF0> followed by continuation bytes) must not pass for the ASCII character it encodes, nor
// a surrogate for a character class that spans it.
TEST(Grammar, OverlongFormsAndSurrogatesAreRefused) {
  const Grammar brace = parse_gbnf("root ::= \"{\" [a-z]\n");
  GrammarMatcher m(brace);
  for (const char* lead : {"\xC0", "\xC1", "\xE0", "\xF0", "\xE0\x81", "\xF0\x80\x81"})
    EXPECT_FALSE(m.accept(lead)) << "lead " << static_cast<int>(lead[0] & 0xFF);
  EXPECT_FALSE(m.accept("\xC1\xBB"));          // '{' in two bytes
  EXPECT_FALSE(m.accept("\xF0\x80\x81\xBB"));  // '{' in four
  EXPECT_TRUE(m.accept("{"));
  const Grammar any = parse_gbnf("root ::= [^\"]+\n");
  GrammarMatcher a(any);
  EXPECT_TRUE(a.accept("\xED\x9F\xBF"));   // U+D7FF
  EXPECT_FALSE(a.accept("\xED\xA0\x80"));  // U+D800, a surrogate
  EXPECT_FALSE(a.accept("\xF4\x90"));      // above U+10FFFF
  EXPECT_TRUE(a.accept("\xF4\x8F\xBF\xBF"));
  EXPECT_TRUE(a.accept("\xE0\xA0"));  // U+0800's first two bytes: the least three-byte form
}

TEST(Grammar, AllowedTokensAreExactlyTheOnesThatKeepASentencePossible) {
  const Grammar g = parse_gbnf("root ::= \"yes\" | \"no\" | \"maybe\" [0-9]\n");
  GrammarMatcher m(g);
  const std::vector<std::string> vocab = {"y", "yes", "ye", "n", "no!", "may", "be7", "", "x", "m"};
  EXPECT_EQ(m.allowed(vocab),
            (std::vector<bool>{true, true, true, true, false, true, false, false, false, true}));
  ASSERT_TRUE(m.accept("may"));
  EXPECT_EQ(m.allowed({"be", "be7", "be77", "b"}), (std::vector<bool>{true, true, false, true}));
}

// The trie walk answers exactly what trying each token alone answers, at every point of a
// sentence, over a random vocabulary of JSON-ish pieces (shared prefixes, multi-byte UTF-8).
TEST(Grammar, TrieMasksEqualTokenByTokenMasks) {
  const Grammar g = parse_gbnf(kJsonGbnf);
  const std::vector<std::string> atoms = {"{",  "}", "[",    "]",    "\"",   ":", ",",   " ",
                                          "\n", "a", "é",    "\xC3", "\xA9", "1", "0",   "-",
                                          ".",  "e", "true", "null", "\\",   "u", "\x01"};
  uint64_t rng = 42;
  auto next = [&] {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return rng >> 33;
  };
  std::vector<std::string> vocab;
  for (int t = 0; t < 3000; ++t) {
    std::string tok;
    const int n = 1 + static_cast<int>(next() % 4);
    for (int k = 0; k < n; ++k) tok += atoms[next() % atoms.size()];
    vocab.push_back(tok);
  }
  vocab.push_back("");
  const TokenTrie trie(vocab);
  GrammarMatcher m(g);
  const std::string text = R"({"ab": [1, -0.5e1, "x\u00e9é"], "c": {}})";
  for (size_t i = 0; i <= text.size(); ++i) {
    const std::vector<bool> naive = m.allowed(vocab);
    EXPECT_EQ(m.allowed(trie), naive) << "after " << text.substr(0, i);
    if (i == text.size()) {
      EXPECT_EQ(std::count(naive.begin(), naive.end(), true), 0);  // the sentence is whole
    } else {
      EXPECT_GT(std::count(naive.begin(), naive.end(), true), 0) << text.substr(0, i);
      ASSERT_TRUE(m.accept(text.substr(i, 1)));
    }
  }
}

// A grammar whose states double with every "x" (each x leaves a "y" to come by one of two
// rules: 2^k stacks after k x's).
const char* const kExplodingGbnf =
    "root ::= a\na ::= \"x\" a p | \"x\" a q | \"x\"\np ::= \"y\"\nq ::= \"y\"\n";

// The matcher refuses to follow more than 65536 ways to continue, with a clear error; under a
// deadline it gives up when the deadline passes, long before that (a budget the engine sets per
// token), and out of the deadline's scope the matcher goes on.
TEST(Grammar, StackExplosionAndDeadlinesFailWithAClearError) {
  const Grammar g = parse_gbnf(kExplodingGbnf);
  {
    GrammarMatcher m(g);
    std::string error;
    int taken = 0;
    try {
      for (; taken < 40; ++taken) ASSERT_TRUE(m.accept("x"));
    } catch (const Error& e) {
      error = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    }
    EXPECT_NE(error.find("more than 65536 ways to continue"), std::string::npos) << error;
    EXPECT_GE(taken, 12);  // about 3 * 2^k stacks after k x's
    EXPECT_LE(taken, 16);
  }
  GrammarMatcher m(g);
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(m.accept("x"));  // 2^11 stacks: within the limit
  std::string error;
  try {
    GrammarDeadline past(ThreadCpuClock::now() - std::chrono::seconds(1),
                         "the budget of 5 ms a token");
    for (int i = 0; i < 4; ++i) m.accept("x");
  } catch (const Error& e) {
    error = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted);
  }
  EXPECT_NE(error.find("too expensive"), std::string::npos) << error;
  EXPECT_NE(error.find("the budget of 5 ms a token"), std::string::npos) << error;
  EXPECT_TRUE(m.accept("x"));
  EXPECT_EQ(m.allowed(std::vector<std::string>{"x", "y", "z"}),
            (std::vector<bool>{true, true, false}));
}

// check_ambiguity (run by GrammarVocab::compile) refuses grammars whose ways to continue grow
// exponentially within the characters it follows, naming the text that showed it, and passes
// ordinary grammars, large alternations and ambiguity that starts only later.
TEST(Grammar, CompileRefusesExponentialAmbiguityItCanSee) {
  const GrammarVocab vocab(std::vector<std::string>{"", "x", "y", "a", "{", "\""});
  auto error_of = [&](const std::string& gbnf) { return compile_error(vocab, gbnf); };
  const std::string e = error_of(kExplodingGbnf);
  EXPECT_NE(e.find("too ambiguous"), std::string::npos) << e;
  EXPECT_NE(e.find("after 'xxxxxxxxxxx"), std::string::npos) << e;
  // Nested: every x opens two ways within a rule that itself doubles.
  const std::string nested = error_of(
      "root ::= b\nb ::= a b | a\na ::= \"x\" a p | \"x\" a q | \"x\"\np ::= \"y\"\n"
      "q ::= \"y\"\n");
  EXPECT_NE(nested.find("too ambiguous"), std::string::npos) << nested;
  // Regular languages stay polynomial once equal stacks merge ("(.{0,1000}){99}" has 138
  // ways after 16 characters): passed here, held by the engine's budgets and the limit.
  for (const char* regex : {"(.{0,1000}){99}", "(((.*)*)*)*", "(a|a)*b", "(a*)*b"})
    EXPECT_EQ(error_of(regex_to_gbnf(regex)), "") << regex;
  EXPECT_EQ(error_of(kJsonGbnf), "");
  EXPECT_EQ(error_of(regex_to_gbnf("[a-z]{1,8}( [a-z]{1,8}){2,6}\\.")), "");
  std::string many = "root ::= ";
  for (int k = 0; k < 3000; ++k) many += fmt::format("{}\"v{}\"", k ? " | " : "", k);
  EXPECT_EQ(error_of(many + "\n"), "");
  // Past the 16 characters it follows, only the matcher's limit and the engine's budgets hold.
  EXPECT_EQ(error_of("root ::= \"xxxxxxxxxxxxxxxxxx\" a\na ::= \"x\" a p | \"x\" a q | \"x\"\n"
                     "p ::= \"y\"\nq ::= \"y\"\n"),
            "");
}

// The context-mask cache keeps at most kMaxContexts contexts, dropping the least recently used:
// a grammar with more contexts than that still gets exact masks, those of evicted contexts
// included, and a matcher with many stacks (a large alternation) gets its mask from one walk.
TEST(Grammar, MaskCacheEvictsAndStaysExact) {
  const int kRules = static_cast<int>(CompiledGrammar::kMaxContexts) + 200;
  std::string gbnf = "root ::= ";
  for (int k = 0; k < kRules; ++k) gbnf += (k ? " | " : "") + fmt::format("\"{}:\" r{}", k, k);
  gbnf += "\n";
  for (int k = 0; k < kRules; ++k)
    gbnf += fmt::format("r{} ::= [a-z]{{{}}} \"{}\"\n", k, 1 + k % 3, k % 10);
  std::vector<std::string> tokens = {"", "a", "ab", "abc", "b7", "c", "3", "7", ":", "1:", "12"};
  for (int d = 0; d < 10; ++d) tokens.push_back(std::to_string(d) + ":");
  const GrammarVocab vocab(tokens);
  const auto compiled = vocab.compile(gbnf);
  const GrammarMatcher start(compiled->grammar());
  // The start has one stack per rule: one walk, nothing cached.
  EXPECT_EQ(compiled->allowed(start), start.allowed(vocab.trie));
  EXPECT_EQ(compiled->contexts(), 0u);
  auto check = [&](int k) {
    GrammarMatcher m = start;
    ASSERT_TRUE(m.accept(fmt::format("{}:", k)));
    EXPECT_EQ(compiled->allowed(m), m.allowed(vocab.trie)) << "rule " << k;
    ASSERT_TRUE(m.accept("a"));
    EXPECT_EQ(compiled->allowed(m), m.allowed(vocab.trie)) << "rule " << k << " after a";
  };
  for (int k = 0; k < kRules; ++k) check(k);
  EXPECT_EQ(compiled->contexts(), CompiledGrammar::kMaxContexts);
  for (int k = 0; k < 50; ++k) check(k);  // evicted early: computed again, the same answers
  EXPECT_EQ(compiled->contexts(), CompiledGrammar::kMaxContexts);
}

TEST(Grammar, ErrorsNameWhatAndWhere) {
  EXPECT_NE(error_of("root ::= foo\n").find("rule 'foo' is used (line 1) but not defined"),
            std::string::npos);
  EXPECT_NE(error_of("start ::= \"a\"\n").find("no 'root' rule"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\n").find("grammar:1:"), std::string::npos);
  EXPECT_NE(error_of("root ::= [a-\n").find("unterminated character class"), std::string::npos);
  EXPECT_NE(error_of("root ::= root \"a\" | \"b\"\n").find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= x\nx ::= \"b\"? root \"a\"\n").find("left-recursive"),
            std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{2000}\n").find("above 1000"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"\n").find("defined twice"), std::string::npos);
  EXPECT_NE(error_of("root ::= * \"a\"\n").find("follows nothing"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"\\q\"\n").find("unknown escape"), std::string::npos);
  EXPECT_NE(error_of("root ::= [z-a]\n").find("backwards"), std::string::npos);
}

// Token references (llama.cpp's <[ID]> and <TEXT>): a special token is taken only as itself,
// never spelled by the text tokens that write its characters; masks hold its bit exactly where
// the grammar expects it; a token reference beside a half-written character waits for the
// character's bytes.
TEST(Grammar, TokenReferencesTakeWholeTokensOnly) {
  // 0..3 text tokens, 4 "<|end|>" and 5 "<|call|>" special (no bytes).
  const GrammarVocab vocab({"a", "<|", "end|>", "\xC3", "", ""}, {{"<|end|>", 4}, {"<|call|>", 5}});
  const auto compiled = vocab.compile("root ::= \"a\"+ <|end|> [\u00e9a] <[5]>\n");
  const Grammar& g = compiled->grammar();
  auto allowed = [&](const GrammarMatcher& m) {
    std::vector<bool> a = compiled->allowed(m);
    EXPECT_EQ(a, m.allowed(vocab.trie));  // cached masks = one walk, token bits included
    return a;
  };
  GrammarMatcher m(g);
  EXPECT_EQ(allowed(m), (std::vector<bool>{true, false, false, false, false, false}));
  ASSERT_TRUE(m.accept_token(0, "a"));
  EXPECT_EQ(allowed(m), (std::vector<bool>{true, false, false, false, true, false}));
  EXPECT_FALSE(m.can_end());
  {
    GrammarMatcher spelled = m;  // "<|" "end|>" as text is not the token
    EXPECT_FALSE(spelled.accept_token(1, "<|"));
    EXPECT_FALSE(spelled.accept_token(5, ""));  // another special token
  }
  ASSERT_TRUE(m.accept_token(4, ""));
  EXPECT_EQ(m.expected_tokens(), std::vector<uint32_t>{});
  // "\xC3" starts "é": half a character, then its second byte; a token waits meanwhile.
  ASSERT_TRUE(m.accept_token(3, "\xC3"));
  EXPECT_FALSE(m.accept_token(5, ""));
  EXPECT_EQ(allowed(m), (std::vector<bool>(6, false)));  // no token holds "\xA9" alone
  ASSERT_TRUE(m.accept("\xA9"));
  EXPECT_EQ(m.expected_tokens(), std::vector<uint32_t>{5});
  EXPECT_EQ(allowed(m), (std::vector<bool>{false, false, false, false, false, true}));
  ASSERT_TRUE(m.accept_token(5, ""));
  EXPECT_TRUE(m.must_end());

  // A token element and text at one place: both ways are followed.
  const auto both = vocab.compile("root ::= (<[0]> \"x\" | \"a\" \"y\")\n");
  GrammarMatcher b(both->grammar());
  ASSERT_TRUE(b.accept_token(0, "a"));
  EXPECT_TRUE(GrammarMatcher(b).accept("x"));
  EXPECT_TRUE(GrammarMatcher(b).accept("y"));
}

TEST(Grammar, TokenReferenceErrors) {
  const GrammarVocab vocab({"a", ""}, {{"<|end|>", 1}});
  auto error = [&](const std::string& gbnf) { return compile_error(vocab, gbnf); };
  EXPECT_NE(error("root ::= <|nope|>\n").find("'<|nope|>' is not a special token"),
            std::string::npos);
  EXPECT_NE(error("root ::= <[2]>\n").find("token id 2 is outside the vocabulary (0..1)"),
            std::string::npos);
  EXPECT_NE(error("root ::= !<|end|>\n").find("negated tokens"), std::string::npos);
  EXPECT_NE(error("root ::= <|end\n").find("unterminated token reference"), std::string::npos);
  EXPECT_NE(error("root ::= <[x]>\n").find("expected '<[ID]>'"), std::string::npos);
  EXPECT_NE(error_of("root ::= <|end|>\n").find("needs the model's vocabulary"), std::string::npos);
  EXPECT_EQ(error_of("root ::= <[7]>\n"), "");  // by id, taken as written without a vocabulary
}

TEST(Grammar, PrefixedRulesJoinGrammarsMadeApart) {
  const std::string a = "root ::= item (\",\" item)*\nitem ::= [a-z]{1,3} \"#\\\"root\" <|end|>\n";
  const std::string renamed = gbnf_prefix_rules(a, "t0-");
  EXPECT_EQ(renamed,
            "t0-root ::= t0-item (\",\" t0-item)*\nt0-item ::= [a-z]{1,3} \"#\\\"root\" <|end|>\n");
  const GrammarVocab vocab({"x", ""}, {{"<|end|>", 1}});
  const auto joined = vocab.compile("root ::= t0-root | t1-root\n" + renamed +
                                    gbnf_prefix_rules("root ::= \"z\"\n", "t1-"));
  GrammarMatcher m(joined->grammar());
  EXPECT_TRUE(m.accept("ab#\"root"));
}

}  // namespace
}  // namespace tf
