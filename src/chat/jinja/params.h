#pragma once
// Binds the arguments of a call to a builtin's named parameters the way Python binds them
// (positional first, then keywords, each at most once), so filters and methods accept what jinja2
// and Python accept and refuse the rest with Python's messages.

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja/py_format.h"
#include "chat/jinja/value.h"

namespace tf::jinja {

class Params {
 public:
  Params(std::string_view function, const CallArgs& args,
         std::initializer_list<std::string_view> names)
      : function_(function), slots_(names.size()) {
    const std::vector<std::string_view> list(names);
    if (args.positional.size() > list.size()) {
      render_fail("{}() takes at most {} argument(s) ({} given)", function, list.size(),
                  args.positional.size());
    }
    for (size_t i = 0; i < args.positional.size(); ++i) slots_[i] = args.positional[i];
    for (const auto& [key, value] : args.keyword) {
      size_t i = 0;
      while (i < list.size() && list[i] != key) ++i;
      if (i == list.size())
        render_fail("{}() got an unexpected keyword argument '{}'", function, key);
      if (slots_[i]) render_fail("{}() got multiple values for argument '{}'", function, key);
      slots_[i] = value;
    }
  }

  bool has(size_t i) const { return slots_[i].has_value(); }
  // Python's None counts as "not given" for the optional parameters of builtins.
  bool given(size_t i) const { return has(i) && !slots_[i]->is_none(); }
  const Value& get(size_t i) const {
    if (!has(i)) render_fail("{}() missing a required argument", function_);
    return *slots_[i];
  }
  Value get_or(size_t i, Value fallback) const { return has(i) ? *slots_[i] : fallback; }
  bool get_bool(size_t i, bool fallback) const { return has(i) ? truthy(*slots_[i]) : fallback; }
  int64_t get_int(size_t i, int64_t fallback) const {
    if (!given(i)) return fallback;
    if (!slots_[i]->is_integral()) {
      render_fail("{}() expects an integer, not '{}'", function_, type_name(*slots_[i]));
    }
    return slots_[i]->as_integral();
  }
  std::optional<std::string> get_str(size_t i) const {
    if (!given(i)) return std::nullopt;
    if (!slots_[i]->is_string()) {
      render_fail("{}() expects a string, not '{}'", function_, type_name(*slots_[i]));
    }
    return slots_[i]->as_string();
  }

 private:
  std::string function_;
  std::vector<std::optional<Value>> slots_;
};

}  // namespace tf::jinja
