#pragma once
// Context-free grammars for constrained decoding (issue 24, first step): llama.cpp's GBNF text
// format parsed into rules over Unicode code points, and a recognizer that follows every way the
// text so far can continue (a set of pushdown stacks, as llama.cpp's grammar sampler keeps them)
// as bytes arrive, partial UTF-8 sequences included, so that a token spanning several grammar
// symbols, or only part of a character, is judged exactly.
//
// GBNF: rules `name ::= alternatives` (one per line; a rule continues on lines that start
// inside parentheses or after `|` / `::=`), `root` the start; sequences of terms; terms are
// "literals" (escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH), [character classes]
// (ranges, ^ negation), `.` (any character), rule names, ( groups ), each optionally followed
// by *, +, ?, {m}, {m,} or {m,n}; `#` comments. Errors name the line and column.
// Tokens as llama.cpp's GBNF writes them (its token references of Dec 2025): `<[ID]>` is the
// token of that id, `<TEXT>` the special token whose text is <TEXT> ("<|message|>"), each one
// whole token of the output, never its text spelled by other tokens (a special token decodes to
// no grammar bytes at all). `<TEXT>` needs the vocabulary (GrammarVocab::compile); the negated
// form `!<...>` is refused.

#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

struct GrammarElement {
  enum Kind : uint8_t { kChars, kRule, kToken } kind = kChars;
  bool negated = false;                               // kChars: any code point not in ranges
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // kChars: inclusive code point ranges
  uint32_t rule = 0;                                  // kRule: the rule's index; kToken: its id
};

struct Grammar {
  // rules[r] is a list of alternatives, each a sequence of elements (empty: the empty string).
  std::vector<std::vector<std::vector<GrammarElement>>> rules;
  std::vector<std::string> names;  // per rule (generated rules: "name_3")
  uint32_t root = 0;
};

// A JSON value (RFC 8259: objects, arrays, strings with escapes, numbers, literals, whitespace)
// in GBNF: what a JSON-only output (response_format json_object) is held to.
extern const char* const kJsonGbnf;

struct GrammarVocab;
class Tokenizer;

// Parses GBNF; throws Error (kInvalidArgument) naming the line and column of the first problem:
// syntax, an undefined rule, no `root`, left recursion (which a recognizer cannot follow), or a
// grammar larger than the limits (64k rules, 1 MiB of text, repetition counts above 1000).
// vocab: where token references are resolved and held to (an id past the vocabulary, a text
// no special token has); without one `<TEXT>` is refused and `<[ID]>` taken as written.
Grammar parse_gbnf(std::string_view text, const GrammarVocab* vocab = nullptr);

// The same grammar with every rule renamed prefix + name ("root" becomes prefix + "root"), so
// that grammars made apart (a tool's arguments each) can be joined in one text.
std::string gbnf_prefix_rules(std::string_view gbnf, std::string_view prefix);

// A cheap look for exponential ambiguity when a grammar is compiled (GrammarVocab::compile):
// follows it for up to 16 characters, each time taking the character that leaves the most ways
// to continue (an adversary's pick among the characters its stacks expect next), and throws
// Error (kInvalidArgument) naming that text once more than 4096 ways are open: grammars whose
// ways double with every character (nested rules that each leave a different continuation
// pending) are refused before they reach the engine. Regular languages stay polynomial once equal
// stacks merge ("(.{0,1000}){99}" has 138 ways after 16 characters) and pass. It proves only what
// it sees (within `budget` of the thread's CPU time); the matcher's own limit and the engine's
// budgets hold the rest.
void check_ambiguity(const Grammar& grammar,
                     std::chrono::milliseconds budget = std::chrono::milliseconds(100));

// A vocabulary's token bytes as a trie, built once per tokenizer: a mask walks it, so a prefix
// many tokens share is matched once for all of them.
class TokenTrie {
 public:
  explicit TokenTrie(const std::vector<std::string>& tokens);
  size_t tokens() const { return count_; }

 private:
  friend class GrammarMatcher;
  friend class CompiledGrammar;
  struct Node {
    std::vector<std::pair<uint8_t, uint32_t>> children;  // byte -> node, ascending
    std::vector<uint32_t> ends;                          // the tokens that end here
  };
  std::vector<Node> nodes_;
  size_t count_ = 0;
};

class CompiledGrammar;

// A model's vocabulary for constrained decoding: each token's bytes (Tokenizer::vocabulary_bytes)
// and their trie. Built once per model; it also keeps the grammars compiled against it, so that
// requests sending the same schema share one grammar and its mask cache (as XGrammar caches
// compiled grammars).
struct GrammarVocab {
  std::vector<std::string> bytes;  // per token id; empty for special tokens
  TokenTrie trie;
  std::map<std::string, uint32_t, std::less<>> special;  // a special token's text -> its id
  explicit GrammarVocab(std::vector<std::string> b,
                        std::map<std::string, uint32_t, std::less<>> s = {})
      : bytes(std::move(b)), trie(bytes), special(std::move(s)) {}
  // A tokenizer's: every token's bytes (Tokenizer::vocabulary_bytes) and its special tokens by
  // their text.
  static std::shared_ptr<const GrammarVocab> of(const Tokenizer& tokenizer);

  // The grammar of this GBNF text compiled against this vocabulary: from the cache (the 32
  // most recently used), or parsed now (parse_gbnf's and check_ambiguity's errors).
  std::shared_ptr<const CompiledGrammar> compile(const std::string& gbnf) const;

 private:
  mutable std::mutex mu_;
  mutable std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> compiled_;
};

// How much work a constraint may cost the thread that runs it: while one is in scope (on that
// thread), the matcher and the mask computations check the thread's CPU time every few thousand
// units of work and
// throw Error (kResourceExhausted) naming the budget once the deadline passes, so that a
// grammar whose states explode, or whose masks need long vocabulary walks, fails its own
// sequence within about the budget instead of holding the engine step.
// The CPU time of the calling thread, as a chrono clock: a constraint's budgets count the work
// it does, not the time a loaded machine keeps its thread waiting.
struct ThreadCpuClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<ThreadCpuClock>;
  static constexpr bool is_steady = true;
  static time_point now() noexcept;
};

// Thrown instead of the Error by a GrammarDeadline made to yield: the work was only tried inline
// and goes on elsewhere (SequenceSampler hands it to its GrammarWorker).
struct GrammarYield {};

class GrammarDeadline {
 public:
  // what: the budget's name in the error ("the step's budget of 200 ms"). yield: throw
  // GrammarYield instead of the Error when the deadline passes.
  GrammarDeadline(ThreadCpuClock::time_point deadline, std::string what, bool yield = false);
  ~GrammarDeadline();
  GrammarDeadline(const GrammarDeadline&) = delete;
  GrammarDeadline& operator=(const GrammarDeadline&) = delete;
  // Throws if the innermost deadline in scope on this thread has passed (every call reads the
  // clock; the grammar's loops call it through a counter).
  static void check();

 private:
  ThreadCpuClock::time_point deadline_;
  std::string what_;
  bool yield_;
  GrammarDeadline* outer_;
};

// Follows a grammar byte by byte. Copyable: a copy is a snapshot (a token is tried on a copy).
class GrammarMatcher {
 public:
  explicit GrammarMatcher(const Grammar& grammar);

  // Takes bytes if the text so far plus them is still a prefix of a sentence of the grammar:
  // true and the state advanced, or false and the state unchanged. A multi-byte UTF-8 character
  // may arrive in several calls.
  bool accept(std::string_view bytes);
  // Takes token `id` whose text is `bytes` (empty for a special token): as a token element the
  // grammar expects now, or as its bytes; the ways of both are kept.
  bool accept_token(uint32_t id, std::string_view bytes);
  // The ids token elements expect now (ascending).
  std::vector<uint32_t> expected_tokens() const;
  // Whether the text so far is a whole sentence (the grammar allows stopping here).
  bool can_end() const;
  // Whether nothing at all can follow (a sentence that cannot be extended).
  bool must_end() const;
  // How many ways the text so far can continue (the recognizer's stacks): what a grammar's
  // ambiguity costs each step.
  size_t ways() const { return stacks_.size(); }
  // Per token (its bytes): whether accept() would take it now.
  std::vector<bool> allowed(const std::vector<std::string>& tokens) const;
  // The same over a trie of the tokens (the same answers, prefixes shared).
  std::vector<bool> allowed(const TokenTrie& trie) const;

 private:
  friend class CompiledGrammar;
  struct Pos {  // an element inside an alternative of a rule
    uint32_t rule, alt, elem;
    bool operator==(const Pos&) const = default;
    bool operator<(const Pos& o) const {
      return rule != o.rule ? rule < o.rule : alt != o.alt ? alt < o.alt : elem < o.elem;
    }
  };
  using Stack = std::vector<Pos>;  // the innermost position last

  // Adds stack, with its top expanded until it is a character element (or empty), to out.
  void expand(Stack stack, std::vector<Stack>& out, int depth) const;
  friend void check_ambiguity(const Grammar& grammar, std::chrono::milliseconds budget);
  // An empty matcher of grammar (no stacks): what advance() fills.
  explicit GrammarMatcher(const Grammar* grammar) : grammar_(grammar) {}
  // out = this matcher after bytes, if it takes them (accept() without changing this one).
  bool advance(std::string_view bytes, GrammarMatcher& out) const;
  // to = from after the code point, if some stack takes it.
  bool step_code_point(const std::vector<Stack>& from, uint32_t cp, std::vector<Stack>& to) const;
  static std::vector<Stack> dedupe(std::vector<Stack> stacks);
  template <class Visit>
  static void walk(const TokenTrie& trie, GrammarMatcher start, Visit visit);

  const Grammar* grammar_;
  std::vector<Stack> stacks_;
  // A partial UTF-8 character: its bytes so far and how many it has in all.
  uint32_t pending_cp_ = 0;
  int pending_left_ = 0;
  uint32_t pending_min_ = 0;  // the least code point its length may spell (no overlong forms)
};

// A grammar compiled against a vocabulary, with XGrammar's adaptive token mask cache: for each
// context a matcher's stack can be in (its top frames, up to kContextFrames), the tokens
// accepted whatever the frames below hold and the few whose answer depends on them, computed
// the first time that context is reached and kept. A mask is then the union of the cached
// accepted sets of the matcher's stacks, plus the uncertain tokens checked one by one: inside a
// JSON string that is the tokens that close the string and go on. Thread-safe: the sequences of
// a request, and requests sending the same grammar, share one.
class CompiledGrammar {
 public:
  static constexpr size_t kContextFrames = 5;
  // Contexts kept per grammar (a 150k vocabulary's mask is 19 KB), the least recently used
  // dropped first past it.
  static constexpr size_t kMaxContexts = 1024;
  // A matcher with more stacks than this whose contexts are not all cached gets its mask from
  // one trie walk with all its stacks at once (a large enum's alternatives, an ambiguous
  // repetition): each uncached context would be a walk of its own.
  static constexpr size_t kMaxContextWalks = 8;
  CompiledGrammar(Grammar grammar, const GrammarVocab& vocab);
  const Grammar& grammar() const { return grammar_; }
  // The tokens the matcher (of this grammar) accepts now, a bit per token id (bit t % 64 of
  // word t / 64): GrammarMatcher::allowed's answers.
  std::vector<uint64_t> mask(const GrammarMatcher& matcher) const;
  // The same as one bool per token.
  std::vector<bool> allowed(const GrammarMatcher& matcher) const;
  // How many contexts have been computed (for tests and benchmarks).
  size_t contexts() const;

 private:
  struct ContextMask {
    std::vector<uint64_t> accepted;  // bit per token
    std::vector<uint32_t> uncertain;
  };
  std::shared_ptr<const ContextMask> context_mask(const GrammarMatcher::Stack& stack) const;
  ContextMask compute(const GrammarMatcher::Stack& frames, bool whole) const;

  std::shared_ptr<const ContextMask> cached(const std::string& key) const;
  static std::string context_key(const GrammarMatcher::Stack& stack);

  Grammar grammar_;
  const GrammarVocab* vocab_;
  mutable std::mutex mu_;
  // key -> (mask, its place in lru_); lru_ most recently used first.
  mutable std::list<std::string> lru_;
  mutable std::map<std::string,
                   std::pair<std::shared_ptr<const ContextMask>, std::list<std::string>::iterator>>
      masks_;
};

// Sets logits[t] to -inf wherever bit t of mask (CompiledGrammar::mask's layout) is clear,
// tokens past the mask's end included, a 64-bit word at a time; returns whether any token the
// mask allows still has a finite logit.
bool apply_token_mask(std::span<float> logits, const std::vector<uint64_t>& mask);

}  // namespace tf
