#include "sampling/grammar.h"

#include <time.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace tf {
namespace {

constexpr size_t kMaxText = 1 << 20;
constexpr size_t kMaxRules = 1 << 16;
constexpr size_t kMaxElements = 1 << 20;
constexpr uint32_t kMaxRepeat = 1000;
constexpr size_t kMaxStacks = 1 << 16;
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// The innermost GrammarDeadline in scope on this thread, and the work done since the clock was
// last read (stacks moved, trie nodes visited).
thread_local GrammarDeadline* t_deadline = nullptr;
thread_local size_t t_work = 0;
constexpr size_t kWorkPerClockRead = 4096;

// Counts work toward the next clock read: cheap enough for the innermost loops.
inline void charge(size_t units) {
  if (t_deadline == nullptr) return;
  t_work += units;
  if (t_work < kWorkPerClockRead) return;
  t_work = 0;
  GrammarDeadline::check();
}

using Alt = std::vector<GrammarElement>;

GrammarElement chars(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated = false) {
  GrammarElement e;
  e.kind = GrammarElement::kChars;
  e.ranges = std::move(ranges);
  e.negated = negated;
  return e;
}

GrammarElement ref(uint32_t rule) {
  GrammarElement e;
  e.kind = GrammarElement::kRule;
  e.rule = rule;
  return e;
}

GrammarElement token(uint32_t id) {
  GrammarElement e;
  e.kind = GrammarElement::kToken;
  e.rule = id;
  return e;
}

class Parser {
 public:
  Parser(std::string_view text, const GrammarVocab* vocab) : s_(text), vocab_(vocab) {}

  Grammar parse() {
    if (s_.size() > kMaxText) fail(ErrorKind::kInvalidArgument, "grammar: longer than 1 MiB");
    skip_space(true);
    while (i_ < s_.size()) {
      parse_rule();
      skip_space(true);
    }
    for (const auto& [name, index] : by_name_) {
      if (!defined_.count(index))
        fail(ErrorKind::kInvalidArgument, "grammar: rule '{}' is used (line {}) but not defined",
             name, line_at(first_use_[index]));
    }
    auto root = by_name_.find("root");
    if (root == by_name_.end() || !defined_.count(root->second))
      fail(ErrorKind::kInvalidArgument, "grammar: no 'root' rule");
    g_.root = root->second;
    check_left_recursion();
    return std::move(g_);
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < i_ && k < s_.size(); ++k) {
      if (s_[k] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    fail(ErrorKind::kInvalidArgument, "grammar:{}:{}: {}", line, col, what);
  }

  bool at_end() const { return i_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[i_]; }

  // Spaces, tabs and comments; newlines too when newlines is set.
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = s_[i_];
      if (c == '#') {
        while (!at_end() && s_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++i_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }

  std::string parse_name() {
    const size_t start = i_;
    while (!at_end() && name_char(s_[i_])) ++i_;
    if (i_ == start) error("expected a rule name");
    return std::string(s_.substr(start, i_ - start));
  }

  uint32_t rule_index(const std::string& name) {
    auto it = by_name_.find(name);
    if (it != by_name_.end()) return it->second;
    const uint32_t index = new_rule(name);
    by_name_[name] = index;
    return index;
  }

  uint32_t new_rule(const std::string& name) {
    if (g_.rules.size() >= kMaxRules) error("more than 65536 rules");
    g_.rules.emplace_back();
    g_.names.push_back(name);
    first_use_.push_back(i_);
    return static_cast<uint32_t>(g_.rules.size() - 1);
  }

  size_t line_at(size_t pos) const {
    return static_cast<size_t>(std::count(
               s_.begin(), s_.begin() + static_cast<std::ptrdiff_t>(std::min(pos, s_.size())),
               '\n')) +
           1;
  }

  void parse_rule() {
    const std::string name = parse_name();
    skip_space(false);
    if (s_.substr(i_, 3) != "::=") error("expected '::=' after '" + name + "'");
    i_ += 3;
    skip_space(true);
    const uint32_t index = rule_index(name);
    if (defined_.count(index)) error("rule '" + name + "' is defined twice");
    defined_.insert(index);
    g_.rules[index] = parse_alternatives(name, false);
    skip_space(false);
    if (!at_end() && peek() != '\n') error("expected the end of the line");
  }

  std::vector<Alt> parse_alternatives(const std::string& name, bool nested) {
    std::vector<Alt> alts;
    alts.push_back(parse_sequence(name, nested));
    while (peek() == '|') {
      ++i_;
      skip_space(true);
      alts.push_back(parse_sequence(name, nested));
    }
    return alts;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (at_end()) error("a truncated escape");
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<uint32_t>(c - 'A' + 10);
      } else {
        --i_;
        error("a bad hex digit in an escape");
      }
    }
    return v;
  }

  // One code point of a literal or class (an escape or UTF-8).
  uint32_t parse_char() {
    if (at_end()) error("unexpected end of the grammar");
    const auto c = static_cast<unsigned char>(s_[i_]);
    if (c == '\\') {
      ++i_;
      if (at_end()) error("a truncated escape");
      const char e = s_[i_++];
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
          return static_cast<unsigned char>(e);
        case 'x':
          return hex(2);
        case 'u':
          return hex(4);
        case 'U': {
          const uint32_t v = hex(8);
          if (v > kMaxCodePoint) error("an escape beyond U+10FFFF");
          return v;
        }
        default:
          --i_;
          error(std::string("an unknown escape '\\") + e + "'");
      }
    }
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i_ + static_cast<size_t>(len) > s_.size()) error("invalid UTF-8");
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s_[i_ + static_cast<size_t>(k)]);
      if ((b & 0xC0) != 0x80) error("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    i_ += static_cast<size_t>(len);
    return cp;
  }

  void count(size_t n) {
    elements_ += n;
    if (elements_ > kMaxElements) error("the grammar grows beyond 1M elements");
  }

  Alt parse_sequence(const std::string& name, bool nested) {
    Alt seq;
    size_t last_start = 0;  // where the last term's elements begin
    bool have_last = false;
    for (;;) {
      skip_space(nested);
      if (at_end()) break;
      const char c = peek();
      if (c == '"') {
        ++i_;
        last_start = seq.size();
        while (peek() != '"') {
          if (at_end() || peek() == '\n') error("an unterminated literal");
          const uint32_t cp = parse_char();
          seq.push_back(chars({{cp, cp}}));
        }
        ++i_;
        count(seq.size() - last_start);
        have_last = seq.size() > last_start;
      } else if (c == '[') {
        ++i_;
        bool negated = false;
        if (peek() == '^') {
          negated = true;
          ++i_;
        }
        std::vector<std::pair<uint32_t, uint32_t>> ranges;
        while (peek() != ']') {
          if (at_end() || peek() == '\n') error("an unterminated character class");
          const uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (peek() == '-' && i_ + 1 < s_.size() && s_[i_ + 1] != ']' && s_[i_ + 1] != '\n') {
            ++i_;
            hi = parse_char();
            if (hi < lo) error("a character range that runs backwards");
          }
          ranges.emplace_back(lo, hi);
        }
        ++i_;
        last_start = seq.size();
        seq.push_back(chars(std::move(ranges), negated));
        count(1);
        have_last = true;
      } else if (c == '.') {
        ++i_;
        last_start = seq.size();
        seq.push_back(chars({}, true));  // any code point
        count(1);
        have_last = true;
      } else if (c == '<') {
        last_start = seq.size();
        seq.push_back(token(parse_token()));
        count(1);
        have_last = true;
      } else if (c == '!' && i_ + 1 < s_.size() && s_[i_ + 1] == '<') {
        error("negated tokens ('!<...>') are not supported");
      } else if (name_char(c)) {
        const std::string ref_name = parse_name();
        last_start = seq.size();
        seq.push_back(ref(rule_index(ref_name)));
        count(1);
        have_last = true;
      } else if (c == '(') {
        ++i_;
        skip_space(true);
        const uint32_t sub = new_rule(name + "_" + std::to_string(g_.rules.size()));
        auto alts = parse_alternatives(name, true);
        g_.rules[sub] = std::move(alts);
        skip_space(true);
        if (peek() != ')') error("expected ')'");
        ++i_;
        last_start = seq.size();
        seq.push_back(ref(sub));
        count(1);
        have_last = true;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) error(std::string("'") + c + "' follows nothing");
        uint32_t lo = 0, hi = 0;
        bool unbounded = false;
        ++i_;
        if (c == '*') {
          unbounded = true;
        } else if (c == '+') {
          lo = 1;
          unbounded = true;
        } else if (c == '?') {
          hi = 1;
        } else {
          skip_space(false);
          lo = parse_count();
          skip_space(false);
          if (peek() == ',') {
            ++i_;
            skip_space(false);
            if (peek() == '}') {
              unbounded = true;
            } else {
              hi = parse_count();
              if (hi < lo) error("a repetition {m,n} with n < m");
            }
          } else {
            hi = lo;
          }
          skip_space(false);
          if (peek() != '}') error("expected '}'");
          ++i_;
        }
        Alt term(seq.begin() + static_cast<std::ptrdiff_t>(last_start), seq.end());
        seq.resize(last_start);
        repeat(seq, term, lo, hi, unbounded, name);
        have_last = false;  // a repetition of a repetition needs parentheses
      } else {
        break;  // '|', ')', end of line: the caller's
      }
    }
    return seq;
  }

  // A token reference at '<': `<[ID]>` or `<TEXT>` (a special token's whole text).
  uint32_t parse_token() {
    const size_t start = i_;
    if (s_.compare(i_, 2, "<[") == 0) {
      i_ += 2;
      uint64_t id = 0;
      const size_t digits = i_;
      while (!at_end() && peek() >= '0' && peek() <= '9') {
        id = id * 10 + static_cast<uint64_t>(peek() - '0');
        ++i_;
        if (id > 0xFFFFFFFFu) error("a token id beyond 2^32");
      }
      if (i_ == digits || s_.compare(i_, 2, "]>") != 0) error("expected '<[ID]>' (a token id)");
      i_ += 2;
      if (vocab_ != nullptr && id >= vocab_->bytes.size()) {
        i_ = start;
        error(fmt::format("token id {} is outside the vocabulary (0..{})", id,
                          vocab_->bytes.size() - 1));
      }
      return static_cast<uint32_t>(id);
    }
    const size_t close = s_.find('>', i_ + 1);
    const size_t eol = s_.find('\n', i_);
    if (close == std::string_view::npos || close > eol || close == i_ + 1)
      error("an unterminated token reference (expected '<TEXT>' or '<[ID]>')");
    const std::string_view text = s_.substr(i_, close + 1 - i_);
    if (vocab_ == nullptr) error("a token reference by text needs the model's vocabulary");
    const auto it = vocab_->special.find(text);
    if (it == vocab_->special.end())
      error(fmt::format("'{}' is not a special token of this model's vocabulary", text));
    i_ = close + 1;
    return it->second;
  }

  uint32_t parse_count() {
    const size_t start = i_;
    uint32_t v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<uint32_t>(peek() - '0');
      ++i_;
      if (v > kMaxRepeat) error("a repetition count above 1000");
    }
    if (i_ == start) error("expected a number");
    return v;
  }

  // term{lo,hi} (or {lo,} when unbounded) appended to seq, through generated rules.
  void repeat(Alt& seq, const Alt& term, uint32_t lo, uint32_t hi, bool unbounded,
              const std::string& name) {
    count(term.size() * (lo + (unbounded ? 1 : hi - lo) + 1));
    for (uint32_t k = 0; k < lo; ++k) seq.insert(seq.end(), term.begin(), term.end());
    if (unbounded) {
      // r ::= term r | (empty)
      const uint32_t r = new_rule(name + "_" + std::to_string(g_.rules.size()));
      Alt more = term;
      more.push_back(ref(r));
      g_.rules[r] = {more, {}};
      seq.push_back(ref(r));
      return;
    }
    // At most hi - lo more: o1 ::= term o2 | (empty), ..., on ::= term | (empty).
    uint32_t next = 0;
    bool have_next = false;
    for (uint32_t k = lo; k < hi; ++k) {
      const uint32_t r = new_rule(name + "_" + std::to_string(g_.rules.size()));
      Alt more = term;
      if (have_next) more.push_back(ref(next));
      g_.rules[r] = {more, {}};
      next = r;
      have_next = true;
    }
    if (have_next) seq.push_back(ref(next));
  }

  // A rule that can reach itself without consuming anything first loops a recognizer forever.
  void check_left_recursion() {
    const size_t n = g_.rules.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Alt& alt : g_.rules[r]) {
          const bool all = std::all_of(alt.begin(), alt.end(), [&](const GrammarElement& e) {
            return e.kind == GrammarElement::kRule && nullable[e.rule];
          });
          if (all) {
            nullable[r] = true;
            changed = true;
            break;
          }
        }
      }
    }
    // first[r]: the rules r can start with.
    std::vector<std::vector<uint32_t>> first(n);
    for (size_t r = 0; r < n; ++r) {
      for (const Alt& alt : g_.rules[r]) {
        for (const GrammarElement& e : alt) {
          if (e.kind != GrammarElement::kRule) break;
          first[r].push_back(e.rule);
          if (!nullable[e.rule]) break;
        }
      }
    }
    std::vector<int> state(n, 0);  // 0 new, 1 on the path, 2 done
    std::function<void(uint32_t)> visit = [&](uint32_t r) {
      state[r] = 1;
      for (uint32_t f : first[r]) {
        if (state[f] == 1)
          fail(ErrorKind::kInvalidArgument, "grammar: rule '{}' is left-recursive", g_.names[f]);
        if (state[f] == 0) visit(f);
      }
      state[r] = 2;
    };
    for (uint32_t r = 0; r < n; ++r)
      if (state[r] == 0) visit(r);
  }

  std::string_view s_;
  const GrammarVocab* vocab_;
  size_t i_ = 0;
  size_t elements_ = 0;
  Grammar g_;
  std::map<std::string, uint32_t> by_name_;
  std::set<uint32_t> defined_;
  std::vector<size_t> first_use_;  // per rule: where it was first named
};

bool matches(const GrammarElement& e, uint32_t cp) {
  if (e.kind != GrammarElement::kChars) return false;  // a token element takes no text
  bool in = false;
  for (const auto& [lo, hi] : e.ranges)
    if (cp >= lo && cp <= hi) in = true;
  return in != e.negated;
}

// Whether any code point in [lo, hi] matches.
bool matches_any(const GrammarElement& e, uint32_t lo, uint32_t hi) {
  if (e.kind != GrammarElement::kChars) return false;
  if (!e.negated) {
    for (const auto& [a, b] : e.ranges)
      if (a <= hi && b >= lo) return true;
    return false;
  }
  // Negated: some point of [lo, hi] lies outside every range.
  std::vector<std::pair<uint32_t, uint32_t>> r = e.ranges;
  std::sort(r.begin(), r.end());
  uint64_t next = lo;  // the first point not yet covered
  for (const auto& [a, b] : r) {
    if (a > next) break;
    if (b >= next) next = static_cast<uint64_t>(b) + 1;
  }
  return next <= hi;
}

}  // namespace

const char* const kJsonGbnf = R"(root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \t\n]*
)";

ThreadCpuClock::time_point ThreadCpuClock::now() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return time_point(duration(int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec));
}

GrammarDeadline::GrammarDeadline(ThreadCpuClock::time_point deadline, std::string what, bool yield)
    : deadline_(deadline), what_(std::move(what)), yield_(yield), outer_(t_deadline) {
  t_deadline = this;
}

GrammarDeadline::~GrammarDeadline() {
  t_deadline = outer_;
}

void GrammarDeadline::check() {
  const GrammarDeadline* d = t_deadline;
  if (d == nullptr || ThreadCpuClock::now() < d->deadline_) return;
  if (d->yield_) throw GrammarYield{};
  fail(ErrorKind::kResourceExhausted,
       "grammar: the constraint is too expensive: computing the tokens it allows used up {}",
       d->what_);
}

std::string gbnf_prefix_rules(std::string_view g, std::string_view prefix) {
  auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  };
  std::string out;
  out.reserve(g.size() * 5 / 4);
  for (size_t i = 0; i < g.size();) {
    const char c = g[i];
    // What holds no rule names, copied as it is: literals, classes (escapes inside), token
    // references, repetition counts, comments.
    const char close = c == '"' ? '"' : c == '[' ? ']' : c == '<' ? '>' : c == '{' ? '}' : '\0';
    if (close != '\0' || c == '#') {
      const size_t start = i++;
      while (i < g.size() && (c == '#' ? g[i] != '\n' : g[i] != close)) {
        if (g[i] == '\\' && c != '#' && c != '<') ++i;
        ++i;
      }
      if (c != '#' && i < g.size()) ++i;
      out.append(g.substr(start, std::min(i, g.size()) - start));
      continue;
    }
    if (name_char(c)) {
      const size_t start = i;
      while (i < g.size() && name_char(g[i])) ++i;
      out += prefix;
      out.append(g.substr(start, i - start));
      continue;
    }
    out += c;
    ++i;
  }
  return out;
}

Grammar parse_gbnf(std::string_view text, const GrammarVocab* vocab) {
  return Parser(text, vocab).parse();
}

GrammarMatcher::GrammarMatcher(const Grammar& grammar) : grammar_(&grammar) {
  std::vector<Stack> start;
  for (uint32_t a = 0; a < grammar.rules.at(grammar.root).size(); ++a)
    expand({{grammar.root, a, 0}}, start, 0);
  stacks_ = dedupe(std::move(start));
}

void GrammarMatcher::expand(Stack stack, std::vector<Stack>& out, int depth) const {
  if (depth > 4096) fail(ErrorKind::kInvalidArgument, "grammar: rules nest too deeply");
  for (;;) {
    if (stack.empty()) {
      out.push_back(std::move(stack));  // the whole sentence is complete
      return;
    }
    const Pos top = stack.back();
    const auto& alt = grammar_->rules[top.rule][top.alt];
    if (top.elem == alt.size()) {  // this rule is done: continue its parent
      stack.pop_back();
      if (!stack.empty()) ++stack.back().elem;
      continue;
    }
    const GrammarElement& e = alt[top.elem];
    if (e.kind != GrammarElement::kRule) {  // a character or a token: what comes next
      out.push_back(std::move(stack));
      return;
    }
    // A rule named last in its alternative returns to where its parent returns (a tail call):
    // repetitions (r ::= x r | ...) then keep stacks of bounded depth.
    if (top.elem + 1 == alt.size()) stack.pop_back();  // its end is the parent's end
    const auto& alts = grammar_->rules[e.rule];
    for (uint32_t a = 0; a < alts.size(); ++a) {
      Stack next = stack;
      next.push_back({e.rule, a, 0});
      expand(std::move(next), out, depth + 1);
    }
    return;
  }
}

std::vector<GrammarMatcher::Stack> GrammarMatcher::dedupe(std::vector<Stack> stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.size() > kMaxStacks)
    fail(ErrorKind::kInvalidArgument, "grammar: more than 65536 ways to continue (too ambiguous)");
  return stacks;
}

bool GrammarMatcher::step_code_point(const std::vector<Stack>& from, uint32_t cp,
                                     std::vector<Stack>& to) const {
  charge(from.size());
  std::vector<Stack> next;
  for (const Stack& s : from) {
    if (s.empty()) continue;
    const Pos top = s.back();
    if (!matches(grammar_->rules[top.rule][top.alt][top.elem], cp)) continue;
    Stack moved = s;
    ++moved.back().elem;
    expand(std::move(moved), next, 0);
  }
  if (next.empty()) return false;
  to = dedupe(std::move(next));
  return true;
}

bool GrammarMatcher::accept(std::string_view bytes) {
  GrammarMatcher next(grammar_);
  if (!advance(bytes, next)) return false;
  *this = std::move(next);
  return true;
}

bool GrammarMatcher::accept_token(uint32_t id, std::string_view bytes) {
  if (pending_left_ > 0) return !bytes.empty() && accept(bytes);  // half a character: bytes only
  std::vector<Stack> next;
  for (const Stack& s : stacks_) {
    if (s.empty()) continue;
    const Pos top = s.back();
    const GrammarElement& e = grammar_->rules[top.rule][top.alt][top.elem];
    if (e.kind != GrammarElement::kToken || e.rule != id) continue;
    Stack moved = s;
    ++moved.back().elem;
    expand(std::move(moved), next, 0);
  }
  GrammarMatcher by_bytes(grammar_);
  const bool as_text = !bytes.empty() && advance(bytes, by_bytes);
  if (next.empty() && !as_text) return false;
  if (as_text) {
    if (next.empty()) {
      *this = std::move(by_bytes);
      return true;
    }
    if (by_bytes.pending_left_ > 0) return false;  // ways that disagree on a half character
    next.insert(next.end(), by_bytes.stacks_.begin(), by_bytes.stacks_.end());
  }
  stacks_ = dedupe(std::move(next));
  return true;
}

std::vector<uint32_t> GrammarMatcher::expected_tokens() const {
  std::vector<uint32_t> ids;
  if (pending_left_ > 0) return ids;
  for (const Stack& s : stacks_) {
    if (s.empty()) continue;
    const GrammarElement& e = grammar_->rules[s.back().rule][s.back().alt][s.back().elem];
    if (e.kind == GrammarElement::kToken) ids.push_back(e.rule);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

bool GrammarMatcher::advance(std::string_view bytes, GrammarMatcher& out) const {
  // out's stacks are this matcher's until the first whole character moves them (a large set of
  // stacks is not copied only to be filtered).
  out.grammar_ = grammar_;
  out.pending_cp_ = pending_cp_;
  out.pending_left_ = pending_left_;
  out.pending_min_ = pending_min_;
  bool moved = false;
  auto stacks = [&]() -> const std::vector<Stack>& { return moved ? out.stacks_ : stacks_; };
  auto take = [&](uint32_t cp) {
    std::vector<Stack> next;
    if (!step_code_point(stacks(), cp, next)) return false;
    out.stacks_ = std::move(next);
    moved = true;
    return true;
  };
  for (const char ch : bytes) {
    const auto b = static_cast<unsigned char>(ch);
    if (out.pending_left_ > 0) {
      if ((b & 0xC0) != 0x80) return false;
      out.pending_cp_ = (out.pending_cp_ << 6) | (b & 0x3F);
      if (--out.pending_left_ > 0) continue;
      // Overlong forms and surrogates are not UTF-8: a lead byte 0xF0 must not spell '{'.
      const uint32_t cp = out.pending_cp_;
      if (cp < out.pending_min_ || (cp >= 0xD800 && cp <= 0xDFFF) || cp > kMaxCodePoint)
        return false;
      if (!take(cp)) return false;
      continue;
    }
    if (b < 0x80) {
      if (!take(b)) return false;
      continue;
    }
    const int more = (b >> 5) == 0x6 ? 1 : (b >> 4) == 0xE ? 2 : (b >> 3) == 0x1E ? 3 : 0;
    if (more == 0) return false;  // a continuation byte or an invalid lead byte
    out.pending_cp_ = b & (0x3F >> more);
    out.pending_left_ = more;
    out.pending_min_ = more == 1 ? 0x80 : more == 2 ? 0x800 : 0x10000;
  }
  if (out.pending_left_ > 0) {
    // A character not yet whole: some stack must take one of the code points it can become.
    const int bits = 6 * out.pending_left_;
    const uint32_t first = out.pending_cp_ << bits;
    const uint32_t lo = std::max(first, out.pending_min_);
    const uint32_t hi = std::min<uint32_t>(first | ((1u << bits) - 1), kMaxCodePoint);
    const auto& st = stacks();
    const bool possible =
        lo <= hi && std::any_of(st.begin(), st.end(), [&](const Stack& s) {
          if (s.empty()) return false;
          const Pos top = s.back();
          return matches_any(grammar_->rules[top.rule][top.alt][top.elem], lo, hi);
        });
    if (!possible) return false;
  }
  if (!moved) out.stacks_ = stacks_;
  return true;
}

void check_ambiguity(const Grammar& grammar, std::chrono::milliseconds budget) {
  constexpr size_t kProbeChars = 16, kMaxProbeWays = 4096, kMaxCandidates = 32;
  const auto deadline = ThreadCpuClock::now() + budget;
  GrammarMatcher m(grammar);
  std::string text;  // what the probe followed, for the error
  auto refuse = [&](size_t ways) {
    std::string shown;
    for (const char c : text) {
      if (static_cast<unsigned char>(c) < 0x20 || c == '\'' || c == '\\')
        shown += fmt::format("\\x{:02X}", static_cast<unsigned char>(c));
      else
        shown += c;
    }
    fail(ErrorKind::kInvalidArgument,
         "grammar: too ambiguous: {} ways to continue after '{}' (at most {} are allowed when "
         "it is compiled): a repetition of something that can be empty, or nested repetitions "
         "over the same characters, make the ways double with every character",
         ways > kMaxStacks ? std::string("more than 65536") : std::to_string(ways), shown,
         kMaxProbeWays);
  };
  for (size_t step = 0; step < kProbeChars; ++step) {
    if (ThreadCpuClock::now() >= deadline) return;
    // The characters the stacks expect next: the first of each range (printable where the
    // element is a negated class).
    std::vector<uint32_t> candidates;
    for (const auto& st : m.stacks_) {
      if (st.empty() || candidates.size() >= kMaxCandidates) continue;
      const GrammarElement& e = grammar.rules[st.back().rule][st.back().alt][st.back().elem];
      if (e.negated) {
        for (uint32_t cp : {uint32_t{'a'}, uint32_t{'0'}, uint32_t{' '}, uint32_t{'"'}})
          if (matches(e, cp)) {
            candidates.push_back(cp);
            break;
          }
      } else {
        for (size_t r = 0; r < e.ranges.size() && r < 4; ++r)
          candidates.push_back(e.ranges[r].first);
      }
    }
    std::sort(candidates.begin(), candidates.end());
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
    std::vector<GrammarMatcher::Stack> best;
    uint32_t best_cp = 0;
    for (uint32_t cp : candidates) {
      std::vector<GrammarMatcher::Stack> next;
      try {
        if (!m.step_code_point(m.stacks_, cp, next)) continue;
      } catch (const Error&) {  // past the matcher's own limit
        unicode::append_utf8(text, cp);
        refuse(kMaxStacks + 1);
      }
      if (next.size() > best.size()) {
        best = std::move(next);
        best_cp = cp;
      }
    }
    if (best.empty()) return;  // nothing can follow: the sentence is over
    unicode::append_utf8(text, best_cp);
    if (best.size() > kMaxProbeWays) refuse(best.size());
    m.stacks_ = std::move(best);
  }
}

bool GrammarMatcher::can_end() const {
  return pending_left_ == 0 &&
         std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

bool GrammarMatcher::must_end() const {
  return pending_left_ == 0 &&
         std::all_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

std::vector<bool> GrammarMatcher::allowed(const std::vector<std::string>& tokens) const {
  std::vector<bool> out(tokens.size(), false);
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t].empty()) continue;
    GrammarMatcher next(grammar_);
    out[t] = advance(tokens[t], next);
  }
  return out;
}

TokenTrie::TokenTrie(const std::vector<std::string>& tokens) : count_(tokens.size()) {
  nodes_.emplace_back();
  for (uint32_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t].empty()) continue;  // no bytes: never allowed by the grammar itself
    uint32_t node = 0;
    for (const char ch : tokens[t]) {
      const auto b = static_cast<uint8_t>(ch);
      auto& kids = nodes_[node].children;
      auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, uint32_t{0}),
                                 [](const auto& x, const auto& y) { return x.first < y.first; });
      if (it != kids.end() && it->first == b) {
        node = it->second;
      } else {
        const auto next = static_cast<uint32_t>(nodes_.size());
        kids.insert(it, {b, next});
        nodes_.emplace_back();
        node = next;
      }
    }
    nodes_[node].ends.push_back(t);
  }
}

// Depth first through the trie, one matcher per node on the path: a byte the grammar refuses
// prunes every token below it. visit(node, matcher after the node's bytes) is called for each
// node reached and returns whether to go below it.
template <class Visit>
void GrammarMatcher::walk(const TokenTrie& trie, GrammarMatcher start, Visit visit) {
  struct Frame {
    uint32_t node;
    GrammarMatcher matcher;
  };
  std::vector<Frame> todo;
  todo.push_back({0, std::move(start)});
  while (!todo.empty()) {
    Frame f = std::move(todo.back());
    todo.pop_back();
    charge(trie.nodes_[f.node].children.size());
    for (const auto& [byte, child] : trie.nodes_[f.node].children) {
      GrammarMatcher m(f.matcher.grammar_);
      const char c = static_cast<char>(byte);
      if (!f.matcher.advance(std::string_view(&c, 1), m)) continue;
      if (visit(child, m) && !trie.nodes_[child].children.empty())
        todo.push_back({child, std::move(m)});
    }
  }
}

std::vector<bool> GrammarMatcher::allowed(const TokenTrie& trie) const {
  std::vector<bool> out(trie.count_, false);
  walk(trie, *this, [&](uint32_t node, const GrammarMatcher&) {
    for (uint32_t t : trie.nodes_[node].ends) out[t] = true;
    return true;
  });
  for (uint32_t t : expected_tokens())
    if (t < out.size()) out[t] = true;
  return out;
}

}  // namespace tf

namespace tf {

std::shared_ptr<const GrammarVocab> GrammarVocab::of(const Tokenizer& tokenizer) {
  std::map<std::string, uint32_t, std::less<>> special;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id)
    if (tokenizer.is_special(id)) {
      std::string text = tokenizer.id_to_piece(id);
      if (!text.empty()) special.emplace(std::move(text), static_cast<uint32_t>(id));
    }
  return std::make_shared<const GrammarVocab>(tokenizer.vocabulary_bytes(), std::move(special));
}

std::shared_ptr<const CompiledGrammar> GrammarVocab::compile(const std::string& gbnf) const {
  {
    std::lock_guard lock(mu_);
    for (auto it = compiled_.begin(); it != compiled_.end(); ++it) {
      if (it->first == gbnf) {
        compiled_.splice(compiled_.begin(), compiled_, it);
        return it->second;
      }
    }
  }
  Grammar parsed = parse_gbnf(gbnf, this);
  check_ambiguity(parsed);
  auto g = std::make_shared<const CompiledGrammar>(std::move(parsed), *this);
  std::lock_guard lock(mu_);
  compiled_.emplace_front(gbnf, g);
  if (compiled_.size() > 32) compiled_.pop_back();
  return g;
}

CompiledGrammar::CompiledGrammar(Grammar grammar, const GrammarVocab& vocab)
    : grammar_(std::move(grammar)), vocab_(&vocab) {}

size_t CompiledGrammar::contexts() const {
  std::lock_guard lock(mu_);
  return masks_.size();
}

// The tokens a context takes. frames: a stack's top frames, the top a character element;
// whole: they are the entire stack (so that finishing them ends the sentence). A trie walk from
// those frames alone: a token is accepted if some path takes all its bytes without leaving the
// frames; where a path finishes the frames with bytes left (the frames below would decide) the
// longer tokens there are uncertain, unless accepted anyway; the rest are refused in any
// context, since no path could reach the frames below.
CompiledGrammar::ContextMask CompiledGrammar::compute(const GrammarMatcher::Stack& frames,
                                                      bool whole) const {
  const TokenTrie& trie = vocab_->trie;
  ContextMask out;
  out.accepted.assign((trie.tokens() + 63) / 64, 0);
  GrammarMatcher start(grammar_);
  start.stacks_ = {frames};
  start.pending_left_ = 0;
  std::vector<uint32_t> uncertain_roots;
  GrammarMatcher::walk(trie, std::move(start), [&](uint32_t node, const GrammarMatcher& m) {
    for (uint32_t t : trie.nodes_[node].ends) out.accepted[t / 64] |= uint64_t{1} << (t % 64);
    if (trie.nodes_[node].children.empty()) return false;
    const bool finished = std::any_of(m.stacks_.begin(), m.stacks_.end(),
                                      [](const GrammarMatcher::Stack& s) { return s.empty(); });
    if (finished && !whole) uncertain_roots.push_back(node);
    return true;
  });
  // Every token below an uncertain root (not at it: those bytes were taken), not accepted.
  std::vector<uint32_t> nodes;
  std::vector<bool> seen(trie.nodes_.size(), false);
  for (uint32_t root : uncertain_roots) {
    for (const auto& [b, kid] : trie.nodes_[root].children) nodes.push_back(kid);
    while (!nodes.empty()) {
      const uint32_t n = nodes.back();
      nodes.pop_back();
      if (seen[n]) continue;
      seen[n] = true;
      for (uint32_t t : trie.nodes_[n].ends)
        if (!(out.accepted[t / 64] >> (t % 64) & 1)) out.uncertain.push_back(t);
      for (const auto& [b, kid] : trie.nodes_[n].children) nodes.push_back(kid);
    }
  }
  std::sort(out.uncertain.begin(), out.uncertain.end());
  return out;
}

std::string CompiledGrammar::context_key(const GrammarMatcher::Stack& stack) {
  const size_t n = std::min(stack.size(), kContextFrames);
  std::string key(n == stack.size() ? "w" : "p");
  for (auto p = stack.end() - static_cast<std::ptrdiff_t>(n); p != stack.end(); ++p)
    key.append(reinterpret_cast<const char*>(&*p), sizeof(*p));
  return key;
}

std::shared_ptr<const CompiledGrammar::ContextMask> CompiledGrammar::cached(
    const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = masks_.find(key);
  if (it == masks_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.second);
  return it->second.first;
}

std::shared_ptr<const CompiledGrammar::ContextMask> CompiledGrammar::context_mask(
    const GrammarMatcher::Stack& stack) const {
  std::string key = context_key(stack);
  if (auto hit = cached(key)) return hit;
  const size_t n = std::min(stack.size(), kContextFrames);
  GrammarMatcher::Stack frames(stack.end() - static_cast<std::ptrdiff_t>(n), stack.end());
  // Computed outside the lock (two sequences may both compute one; the first kept wins).
  auto mask = std::make_shared<const ContextMask>(compute(frames, n == stack.size()));
  std::lock_guard lock(mu_);
  auto it = masks_.find(key);
  if (it != masks_.end()) return it->second.first;
  if (masks_.size() >= kMaxContexts) {  // the least recently used makes room
    masks_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(key);
  masks_.emplace(std::move(key), std::make_pair(mask, lru_.begin()));
  return mask;
}

std::vector<uint64_t> CompiledGrammar::mask(const GrammarMatcher& matcher) const {
  const size_t n = vocab_->trie.tokens();
  std::vector<uint64_t> bits((n + 63) / 64, 0);
  // The tokens that token elements expect, whatever their bytes.
  for (uint32_t t : matcher.expected_tokens())
    if (t < n) bits[t / 64] |= uint64_t{1} << (t % 64);
  auto walk_all = [&] {
    // One walk with every stack (and a pending character's bytes) at once.
    GrammarMatcher::walk(vocab_->trie, matcher, [&](uint32_t node, const GrammarMatcher&) {
      for (uint32_t t : vocab_->trie.nodes_[node].ends) bits[t / 64] |= uint64_t{1} << (t % 64);
      return true;
    });
    return bits;
  };
  // Part of a character pending: the cache's contexts start at character boundaries.
  if (matcher.pending_left_ > 0) return walk_all();
  std::vector<std::shared_ptr<const ContextMask>> masks(matcher.stacks_.size());
  size_t missing = 0;
  for (size_t i = 0; i < masks.size(); ++i) {
    if (matcher.stacks_[i].empty()) continue;
    masks[i] = cached(context_key(matcher.stacks_[i]));
    if (!masks[i] && ++missing > kMaxContextWalks) return walk_all();
  }
  std::vector<uint32_t> uncertain;
  for (size_t i = 0; i < masks.size(); ++i) {
    if (matcher.stacks_[i].empty()) continue;
    if (!masks[i]) masks[i] = context_mask(matcher.stacks_[i]);
    const ContextMask& m = *masks[i];
    for (size_t w = 0; w < bits.size(); ++w) bits[w] |= m.accepted[w];
    uncertain.insert(uncertain.end(), m.uncertain.begin(), m.uncertain.end());
  }
  if (matcher.stacks_.size() > 1) {
    std::sort(uncertain.begin(), uncertain.end());
    uncertain.erase(std::unique(uncertain.begin(), uncertain.end()), uncertain.end());
  }
  for (uint32_t t : uncertain) {
    if (bits[t / 64] >> (t % 64) & 1) continue;
    charge(1);
    GrammarMatcher next(matcher.grammar_);
    if (matcher.advance(vocab_->bytes[t], next)) bits[t / 64] |= uint64_t{1} << (t % 64);
  }
  return bits;
}

std::vector<bool> CompiledGrammar::allowed(const GrammarMatcher& matcher) const {
  const size_t n = vocab_->trie.tokens();
  const std::vector<uint64_t> bits = mask(matcher);
  std::vector<bool> out(n, false);
  for (size_t t = 0; t < n; ++t) out[t] = bits[t / 64] >> (t % 64) & 1;
  return out;
}

bool apply_token_mask(std::span<float> logits, const std::vector<uint64_t>& mask) {
  bool any = false;
  const size_t n = logits.size();
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t word = w < mask.size() ? mask[w] : 0;
    float* l = logits.data() + w * 64;
    const size_t len = std::min<size_t>(64, n - w * 64);
    if (word == 0) {
      std::fill(l, l + len, -INFINITY);
      continue;
    }
    for (size_t b = 0; b < len; ++b) {
      if (word >> b & 1)
        any = any || l[b] > -INFINITY;
      else
        l[b] = -INFINITY;
    }
  }
  return any;
}

}  // namespace tf
