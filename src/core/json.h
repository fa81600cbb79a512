#pragma once
// JSON from outside (request bodies, config.json, tokenizer.json, safetensors headers) parsed
// with a bound on nesting. nlohmann's parser itself is iterative, but everything that walks a
// document afterwards (serializing, copying into our structures, rendering a chat template)
// recurses once per level: a 200 KB body of '[' would overflow the stack. No file or request
// we read needs more than a handful of levels.

#include <nlohmann/json.hpp>

#include <string_view>

namespace tf {

inline constexpr int kMaxJsonDepth = 128;

// The deepest nesting of arrays and objects in text (strings skipped, escapes honoured),
// stopping early once it passes limit. Linear, no allocation; text need not be valid JSON.
int json_nesting_depth(std::string_view text, int limit = kMaxJsonDepth);

// Throws Error (kInvalidArgument) naming what when text nests deeper than max_depth.
void check_json_depth(std::string_view text, std::string_view what, int max_depth = kMaxJsonDepth);

// check_json_depth, then nlohmann's parse without exceptions: a discarded value when text is
// not JSON (the caller says what it expected).
nlohmann::json parse_json(std::string_view text, std::string_view what,
                          int max_depth = kMaxJsonDepth);

}  // namespace tf
