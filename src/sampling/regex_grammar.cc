#include "sampling/regex_grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tf {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr size_t kMaxPattern = 1 << 16;
constexpr int kMaxDepth = 200;
constexpr uint32_t kMaxRepeat = 1000;  // GBNF's limit on a repetition count
constexpr size_t kMaxOutput = size_t{4} << 20;

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive code point ranges

Ranges normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.emplace_back(lo, hi);
  }
  return out;
}

// Every code point UTF-8 can carry (surrogates have no UTF-8 form) that r does not hold.
Ranges complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : normalize(r)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  Ranges valid;
  for (const auto& [lo, hi] : out) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      valid.emplace_back(lo, hi);
    } else {
      if (lo < 0xD800) valid.emplace_back(lo, 0xD7FF);
      if (hi > 0xDFFF) valid.emplace_back(0xE000, hi);
    }
  }
  return valid;
}

Ranges subtract(const Ranges& a, const Ranges& b) {
  Ranges out;
  const Ranges nb = complement(b);
  // a ∩ complement(b), both sorted.
  const Ranges na = normalize(a);
  size_t j = 0;
  for (const auto& [lo, hi] : na) {
    while (j < nb.size() && nb[j].second < lo) ++j;
    for (size_t k = j; k < nb.size() && nb[k].first <= hi; ++k)
      out.emplace_back(std::max(lo, nb[k].first), std::min(hi, nb[k].second));
  }
  return out;
}

bool holds(const Ranges& r, uint32_t cp) {
  for (const auto& [lo, hi] : r)
    if (cp >= lo && cp <= hi) return true;
  return false;
}

// A code point inside a GBNF class: plain when it is unambiguous there, else an escape.
std::string class_char(uint32_t cp) {
  if (cp > 0x20 && cp < 0x7F && cp != '\\' && cp != ']' && cp != '[' && cp != '-' && cp != '^' &&
      cp != '"')
    return std::string(1, static_cast<char>(cp));
  if (cp <= 0xFFFF) return fmt::format("\\u{:04X}", cp);
  return fmt::format("\\U{:08X}", cp);
}

std::string gbnf_class(const Ranges& r) {
  std::string out = "[";
  for (const auto& [lo, hi] : normalize(r)) {
    out += class_char(lo);
    if (hi != lo) {
      out += '-';
      out += class_char(hi);
    }
  }
  return out + "]";
}

// How a code point is written inside a JSON string ("" for control characters other than the
// ones JSON has short escapes for: a pattern's class never needs them).
std::string json_escaped(uint32_t cp) {
  switch (cp) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\t':
      return "\\t";
    case '\r':
      return "\\r";
    case '\f':
      return "\\f";
    case '\b':
      return "\\b";
    default:
      break;
  }
  if (cp < 0x20) return fmt::format("\\u{:04x}", cp);
  std::string s;
  unicode::append_utf8(s, cp);
  return s;
}

// The characters a JSON string cannot hold as they are.
const Ranges kJsonEscaped = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};

// The parsed pattern: leaves are finished GBNF expressions (a literal, a class, the
// alternatives for one JSON-escaped character), never empty.
struct Node {
  enum Kind { kLeaf, kSeq, kAlt, kRepeat };
  explicit Node(Kind k) : kind(k) {}
  Kind kind;
  std::string leaf;
  std::vector<Node> kids;
  uint32_t lo = 0;
  int64_t hi = -1;  // < 0: unbounded
  bool nullable = false;
};

class RegexParser {
 public:
  RegexParser(std::string_view pattern, bool json) : s_(pattern), json_(json) {}

  std::string parse() {
    if (s_.size() > kMaxPattern) error("the pattern is longer than 64 KiB");
    if (peek() == '^') ++i_;
    const Node e = alternation(0);
    if (i_ < s_.size()) error("unbalanced ')'");
    return emit(e);
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    fail("regex: {} (at offset {})", what, i_);
  }
  bool at_end() const { return i_ >= s_.size(); }
  char peek(size_t ahead = 0) const { return i_ + ahead < s_.size() ? s_[i_ + ahead] : '\0'; }

  Node alternation(int depth) {
    if (depth > kMaxDepth) error("groups nested deeper than 200");
    Node alt{Node::kAlt};
    alt.kids.push_back(sequence(depth));
    while (!at_end() && peek() == '|') {
      ++i_;
      alt.kids.push_back(sequence(depth));
    }
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    alt.nullable =
        std::any_of(alt.kids.begin(), alt.kids.end(), [](const Node& n) { return n.nullable; });
    return alt;
  }

  Node sequence(int depth) {
    Node seq{Node::kSeq};
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$') {
        ++i_;
        if (!at_end()) error("'$' is supported only at the end of the pattern");
        break;
      }
      seq.kids.push_back(quantified(atom(depth)));
    }
    if (seq.kids.size() == 1) return std::move(seq.kids[0]);
    seq.nullable =
        std::all_of(seq.kids.begin(), seq.kids.end(), [](const Node& n) { return n.nullable; });
    return seq;
  }

  // {m}, {m,}, {m,n}, {,n} at i_: true and the bounds (hi < 0: unbounded), or false (a plain
  // '{', as Python reads it) with i_ unchanged.
  bool braces(uint32_t& lo, int64_t& hi) {
    size_t j = i_ + 1;
    auto number = [&](int64_t& v) {
      const size_t start = j;
      v = 0;
      while (j < s_.size() && s_[j] >= '0' && s_[j] <= '9') {
        v = std::min<int64_t>(v * 10 + (s_[j] - '0'), 1 << 30);
        ++j;
      }
      return j > start;
    };
    int64_t a = 0, b = -1;
    const bool have_a = number(a);
    if (j < s_.size() && s_[j] == '}') {
      if (!have_a) return false;
      b = a;
    } else if (j < s_.size() && s_[j] == ',') {
      ++j;
      const bool have_b = number(b);
      if (!have_b) b = -1;
      if (!have_a && !have_b) return false;
      if (j >= s_.size() || s_[j] != '}') return false;
    } else {
      return false;
    }
    i_ = j + 1;
    if (a > kMaxRepeat || b > static_cast<int64_t>(kMaxRepeat))
      error("a repetition count above 1000");
    if (b >= 0 && b < a) error("a repetition {m,n} with n < m");
    lo = static_cast<uint32_t>(a);
    hi = b;
    return true;
  }

  Node quantified(Node atom) {
    if (at_end()) return atom;
    const char c = peek();
    Node rep{Node::kRepeat};
    if (c == '*' || c == '+' || c == '?') {
      ++i_;
      rep.lo = c == '+' ? 1 : 0;
      rep.hi = c == '?' ? 1 : -1;
    } else if (c == '{') {
      if (!braces(rep.lo, rep.hi)) return atom;
    } else {
      return atom;
    }
    if (peek() == '?') {
      ++i_;  // lazy: the same language
    } else if (peek() == '+') {
      error("possessive quantifiers are not supported");
    }
    if (peek() == '*' || peek() == '+' || peek() == '?') error("multiple repeat");
    if (peek() == '{') {
      uint32_t lo = 0;
      int64_t hi = 0;
      const size_t at = i_;
      if (braces(lo, hi)) {
        i_ = at;
        error("multiple repeat");
      }
    }
    rep.nullable = rep.lo == 0 || atom.nullable;
    rep.kids.push_back(std::move(atom));
    return rep;
  }

  Node atom(int depth) {
    const char c = peek();
    switch (c) {
      case '(':
        return group(depth);
      case '[':
        return leaf(set_expression(char_class()));
      case '.':
        ++i_;
        return leaf(set_expression(complement({{'\n', '\n'}})));
      case '\\': {
        Ranges set;
        uint32_t cp = 0;
        if (escape(false, set, cp)) return leaf(set_expression(set));
        return leaf(char_expression(cp));
      }
      case '*':
      case '+':
      case '?':
        error("nothing to repeat");
      case '{': {
        uint32_t lo = 0;
        int64_t hi = 0;
        if (braces(lo, hi)) error("nothing to repeat");
        ++i_;
        return leaf(char_expression('{'));
      }
      case '^':
        error("'^' is supported only at the start of the pattern");
      default:
        return leaf(char_expression(utf8_char()));
    }
  }

  Node group(int depth) {
    ++i_;  // (
    if (peek() == '?') {
      if (peek(1) == ':') {
        i_ += 2;
      } else if ((peek(1) == 'P' && peek(2) == '<') ||
                 (peek(1) == '<' && peek(2) != '=' && peek(2) != '!')) {
        i_ += peek(1) == 'P' ? 3 : 2;
        while (!at_end() && peek() != '>') {
          const char n = peek();
          if (!(std::isalnum(static_cast<unsigned char>(n)) || n == '_')) error("a bad group name");
          ++i_;
        }
        if (at_end()) error("an unterminated group name");
        ++i_;
      } else if (peek(1) == '=' || peek(1) == '!' || peek(1) == '<') {
        error("lookaround assertions are not supported");
      } else if (peek(1) == 'P' && peek(2) == '=') {
        error("backreferences are not supported");
      } else {
        error("inline flags and group extensions '(?' are not supported");
      }
    }
    Node inner = alternation(depth + 1);
    if (peek() != ')') error("missing ')'");
    ++i_;
    return inner;
  }

  static Node leaf(std::string expr) {
    Node n{Node::kLeaf};
    n.leaf = std::move(expr);
    return n;
  }

  // Charges `n` bytes of output against the budget: a nullable repetition's non-empty form
  // grows with the square of a sequence's length, so a pattern can ask for a huge grammar.
  void charge(size_t n) {
    out_bytes_ += n;
    if (out_bytes_ > kMaxOutput) error("the pattern expands to a grammar over 4 MiB");
  }

  static std::string quantifier(uint32_t lo, int64_t hi) {
    if (lo == 0 && hi == 1) return "?";
    if (lo == 0 && hi < 0) return "*";
    if (lo == 1 && hi < 0) return "+";
    if (hi < 0) return fmt::format("{{{},}}", lo);
    if (hi == static_cast<int64_t>(lo)) return fmt::format("{{{}}}", lo);
    return fmt::format("{{{},{}}}", lo, hi);
  }

  std::string emit(const Node& n) {
    std::string out;
    switch (n.kind) {
      case Node::kLeaf:
        out = n.leaf;
        break;
      case Node::kSeq:
        for (const Node& k : n.kids) {
          if (!out.empty()) out += ' ';
          out += emit(k);
        }
        if (out.empty()) out = "\"\"";
        break;
      case Node::kAlt:
        out = "(";
        for (size_t k = 0; k < n.kids.size(); ++k) {
          if (k) out += " | ";
          out += emit(n.kids[k]);
        }
        out += ")";
        break;
      case Node::kRepeat: {
        const Node& kid = n.kids[0];
        if (n.hi == 0) {
          out = "\"\"";
        } else if (kid.nullable && !(n.lo == 0 && n.hi == 1)) {
          // A repeated part that can match nothing would make the grammar's repetition rule
          // left-recursive; its strings are those of its non-empty form repeated 0..hi times.
          const std::optional<std::string> ne = emit_nonempty(kid);
          out = ne ? "(" + *ne + ")" + quantifier(0, n.hi) : "\"\"";
        } else {
          out = "(" + emit(kid) + ")" + quantifier(n.lo, n.hi);
        }
        break;
      }
    }
    charge(out.size());
    return out;
  }

  // An expression for the non-empty strings `n` matches, or nothing when it matches only "".
  std::optional<std::string> emit_nonempty(const Node& n) {
    if (!n.nullable) return emit(n);
    std::vector<std::string> alts;
    switch (n.kind) {
      case Node::kLeaf:
        return emit(n);
      case Node::kSeq:
        // Every part can be empty: the first non-empty part is some k, then the rest as they are.
        for (size_t k = 0; k < n.kids.size(); ++k) {
          std::optional<std::string> first = emit_nonempty(n.kids[k]);
          if (!first) continue;
          std::string alt = "(" + *first + ")";
          for (size_t r = k + 1; r < n.kids.size(); ++r) {
            alt += ' ';
            alt += emit(n.kids[r]);
          }
          charge(alt.size());
          alts.push_back(std::move(alt));
        }
        break;
      case Node::kAlt:
        for (const Node& k : n.kids)
          if (std::optional<std::string> ne = emit_nonempty(k)) alts.push_back(std::move(*ne));
        break;
      case Node::kRepeat: {
        if (n.hi == 0) return std::nullopt;
        const std::optional<std::string> ne = emit_nonempty(n.kids[0]);
        if (!ne) return std::nullopt;
        return "(" + *ne + ")" + quantifier(1, n.hi);
      }
    }
    if (alts.empty()) return std::nullopt;
    std::string out = "(";
    for (size_t k = 0; k < alts.size(); ++k) {
      if (k) out += " | ";
      out += alts[k];
    }
    out += ")";
    charge(out.size());
    return out;
  }

  uint32_t hex_digits(size_t n) {
    uint32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      const char h = peek();
      int d = h >= '0' && h <= '9'   ? h - '0'
              : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                     : -1;
      if (d < 0) error("a bad hex escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++i_;
    }
    return v;
  }

  // An escape at i_ (the backslash): a set (true) or one code point (false).
  bool escape(bool in_class, Ranges& set, uint32_t& cp) {
    ++i_;
    if (at_end()) error("a trailing backslash");
    const char e = s_[i_++];
    const Ranges digit = {{'0', '9'}};
    const Ranges word = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    const Ranges space = {{'\t', '\r'}, {' ', ' '}};
    switch (e) {
      case 'd':
        set = digit;
        return true;
      case 'D':
        set = complement(digit);
        return true;
      case 'w':
        set = word;
        return true;
      case 'W':
        set = complement(word);
        return true;
      case 's':
        set = space;
        return true;
      case 'S':
        set = complement(space);
        return true;
      case 'n':
        cp = '\n';
        return false;
      case 'r':
        cp = '\r';
        return false;
      case 't':
        cp = '\t';
        return false;
      case 'f':
        cp = '\f';
        return false;
      case 'v':
        cp = '\v';
        return false;
      case '0':
        cp = 0;
        return false;
      case 'x':
        cp = hex_digits(2);
        return false;
      case 'u':
        if (peek() == '{') {
          ++i_;
          const size_t start = i_;
          while (!at_end() && peek() != '}') ++i_;
          if (at_end() || i_ == start || i_ - start > 6) error("a bad \\u{...} escape");
          i_ = start;
          cp = hex_digits(static_cast<size_t>(s_.find('}', start) - start));
          ++i_;
        } else {
          cp = hex_digits(4);
        }
        if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF))
          error("an escape that is not a Unicode scalar value");
        return false;
      case 'b':
        if (in_class) {
          cp = '\b';
          return false;
        }
        error("word boundaries (\\b) are not supported");
      case 'B':
        error("word boundaries (\\B) are not supported");
      case 'A':
      case 'Z':
      case 'z':
      case 'G':
        error(std::string("the anchor \\") + e + " is not supported");
      default:
        break;
    }
    if (e >= '1' && e <= '9') error("backreferences are not supported");
    if (std::isalnum(static_cast<unsigned char>(e))) error(std::string("an unknown escape \\") + e);
    --i_;
    cp = utf8_char();
    return false;
  }

  uint32_t utf8_char() {
    const auto c = static_cast<unsigned char>(s_[i_]);
    const size_t len = c < 0x80           ? 1
                       : (c >> 5) == 0x6  ? 2
                       : (c >> 4) == 0xE  ? 3
                       : (c >> 3) == 0x1E ? 4
                                          : 0;
    if (len == 0 || i_ + len > s_.size()) error("invalid UTF-8");
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s_[i_ + k]);
      if ((b & 0xC0) != 0x80) error("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF (F4 90.. to F7) are not characters.
    static constexpr uint32_t kLeast[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kLeast[len] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF))
      error("invalid UTF-8");
    i_ += len;
    return cp;
  }

  Ranges char_class() {
    ++i_;  // [
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++i_;
    }
    Ranges set;
    bool first = true;
    for (;;) {
      if (at_end()) error("an unterminated character class");
      if (peek() == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      Ranges sub;
      uint32_t lo = 0;
      if (peek() == '\\') {
        if (escape(true, sub, lo)) {
          set.insert(set.end(), sub.begin(), sub.end());
          continue;
        }
      } else {
        lo = utf8_char();
      }
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && i_ + 1 < s_.size()) {
        ++i_;
        if (peek() == '\\') {
          if (escape(true, sub, hi)) error("a range that ends in a class escape");
        } else {
          hi = utf8_char();
        }
        if (hi < lo) error("a character range that runs backwards");
      }
      set.emplace_back(lo, hi);
    }
    return negated ? complement(set) : normalize(set);
  }

  std::string char_expression(uint32_t cp) {
    if (!json_) {
      std::string s;
      unicode::append_utf8(s, cp);
      return gbnf_literal(s);
    }
    return gbnf_literal(json_escaped(cp));
  }

  std::string set_expression(const Ranges& set) {
    if (!json_) {
      if (normalize(set).empty()) error("a character class that matches nothing");
      return gbnf_class(set);
    }
    std::vector<std::string> alts;
    const Ranges plain = subtract(set, kJsonEscaped);
    if (!plain.empty()) alts.push_back(gbnf_class(plain));
    for (uint32_t cp : {'"', '\\', '\n', '\t', '\r', '\f', '\b'})
      if (holds(set, cp)) alts.push_back(gbnf_literal(json_escaped(cp)));
    if (alts.empty()) error("a character class that matches nothing a JSON string holds");
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
    return out + ")";
  }

  std::string_view s_;
  bool json_;
  size_t i_ = 0;
  size_t out_bytes_ = 0;
};

}  // namespace

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string regex_gbnf_expression(std::string_view pattern, bool json_string) {
  return RegexParser(pattern, json_string).parse();
}

std::string regex_to_gbnf(std::string_view pattern) {
  return "root ::= " + regex_gbnf_expression(pattern, false) + "\n";
}

std::string choice_to_gbnf(const std::vector<std::string>& choices) {
  if (choices.empty()) fail("choice: the list of choices is empty");
  std::string out = "root ::= ";
  for (size_t k = 0; k < choices.size(); ++k) out += (k ? " | " : "") + gbnf_literal(choices[k]);
  return out + "\n";
}

}  // namespace tf
