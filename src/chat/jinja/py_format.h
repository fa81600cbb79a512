#pragma once
// Values as Python prints them: str() for template output, repr() inside containers, and
// json.dumps() for the tojson filter (which transformers defines as json.dumps with
// ensure_ascii=False).

#include <optional>
#include <string>

#include "chat/jinja/value.h"

namespace tf::jinja {

// Python's str(); jinja2's Undefined prints as the empty string.
std::string to_str(const Value& v);
// Python's repr().
std::string to_repr(const Value& v);

struct JsonOptions {
  std::optional<std::string> indent;  // absent: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};
// Python's json.dumps(v, ...).
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace tf::jinja
