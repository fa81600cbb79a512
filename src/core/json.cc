#include "core/json.h"

#include "core/error.h"

namespace tf {

int json_nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > limit) return deepest;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

void check_json_depth(std::string_view text, std::string_view what, int max_depth) {
  if (json_nesting_depth(text, max_depth) > max_depth)
    fail("{}: JSON nested deeper than {} levels", what, max_depth);
}

nlohmann::json parse_json(std::string_view text, std::string_view what, int max_depth) {
  check_json_depth(text, what, max_depth);
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace tf
