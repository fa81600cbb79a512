#pragma once
// Splits a template into tokens exactly as jinja2's lexer does with trim_blocks=True and
// lstrip_blocks=True (the environment transformers renders chat templates with): the same
// whitespace control ({%- -%} {{- -}} {%+), the same newline handling, the same literals.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tf::jinja {

enum class TokenKind : uint8_t {
  kData,           // text outside tags
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,    // value holds the unescaped text
  kInteger,   // int_value
  kFloat,     // float_value
  kOperator,  // value holds the operator: "==", "(", ...
  kEof,
};

struct Token {
  TokenKind kind;
  int line;
  std::string value;
  int64_t int_value = 0;
  double float_value = 0.0;

  bool is_op(std::string_view op) const { return kind == TokenKind::kOperator && value == op; }
  bool is_name(std::string_view name) const { return kind == TokenKind::kName && value == name; }
};

// Throws TemplateError (with the line) on what jinja2's lexer rejects. Ends with kEof.
std::vector<Token> tokenize(std::string_view source);

// For error messages: "end of statement block", "'foo'", ...
std::string describe(const Token& token);

}  // namespace tf::jinja
