#pragma once
// Builds the AST from tokens following jinja2's parser: the same grammar and precedence, the same
// errors for malformed templates, and an "unsupported" error naming any tag chat templates do not
// need (include, extends, block, import, call, ...).

#include <string_view>

#include "chat/jinja/ast.h"

namespace tf::jinja {

// Throws TemplateError (message ends with the line) on a syntax error or unsupported construct.
Body parse_template(std::string_view source);

}  // namespace tf::jinja
