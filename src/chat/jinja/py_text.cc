#include "chat/jinja/py_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "tokenizer/unicode.h"

namespace tf::jinja {

namespace {

// Invalid bytes decode to U+DC80..U+DCFF and encode back to the same byte (surrogateescape).
constexpr char32_t kEscapedByteBase = 0xDC00;

// Ranges where upper and lower case alternate: [first, last], upper case on even or odd code
// points. Covers Latin Extended-A/Additional, Cyrillic extensions and the like.
struct AlternatingRange {
  char32_t first, last;
  bool upper_is_even;
};
constexpr AlternatingRange kAlternating[] = {
    {0x0100, 0x012F, true}, {0x0132, 0x0137, true},  {0x0139, 0x0148, false},
    {0x014A, 0x0177, true}, {0x0179, 0x017E, false}, {0x0460, 0x0481, true},
    {0x048A, 0x04BF, true}, {0x04C1, 0x04CE, false}, {0x04D0, 0x052F, true},
    {0x1E00, 0x1E95, true}, {0x1EA0, 0x1EFF, true},
};

// Ranges where lower = upper + delta.
struct ShiftedRange {
  char32_t upper_first, upper_last;
  char32_t delta;
};
constexpr ShiftedRange kShifted[] = {
    {'A', 'Z', 32},       {0xC0, 0xD6, 32},     {0xD8, 0xDE, 32},     {0x0391, 0x03A1, 32},
    {0x03A3, 0x03AB, 32}, {0x0388, 0x038A, 37}, {0x038E, 0x038F, 63}, {0x0410, 0x042F, 32},
    {0x0400, 0x040F, 80}, {0x0531, 0x0556, 48}, {0xFF21, 0xFF3A, 32},
};

char32_t to_lower_cp(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  for (const auto& r : kShifted) {
    if (cp >= r.upper_first && cp <= r.upper_last) return cp + r.delta;
  }
  for (const auto& r : kAlternating) {
    if (cp >= r.first && cp <= r.last) return ((cp % 2 == 0) == r.upper_is_even) ? cp + 1 : cp;
  }
  switch (cp) {
    case 0x0178:
      return 0xFF;
    case 0x0130:
      return 'i';
    case 0x0386:
      return 0x03AC;
    case 0x038C:
      return 0x03CC;
    case 0x1E9E:
      return 0xDF;
    default:
      return cp;
  }
}

char32_t to_upper_cp(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  for (const auto& r : kShifted) {
    if (cp >= r.upper_first + r.delta && cp <= r.upper_last + r.delta) return cp - r.delta;
  }
  for (const auto& r : kAlternating) {
    if (cp >= r.first && cp <= r.last) return ((cp % 2 == 0) == r.upper_is_even) ? cp : cp - 1;
  }
  switch (cp) {
    case 0xB5:
      return 0x039C;
    case 0xFF:
      return 0x0178;
    case 0x0131:
      return 'I';
    case 0x017F:
      return 'S';
    case 0x03C2:
      return 0x03A3;
    case 0x03AC:
      return 0x0386;
    case 0x03CC:
      return 0x038C;
    default:
      return cp;
  }
}

bool is_cased(char32_t cp) {
  return to_lower_cp(cp) != cp || to_upper_cp(cp) != cp || cp == 0xDF;
}
bool is_upper_cp(char32_t cp) {
  return to_lower_cp(cp) != cp;
}
bool is_lower_cp(char32_t cp) {
  return to_upper_cp(cp) != cp || cp == 0xDF;
}

// Appends Python's upper() of one code point (ß becomes SS, as in Python).
void append_upper(std::string& out, char32_t cp) {
  if (cp == 0xDF) {
    out += "SS";
  } else {
    append_utf8(out, to_upper_cp(cp));
  }
}

// Python's title case of one code point (ß becomes Ss).
void append_title(std::string& out, char32_t cp) {
  if (cp == 0xDF) {
    out += "Ss";
  } else {
    append_utf8(out, to_upper_cp(cp));
  }
}

bool is_line_break(char32_t cp) {
  return (cp >= 0x0A && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 || cp == 0x2028 ||
         cp == 0x2029;
}

// What str.isprintable() rejects, as far as chat text meets it: controls, separators other than
// the ASCII space, format characters, surrogates and private use.
bool is_printable(char32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp < 0x7F) return true;
  if (cp <= 0xA0 || cp == 0xAD) return false;
  if (cp == 0x061C || cp == 0x1680 || cp == 0x180E || cp == 0x3000 || cp == 0xFEFF) return false;
  if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
      (cp >= 0x205F && cp <= 0x206F)) {
    return false;
  }
  if ((cp >= 0xD800 && cp <= 0xF8FF) || (cp >= 0xFFF0 && cp <= 0xFFFB) || cp >= 0xF0000) {
    return false;
  }
  if (cp == 0xFFFE || cp == 0xFFFF || (cp >= 0xE0000 && cp <= 0xE0FFF)) return false;
  return true;
}

}  // namespace

char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int len = 0;
  char32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    cp = b0 & 0x07;
  }
  bool ok = len > 0 && i + len <= s.size();
  for (int k = 1; ok && k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) ok = false;
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are invalid UTF-8.
  if (ok && ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
             (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))) {
    ok = false;
  }
  if (!ok) {
    ++i;
    return kEscapedByteBase + b0;
  }
  i += len;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  // An undecodable byte kept as a code point (as Python's surrogateescape) goes back as itself.
  if (cp >= kEscapedByteBase + 0x80 && cp <= kEscapedByteBase + 0xFF) {
    out += static_cast<char>(cp - kEscapedByteBase);
    return;
  }
  unicode::append_utf8(out, static_cast<uint32_t>(cp));
}

bool is_ascii(std::string_view s) {
  unsigned char any = 0;
  for (const char c : s) any |= static_cast<unsigned char>(c);
  return any < 0x80;
}

size_t code_point_count(std::string_view s) {
  if (is_ascii(s)) return s.size();
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) next_code_point(s, i);
  return n;
}

CodePointOffsets::CodePointOffsets(std::string_view s) {
  if (is_ascii(s)) {
    count_ = s.size();
    return;
  }
  table_.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    table_.push_back(i);
    next_code_point(s, i);
  }
  count_ = table_.size();
  table_.push_back(s.size());
}

std::vector<std::string> code_points(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    next_code_point(s, i);
    out.emplace_back(s.substr(start, i - start));
  }
  return out;
}

bool is_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_space_byte(char c) {
  const auto b = static_cast<unsigned char>(c);
  return (b >= 0x09 && b <= 0x0D) || (b >= 0x1C && b <= 0x20);
}

std::string py_strip(std::string_view s, StripSide side, const std::optional<std::string>& chars) {
  std::vector<char32_t> set;
  if (chars) {
    for (size_t i = 0; i < chars->size();) set.push_back(next_code_point(*chars, i));
  }
  auto strippable = [&](char32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : is_space(cp);
  };
  const CodePointOffsets off(s);
  size_t first = 0, last = off.count();  // code point indices [first, last)
  auto cp_at = [&](size_t k) {
    size_t i = off[k];
    return next_code_point(s, i);
  };
  if (side != StripSide::kRight) {
    while (first < last && strippable(cp_at(first))) ++first;
  }
  if (side != StripSide::kLeft) {
    while (last > first && strippable(cp_at(last - 1))) --last;
  }
  return std::string(s.substr(off[first], off[last] - off[first]));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    if (sep->empty()) throw std::invalid_argument("empty separator");
    if (!from_right) {
      size_t start = 0;
      for (int64_t n = 0; n < maxsplit; ++n) {
        const size_t at = s.find(*sep, start);
        if (at == std::string_view::npos) break;
        parts.emplace_back(s.substr(start, at - start));
        start = at + sep->size();
      }
      parts.emplace_back(s.substr(start));
    } else {
      size_t end = s.size();
      for (int64_t n = 0; n < maxsplit && end >= sep->size(); ++n) {
        const size_t at = s.rfind(*sep, end - sep->size());
        if (at == std::string_view::npos) break;
        parts.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
        end = at;
      }
      parts.emplace_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  // Runs of whitespace separate; leading and trailing whitespace yields no empty parts.
  const CodePointOffsets off(s);
  const size_t n = off.count();
  std::vector<bool> space(n);
  for (size_t k = 0; k < n; ++k) {
    size_t i = off[k];
    space[k] = is_space(next_code_point(s, i));
  }
  auto piece = [&](size_t a, size_t b) { return std::string(s.substr(off[a], off[b] - off[a])); };
  if (!from_right) {
    size_t k = 0;
    int64_t splits = 0;
    while (true) {
      while (k < n && space[k]) ++k;
      if (k == n) break;
      if (splits == maxsplit) {
        size_t end = n;
        parts.push_back(piece(k, end));
        break;
      }
      const size_t start = k;
      while (k < n && !space[k]) ++k;
      parts.push_back(piece(start, k));
      ++splits;
    }
  } else {
    size_t k = n;
    int64_t splits = 0;
    while (true) {
      while (k > 0 && space[k - 1]) --k;
      if (k == 0) break;
      if (splits == maxsplit) {
        parts.push_back(piece(0, k));
        break;
      }
      const size_t end = k;
      while (k > 0 && !space[k - 1]) --k;
      parts.push_back(piece(k, end));
      ++splits;
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> lines;
  size_t start = 0, i = 0;
  while (i < s.size()) {
    const size_t at = i;
    const char32_t cp = next_code_point(s, i);
    if (!is_line_break(cp)) continue;
    size_t end = i;
    if (cp == '\r' && i < s.size() && s[i] == '\n') end = ++i;
    lines.emplace_back(s.substr(start, (keepends ? end : at) - start));
    start = end;
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement,
                       int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement before every code point and at the end.
    size_t i = 0;
    int64_t n = 0;
    while (i < s.size() && n < count) {
      out += replacement;
      ++n;
      const size_t start = i;
      next_code_point(s, i);
      out += s.substr(start, i - start);
    }
    if (i < s.size()) {
      out += s.substr(i);
    } else if (n < count) {
      out += replacement;
    }
    return out;
  }
  size_t start = 0;
  for (int64_t n = 0; n < count; ++n) {
    const size_t at = s.find(old, start);
    if (at == std::string_view::npos) break;
    out += s.substr(start, at - start);
    out += replacement;
    start = at + old.size();
  }
  out += s.substr(start);
  return out;
}

std::string py_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_upper(out, next_code_point(s, i));
  return out;
}

std::string py_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_utf8(out, to_lower_cp(next_code_point(s, i)));
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool previous_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = next_code_point(s, i);
    if (previous_cased) {
      append_utf8(out, to_lower_cp(cp));
    } else {
      append_title(out, cp);
    }
    previous_cased = is_cased(cp);
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const bool first = i == 0;
    const char32_t cp = next_code_point(s, i);
    if (first) {
      append_title(out, cp);
    } else {
      append_utf8(out, to_lower_cp(cp));
    }
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  // jinja2 splits on runs of [-\s({\[<] and upper-cases the first code point of every piece.
  auto separator = [](char32_t cp) {
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || is_space(cp);
  };
  std::string out;
  out.reserve(s.size());
  bool at_piece_start = true;
  bool in_separator = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = next_code_point(s, i);
    const bool sep = separator(cp);
    if (sep != in_separator) at_piece_start = true;
    in_separator = sep;
    if (at_piece_start) {
      append_upper(out, cp);
      at_piece_start = false;
    } else {
      append_utf8(out, to_lower_cp(cp));
    }
  }
  return out;
}

bool py_isupper(std::string_view s) {
  bool any_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = next_code_point(s, i);
    if (is_lower_cp(cp)) return false;
    any_cased = any_cased || is_upper_cp(cp);
  }
  return any_cased;
}

bool py_islower(std::string_view s) {
  bool any_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = next_code_point(s, i);
    if (is_upper_cp(cp)) return false;
    any_cased = any_cased || is_lower_cp(cp);
  }
  return any_cased;
}

std::string py_slice_code_points(std::string_view s, size_t n) {
  size_t i = 0;
  for (size_t k = 0; k < n && i < s.size(); ++k) next_code_point(s, i);
  return std::string(s.substr(0, i));
}

std::string py_repr_string(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = next_code_point(s, i);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (is_printable(cp)) {
      append_utf8(out, cp);
    } else if (cp <= 0xFF) {
      out += fmt::format("\\x{:02x}", static_cast<uint32_t>(cp));
    } else if (cp <= 0xFFFF) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<uint32_t>(cp));
    }
  }
  out += quote;
  return out;
}

std::string py_repr_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0.0) return std::signbit(f) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: fixed notation for exponents in
  // [-4, 16), scientific otherwise.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits += c;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int exp10 = 0;
  std::from_chars(sci.data() + e + 1 + (sci[e + 1] == '+' ? 1 : 0), sci.data() + sci.size(), exp10);
  const int decpt = exp10 + 1;  // position of the decimal point relative to the digits
  const int ndigits = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (ndigits > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += fmt::format("e{}{:02d}", exp10 < 0 ? '-' : '+', std::abs(exp10));
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (decpt >= ndigits) {
    out += digits;
    out.append(static_cast<size_t>(decpt - ndigits), '0');
    out += ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decpt));
    out += '.';
    out += digits.substr(static_cast<size_t>(decpt));
  }
  return out;
}

}  // namespace tf::jinja
