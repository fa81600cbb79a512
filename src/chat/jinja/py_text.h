#pragma once
// Python's str algorithms over UTF-8: templates index, strip, split and case-map by code point,
// with Python's idea of whitespace. Bytes that are not valid UTF-8 count as one code point each
// (as Python's surrogateescape would), so no input makes these functions fail.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tf::jinja {

// Decodes the code point at s[i] and advances i past it.
char32_t next_code_point(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t cp);
size_t code_point_count(std::string_view s);
// Byte offset of every code point, plus s.size() at the end: offsets[k] for k in [0, count()].
// An ASCII string (the usual case, and a long prompt's) maps k to k without a table, so indexing
// or stripping a message of megabytes does not allocate eight bytes per byte.
class CodePointOffsets {
 public:
  explicit CodePointOffsets(std::string_view s);
  size_t count() const { return count_; }
  size_t operator[](size_t k) const { return table_.empty() ? k : table_[k]; }

 private:
  size_t count_ = 0;
  std::vector<size_t> table_;  // empty for ASCII
};
bool is_ascii(std::string_view s);
std::vector<std::string> code_points(std::string_view s);

// str.isspace() (and what re's \s matches).
bool is_space(char32_t cp);
bool is_space_byte(char c);

enum class StripSide { kBoth, kLeft, kRight };
// str.strip() / lstrip() / rstrip(); `chars` absent strips whitespace.
std::string py_strip(std::string_view s, StripSide side,
                     const std::optional<std::string>& chars = std::nullopt);
// str.split(sep, maxsplit) / str.rsplit(...); sep absent splits on runs of whitespace.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right = false);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement,
                       int64_t count);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()
std::string jinja_title(std::string_view s);    // jinja2's |title filter (not str.title)
bool py_isupper(std::string_view s);
bool py_islower(std::string_view s);

// The first `n` code points of s.
std::string py_slice_code_points(std::string_view s, size_t n);

// repr() of a str: quotes and escapes as Python chooses them.
std::string py_repr_string(std::string_view s);
// repr() of a float: the shortest string that round-trips, in Python's layout (1.0, 1e+16).
std::string py_repr_float(double f);

}  // namespace tf::jinja
