#include "chat/jinja/lexer.h"

#include <algorithm>
#include <cstdlib>

#include "chat/jinja/py_text.h"
#include "chat/jinja/value.h"

namespace tf::jinja {

namespace {

[[noreturn]] void syntax_error(int line, const std::string& what) {
  throw TemplateError(ErrorKind::kInvalidArgument, fmt::format("{} at line {}", what, line));
}

int count_newlines(std::string_view s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
bool is_name_start(unsigned char c) {
  return c == '_' || std::isalpha(c) || c >= 0x80;
}
bool is_name_char(unsigned char c) {
  return is_name_start(c) || is_digit(static_cast<char>(c));
}

// jinja2 normalizes every newline to \n and, without keep_trailing_newline, drops one trailing
// newline before lexing.
std::string normalize_newlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python's "unicode-escape" decoding of a string literal's body, which is what jinja2 applies
// (after turning non-ASCII characters into backslash escapes, which a preceding backslash then
// un-escapes into literal text).
std::string unescape(std::string_view body, int line) {
  std::string out;
  out.reserve(body.size());
  auto hex_value = [&](size_t at, int digits, const char* what) {
    if (at + digits > body.size()) syntax_error(line, fmt::format("truncated {} escape", what));
    char32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      const char c = body[at + k];
      if (!is_hex(c)) syntax_error(line, fmt::format("truncated {} escape", what));
      v = v * 16 + static_cast<char32_t>(is_digit(c) ? c - '0' : (std::tolower(c) - 'a' + 10));
    }
    return v;
  };
  for (size_t i = 0; i < body.size();) {
    if (body[i] != '\\' || i + 1 >= body.size()) {
      out += body[i++];
      continue;
    }
    const char c = body[i + 1];
    i += 2;
    switch (c) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        append_utf8(out, hex_value(i, 2, "\\xXX"));
        i += 2;
        break;
      case 'u':
        append_utf8(out, hex_value(i, 4, "\\uXXXX"));
        i += 4;
        break;
      case 'U': {
        const char32_t cp = hex_value(i, 8, "\\UXXXXXXXX");
        if (cp > 0x10FFFF) syntax_error(line, "illegal Unicode character in string literal");
        append_utf8(out, cp);
        i += 8;
        break;
      }
      case 'N':
        syntax_error(line, "unsupported \\N{...} escape in string literal");
      default:
        if (c >= '0' && c <= '7') {
          char32_t v = static_cast<char32_t>(c - '0');
          for (int k = 0; k < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++k) {
            v = v * 8 + static_cast<char32_t>(body[i++] - '0');
          }
          append_utf8(out, v);
        } else if (static_cast<unsigned char>(c) >= 0x80) {
          size_t at = i - 1;
          const char32_t cp = next_code_point(body, at);
          i = at;
          out += cp <= 0xFF     ? fmt::format("\\x{:02x}", static_cast<uint32_t>(cp))
                 : cp <= 0xFFFF ? fmt::format("\\u{:04x}", static_cast<uint32_t>(cp))
                                : fmt::format("\\U{:08x}", static_cast<uint32_t>(cp));
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_root();
    tokens_.push_back(Token{TokenKind::kEof, line_, {}});
    return std::move(tokens_);
  }

 private:
  enum class Tag { kVariable, kBlock, kComment, kRaw };

  bool starts(size_t at, std::string_view s) const { return src_.compare(at, s.size(), s) == 0; }

  size_t skip_space(size_t i) const {
    while (i < src_.size()) {
      size_t next = i;
      if (!is_space(next_code_point(src_, next))) break;
      i = next;
    }
    return i;
  }

  void emit(TokenKind kind, std::string value) {
    tokens_.push_back(Token{kind, line_, std::move(value)});
  }

  // Text before a tag, with the tag's whitespace control applied as jinja2's OptionalLStrip
  // does: "-" strips all whitespace, otherwise lstrip_blocks strips the whitespace (any, as
  // Python's \s) between the line start and a block or comment tag.
  void emit_text(std::string text, char sign, bool lstrip_allowed) {
    int newlines_stripped = 0;
    if (sign == '-') {
      std::string stripped = py_strip(text, StripSide::kRight);
      newlines_stripped = count_newlines(std::string_view(text).substr(stripped.size()));
      text = std::move(stripped);
    } else if (sign != '+' && lstrip_allowed) {
      const size_t nl = text.rfind('\n');
      const size_t line_start = nl == std::string::npos ? 0 : nl + 1;
      if ((line_start > 0 || line_starting_) &&
          py_strip(std::string_view(text).substr(line_start), StripSide::kLeft).empty()) {
        text.resize(line_start);
      }
    }
    const int newlines = count_newlines(text);
    if (!text.empty()) emit(TokenKind::kData, std::move(text));
    line_ += newlines + newlines_stripped;
  }

  // The end of `{% raw %}` (with its optional whitespace control) if one starts at `at`.
  size_t match_raw_begin(size_t at) const {
    size_t i = at + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    i = skip_space(i);
    if (!starts(i, "raw")) return 0;
    i = skip_space(i + 3);
    if (starts(i, "-%}")) return skip_space(i + 3);
    if (starts(i, "%}")) return i + 2;
    return 0;
  }

  // Consumes a matched piece of source, keeping the line count and line_starting_ current.
  void consume_to(size_t end) {
    line_ += count_newlines(std::string_view(src_).substr(pos_, end - pos_));
    if (end > pos_) line_starting_ = src_[end - 1] == '\n';
    pos_ = end;
  }

  void lex_root() {
    size_t at = pos_;
    Tag tag = Tag::kBlock;
    size_t raw_end = 0;
    for (;; ++at) {
      at = src_.find('{', at);
      if (at == std::string::npos || at + 1 >= src_.size()) {
        emit(TokenKind::kData, src_.substr(pos_));
        pos_ = src_.size();
        return;
      }
      const char c = src_[at + 1];
      if (c == '{') {
        tag = Tag::kVariable;
      } else if (c == '#') {
        tag = Tag::kComment;
      } else if (c == '%') {
        raw_end = match_raw_begin(at);
        tag = raw_end ? Tag::kRaw : Tag::kBlock;
      } else {
        continue;
      }
      break;
    }
    const char sign =
        (at + 2 < src_.size() && (src_[at + 2] == '-' || src_[at + 2] == '+')) ? src_[at + 2] : 0;
    emit_text(src_.substr(pos_, at - pos_), sign, tag != Tag::kVariable);
    pos_ = at;
    switch (tag) {
      case Tag::kVariable:
      case Tag::kBlock:
        emit(tag == Tag::kBlock ? TokenKind::kBlockBegin : TokenKind::kVariableBegin,
             src_.substr(at, 2));
        consume_to(at + 2 + (sign ? 1 : 0));
        lex_tag(tag == Tag::kBlock);
        return;
      case Tag::kComment:
        lex_comment(at + 2 + (sign ? 1 : 0));
        return;
      case Tag::kRaw:
        consume_to(raw_end);
        lex_raw();
        return;
    }
  }

  void lex_comment(size_t body) {
    const int start_line = line_;
    const size_t close = src_.find("#}", body);
    if (close == std::string::npos) syntax_error(start_line, "missing end of comment tag");
    size_t end;
    if (close > body && src_[close - 1] == '-') {
      end = skip_space(close + 2);
    } else if (close > body && src_[close - 1] == '+') {
      end = close + 2;
    } else {
      end = close + 2;
      if (end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
    }
    consume_to(end);
  }

  void lex_raw() {
    const int start_line = line_;
    for (size_t at = src_.find("{%", pos_); at != std::string::npos; at = src_.find("{%", at + 1)) {
      size_t i = at + 2;
      const char sign = (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ? src_[i] : 0;
      if (sign) ++i;
      i = skip_space(i);
      if (!starts(i, "endraw")) continue;
      i = skip_space(i + 6);
      size_t end;
      if (starts(i, "+%}")) {
        end = i + 3;
      } else if (starts(i, "-%}")) {
        end = skip_space(i + 3);
      } else if (starts(i, "%}")) {
        end = i + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      emit_text(src_.substr(pos_, at - pos_), sign, true);
      pos_ = at;
      consume_to(end);
      return;
    }
    syntax_error(start_line, "missing end of raw directive");
  }

  // Tokens inside {{ }} or {% %} up to the closing delimiter.
  void lex_tag(bool block) {
    while (pos_ < src_.size()) {
      if (braces_.empty() && lex_tag_end(block)) return;
      const size_t ws_end = skip_space(pos_);
      if (ws_end > pos_) {
        consume_to(ws_end);
        continue;
      }
      if (!(lex_number() || lex_name() || lex_string() || lex_operator())) {
        size_t i = pos_;
        std::string ch;
        append_utf8(ch, next_code_point(src_, i));
        syntax_error(line_, fmt::format("unexpected character '{}'", ch));
      }
    }
  }

  bool lex_tag_end(bool block) {
    size_t end = 0;
    if (block) {
      if (starts(pos_, "+%}")) {
        end = pos_ + 3;
      } else if (starts(pos_, "-%}")) {
        end = skip_space(pos_ + 3);
      } else if (starts(pos_, "%}")) {
        end = pos_ + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
      }
    } else {
      if (starts(pos_, "-}}")) {
        end = skip_space(pos_ + 3);
      } else if (starts(pos_, "}}")) {
        end = pos_ + 2;
      }
    }
    if (!end) return false;
    emit(block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd, block ? "%}" : "}}");
    consume_to(end);
    return true;
  }

  // (\d+_)*\d+ at i: the end of the match, or npos.
  size_t digits(size_t i) const {
    if (i >= src_.size() || !is_digit(src_[i])) return std::string::npos;
    while (true) {
      while (i < src_.size() && is_digit(src_[i])) ++i;
      if (i + 1 < src_.size() && src_[i] == '_' && is_digit(src_[i + 1])) {
        ++i;
      } else {
        return i;
      }
    }
  }

  size_t exponent(size_t i) const {
    if (i >= src_.size() || (src_[i] != 'e' && src_[i] != 'E')) return std::string::npos;
    ++i;
    if (i < src_.size() && (src_[i] == '+' || src_[i] == '-')) ++i;
    return digits(i);
  }

  static std::string without_underscores(std::string_view s) {
    std::string out;
    for (char c : s) {
      if (c != '_') out += c;
    }
    return out;
  }

  bool lex_number() {
    const size_t int_end = digits(pos_);
    if (int_end == std::string::npos) return false;
    // Float first, as jinja2 tries it first (and never right after a dot: `x.0` is x[0]).
    if (pos_ == 0 || src_[pos_ - 1] != '.') {
      size_t end = std::string::npos;
      const size_t frac_end =
          (int_end < src_.size() && src_[int_end] == '.') ? digits(int_end + 1) : std::string::npos;
      if (frac_end != std::string::npos) end = exponent(frac_end);
      if (end == std::string::npos) end = exponent(int_end);
      if (end == std::string::npos) end = frac_end;
      if (end != std::string::npos) {
        const std::string text =
            without_underscores(std::string_view(src_).substr(pos_, end - pos_));
        emit(TokenKind::kFloat, text);
        tokens_.back().float_value = std::strtod(text.c_str(), nullptr);
        consume_to(end);
        return true;
      }
    }
    return lex_integer();
  }

  bool lex_integer() {
    auto prefixed = [&](char p, int base) -> size_t {
      if (src_[pos_] != '0' || pos_ + 1 >= src_.size() || std::tolower(src_[pos_ + 1]) != p) {
        return 0;
      }
      size_t i = pos_ + 2, end = 0;
      auto valid = [&](char c) {
        const int d = is_digit(c) ? c - '0' : (is_hex(c) ? std::tolower(c) - 'a' + 10 : 99);
        return d < base;
      };
      while (i < src_.size()) {
        const size_t j = (src_[i] == '_') ? i + 1 : i;
        if (j < src_.size() && valid(src_[j])) {
          i = end = j + 1;
        } else {
          break;
        }
      }
      return end;
    };
    int base = 10;
    size_t end = 0, digits_from = pos_;
    for (auto [p, b] : {std::pair{'b', 2}, std::pair{'o', 8}, std::pair{'x', 16}}) {
      if ((end = prefixed(p, b))) {
        base = b;
        digits_from = pos_ + 2;
        break;
      }
    }
    if (!end) {
      end = pos_ + 1;
      // [1-9](_?\d)* or 0(_?0)*
      const char allowed_max = src_[pos_] == '0' ? '0' : '9';
      while (end < src_.size()) {
        const size_t j = src_[end] == '_' ? end + 1 : end;
        if (j < src_.size() && src_[j] >= '0' && src_[j] <= allowed_max) {
          end = j + 1;
        } else {
          break;
        }
      }
    }
    const std::string text =
        without_underscores(std::string_view(src_).substr(digits_from, end - digits_from));
    errno = 0;
    char* parse_end = nullptr;
    const long long v = std::strtoll(text.c_str(), &parse_end, base);
    if (errno == ERANGE) syntax_error(line_, "integer literal too large");
    emit(TokenKind::kInteger, src_.substr(pos_, end - pos_));
    tokens_.back().int_value = v;
    consume_to(end);
    return true;
  }

  bool lex_name() {
    if (!is_name_start(static_cast<unsigned char>(src_[pos_]))) return false;
    size_t end = pos_;
    while (end < src_.size() && is_name_char(static_cast<unsigned char>(src_[end]))) {
      if (static_cast<unsigned char>(src_[end]) >= 0x80) {
        // Non-ASCII whitespace separates names as it does in Python.
        size_t next = end;
        if (is_space(next_code_point(src_, next))) break;
        end = next;
      } else {
        ++end;
      }
    }
    if (end == pos_) return false;
    emit(TokenKind::kName, src_.substr(pos_, end - pos_));
    consume_to(end);
    return true;
  }

  bool lex_string() {
    const char quote = src_[pos_];
    if (quote != '\'' && quote != '"') return false;
    size_t i = pos_ + 1;
    while (i < src_.size() && src_[i] != quote) i += (src_[i] == '\\') ? 2 : 1;
    if (i >= src_.size()) return false;  // unterminated: reported as an unexpected quote
    const int line = line_;
    emit(TokenKind::kString, unescape(std::string_view(src_).substr(pos_ + 1, i - pos_ - 1), line));
    consume_to(i + 1);
    return true;
  }

  bool lex_operator() {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    static constexpr std::string_view kOne = "+-/*%~[](){}><=.:|,;";
    std::string op;
    for (std::string_view two : kTwo) {
      if (starts(pos_, two)) op = two;
    }
    if (op.empty() && kOne.find(src_[pos_]) != std::string_view::npos) op = src_.substr(pos_, 1);
    if (op.empty()) return false;
    if (op == "(" || op == "[" || op == "{") {
      braces_.push_back(op == "(" ? ')' : (op == "[" ? ']' : '}'));
    } else if (op == ")" || op == "]" || op == "}") {
      if (braces_.empty()) syntax_error(line_, fmt::format("unexpected '{}'", op));
      if (braces_.back() != op[0]) {
        syntax_error(line_, fmt::format("unexpected '{}', expected '{}'", op, braces_.back()));
      }
      braces_.pop_back();
    }
    emit(TokenKind::kOperator, op);
    consume_to(pos_ + op.size());
    return true;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;  // the last match ended a line (jinja2's lstrip_blocks state)
  std::vector<char> braces_;   // closers expected, as jinja2's balancing stack
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(source).run();
}

std::string describe(const Token& token) {
  switch (token.kind) {
    case TokenKind::kEof:
      return "end of template";
    case TokenKind::kBlockEnd:
      return "end of statement block";
    case TokenKind::kVariableEnd:
      return "end of print statement";
    case TokenKind::kBlockBegin:
      return "begin of statement block";
    case TokenKind::kVariableBegin:
      return "begin of print statement";
    case TokenKind::kData:
      return "template data";
    case TokenKind::kString:
      return "string";
    case TokenKind::kInteger:
    case TokenKind::kFloat:
      return "number " + token.value;
    default:
      return "'" + token.value + "'";
  }
}

}  // namespace tf::jinja
