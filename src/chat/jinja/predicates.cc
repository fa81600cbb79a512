// jinja2's built-in tests (`x is defined`, `n is divisibleby 3`, ...), as jinja2 3.1 defines them.

#include <map>

#include "chat/jinja/builtins.h"
#include "chat/jinja/interpreter.h"
#include "chat/jinja/params.h"
#include "chat/jinja/py_format.h"
#include "chat/jinja/py_text.h"

namespace tf::jinja {

namespace {

using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&);

bool no_args(const CallArgs& args, const char* test) {
  Params(test, args, {});
  return true;
}

bool t_defined(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "defined") && !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "undefined") && v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "none") && v.is_none();
}
bool t_boolean(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "boolean") && v.is_bool();
}
bool t_true(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "true") && v.is_bool() && v.as_bool();
}
bool t_false(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "false") && v.is_bool() && !v.as_bool();
}
bool t_integer(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "integer") && v.is_int();
}
bool t_float(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "float") && v.is_float();
}
bool t_number(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "number") && v.is_number();
}
bool t_string(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "string") && v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "mapping") && v.is_dict();
}
bool t_callable(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "callable") && (v.is_function() || v.is_undefined());
}
// Undefined iterates (as empty) and has a length, so jinja2 calls it iterable and a sequence.
bool t_sequence(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "sequence") &&
         (v.is_string() || v.is_list() || v.is_dict() || v.is_undefined());
}
bool t_iterable(Interpreter& in, const Value& v, CallArgs& a) {
  return v.is_generator() ? no_args(a, "iterable") : t_sequence(in, v, a);
}
bool t_escaped(Interpreter&, const Value&, CallArgs& a) {
  no_args(a, "escaped");
  return false;  // nothing here is markupsafe.Markup
}

bool is_remainder_zero(Interpreter& in, const Value& v, const Value& divisor, int64_t expected) {
  return equal(binary_op(in, BinaryOp::kMod, v, divisor), Value(expected));
}
bool t_odd(Interpreter& in, const Value& v, CallArgs& a) {
  return no_args(a, "odd") && is_remainder_zero(in, v, Value(int64_t{2}), 1);
}
bool t_even(Interpreter& in, const Value& v, CallArgs& a) {
  return no_args(a, "even") && is_remainder_zero(in, v, Value(int64_t{2}), 0);
}
bool t_divisibleby(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("divisibleby", a, {"num"});
  return is_remainder_zero(in, v, p.get(0), 0);
}

Value other(const CallArgs& a, const char* test) {
  Params p(test, a, {"other"});
  return p.get(0);
}
bool t_eq(Interpreter&, const Value& v, CallArgs& a) {
  return equal(v, other(a, "eq"));
}
bool t_ne(Interpreter&, const Value& v, CallArgs& a) {
  return !equal(v, other(a, "ne"));
}
bool t_lt(Interpreter&, const Value& v, CallArgs& a) {
  return less(v, other(a, "lt"));
}
bool t_gt(Interpreter&, const Value& v, CallArgs& a) {
  return less(other(a, "gt"), v);
}
bool t_le(Interpreter&, const Value& v, CallArgs& a) {
  const Value o = other(a, "le");
  return less(v, o) || equal(v, o);
}
bool t_ge(Interpreter&, const Value& v, CallArgs& a) {
  const Value o = other(a, "ge");
  return less(o, v) || equal(v, o);
}
bool t_in(Interpreter&, const Value& v, CallArgs& a) {
  Params p("in", a, {"seq"});
  return contains(p.get(0), v);
}
bool t_lower(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "lower") && py_islower(to_str(v));
}
bool t_upper(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "upper") && py_isupper(to_str(v));
}
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  const Value o = other(a, "sameas");
  if (v.is_none() || o.is_none()) return v.is_none() && o.is_none();
  if (v.is_bool() || o.is_bool()) return v.is_bool() && o.is_bool() && v.as_bool() == o.as_bool();
  // CPython caches the small ints; other equal scalars are distinct objects.
  if (v.is_int() && o.is_int())
    return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
  if (v.is_undefined() || o.is_undefined()) return false;
  return v.same_object(o);
}
bool t_filter(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "filter") && v.is_string() && is_known_filter(v.as_string());
}
bool t_test(Interpreter&, const Value& v, CallArgs& a) {
  return no_args(a, "test") && v.is_string() && is_known_test(v.as_string());
}

const std::map<std::string_view, TestFn>& tests() {
  static const std::map<std::string_view, TestFn> table = {
      {"boolean", t_boolean},
      {"callable", t_callable},
      {"defined", t_defined},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"escaped", t_escaped},
      {"even", t_even},
      {"false", t_false},
      {"filter", t_filter},
      {"float", t_float},
      {"ge", t_ge},
      {">=", t_ge},
      {"greaterthan", t_gt},
      {"gt", t_gt},
      {">", t_gt},
      {"in", t_in},
      {"integer", t_integer},
      {"iterable", t_iterable},
      {"le", t_le},
      {"<=", t_le},
      {"lessthan", t_lt},
      {"lt", t_lt},
      {"<", t_lt},
      {"lower", t_lower},
      {"mapping", t_mapping},
      {"ne", t_ne},
      {"!=", t_ne},
      {"none", t_none},
      {"number", t_number},
      {"odd", t_odd},
      {"sameas", t_sameas},
      {"sequence", t_sequence},
      {"string", t_string},
      {"test", t_test},
      {"true", t_true},
      {"undefined", t_undefined},
      {"upper", t_upper},
  };
  return table;
}

}  // namespace

bool is_known_test(std::string_view name) {
  return tests().count(name) != 0;
}

bool apply_test(Interpreter& in, std::string_view name, const Value& input, CallArgs& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) {
    throw TemplateError(ErrorKind::kUnsupported, fmt::format("unknown test '{}'", name));
  }
  return it->second(in, input, args);
}

}  // namespace tf::jinja
