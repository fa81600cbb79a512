#pragma once
// Regular expressions and choices of strings as GBNF (grammar.h), so that vLLM's guided_regex and
// guided_choice, and a JSON Schema's `pattern`, go through the one recognizer.
//
// The regular expressions are the common subset of Python's `re` and ECMAScript: literals and
// escapes (\n \t \r \f \v \0 \xHH \uHHHH \u{H..}, escaped punctuation), `.` (any character but a
// newline), classes [...] with ranges, negation and \d \w \s (and \D \W \S) inside or outside,
// groups ( ), (?: ), (?P<name> ), (?<name> ), alternation, quantifiers * + ? {m} {m,} {m,n} {,n}
// (lazy forms mean the same language), `^` at the start and `$` at the end. A pattern always
// matches the whole output (as vLLM's guided_regex does). What a context-free grammar cannot
// follow, or what would change the language silently, is refused by name: backreferences,
// lookaround, word boundaries, inline flags, possessive quantifiers, anchors elsewhere.

#include <string>
#include <string_view>
#include <vector>

namespace tf {

// A whole grammar (`root ::= ...`) for the strings the pattern matches in full. Throws Error
// (kInvalidArgument) naming the problem and its offset in the pattern.
std::string regex_to_gbnf(std::string_view pattern);

// One GBNF expression for the pattern. json_string: the expression describes the pattern's
// strings as they appear inside a JSON string literal (a `"` written \", a backslash \\, a tab
// \t, other control characters left out), so that the JSON text decodes to a matching string.
std::string regex_gbnf_expression(std::string_view pattern, bool json_string);

// A grammar for exactly one of the strings (vLLM's guided_choice). Throws on an empty list.
std::string choice_to_gbnf(const std::vector<std::string>& choices);

// A GBNF literal ("...", escaped) for UTF-8 text.
std::string gbnf_literal(std::string_view text);

}  // namespace tf
