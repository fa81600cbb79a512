#pragma once
// ASCII whitespace (space, tab, CR, LF) trimmed off views of model output: what the tool-call
// and reasoning parsers skip between markers, JSON and content.

#include <string_view>

namespace tf {

inline bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

inline std::string_view ltrim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return s;
}

inline std::string_view rtrim(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

inline std::string_view trim(std::string_view s) {
  return rtrim(ltrim(s));
}

}  // namespace tf
