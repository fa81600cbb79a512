#pragma once
// Builds the AST from tokens following jinja2's parser: the same grammar and precedence, the same
// errors for malformed templates, and an "unsupported" error naming any tag chat templates do not
// need (include, extends, block, import, call, ...).

#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace tf::jinja {

// Nesting limits that keep parsing and rendering off the end of the stack; jinja2 hits Python's
// recursion limit at similar depths.
inline constexpr int kMaxParseNesting = 100;
inline constexpr int kMaxExprDepth = 256;

// Throws TemplateError (message ends with the line) on a syntax error or unsupported construct.
Body parse_template(std::string_view source);

}  // namespace tf::jinja
