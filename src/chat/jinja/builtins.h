#pragma once
// jinja2's built-in filters and tests, the methods of str, dict and list that templates call, and
// the globals transformers provides (range, namespace, dict, raise_exception, strftime_now).

#include <string_view>

#include "chat/jinja/value.h"

namespace tf::jinja {

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

// `input | name(args)`. Throws for an unknown filter.
Value apply_filter(Interpreter& in, std::string_view name, const Value& input, CallArgs& args);
// `input is name(args)`. Throws for an unknown test.
bool apply_test(Interpreter& in, std::string_view name, const Value& input, CallArgs& args);

// obj.name(args) for the methods of str, dict and list; false if obj has no such method.
bool call_method(Interpreter& in, const Value& obj, std::string_view name, CallArgs& args,
                 Value& result);
// The method itself (obj.name without a call), or undefined if there is none. Mutating methods
// give an undefined that raises when called, as jinja2's immutable sandbox does.
Value bound_method(const Value& obj, std::string_view name, bool& found);

// The globals every chat template sees, before the render context.
Dict make_globals();

}  // namespace tf::jinja
