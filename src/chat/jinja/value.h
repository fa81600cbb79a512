#pragma once
// The values a chat template computes with: Python's data model as jinja2 exposes it, cut down to
// what chat templates use. Lists, dicts and strings are immutable and shared (the sandbox that
// transformers renders with forbids mutation), so copying a Value is cheap; a namespace() is the
// one mutable object, shared by reference as in Python.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/error.h"

namespace tf::jinja {

class Value;
class Interpreter;

// Thrown while parsing or rendering; ChatTemplate turns it into tf::Error with the line number.
// `verbatim` marks raise_exception(): its message reaches the user unchanged.
class TemplateError : public std::runtime_error {
 public:
  TemplateError(ErrorKind kind, const std::string& message, bool verbatim = false)
      : std::runtime_error(message), kind_(kind), verbatim_(verbatim) {}
  ErrorKind kind() const { return kind_; }
  bool verbatim() const { return verbatim_; }

 private:
  ErrorKind kind_;
  bool verbatim_;
};

// The template did something Python would raise for (TypeError, ZeroDivisionError, ...).
template <typename... Args>
[[noreturn]] void render_fail(fmt::format_string<Args...> format, Args&&... args) {
  throw TemplateError(ErrorKind::kInvalidArgument,
                      fmt::format(format, std::forward<Args>(args)...));
}

// Nesting deeper than this is refused: every walk over a value (printing, equality, tojson,
// destruction) recurses once per level.
inline constexpr int kMaxValueDepth = 256;

struct List {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;
};

// What jinja2's generator filters (map, select, selectattr, unique, items, ...) return: iterable
// once computed, but without a length, always truthy, not subscriptable, and raising an error of
// the computation only when iterated, as a Python generator does.
struct Generator {
  std::vector<Value> items;
  std::string deferred_error;  // non-empty: iterating raises this
  int depth = 1;
};

// Insertion-ordered like a Python dict. Keys are scalars (jinja allows any hashable; lists and
// dicts are refused as Python refuses them).
struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  int depth = 1;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Replaces the value of an existing key in place, else appends (Python's d[k] = v).
  void set(Value key, Value value);
};

// jinja2's namespace(): attributes assignable with {% set ns.attr = ... %}. The interpreter owns
// every namespace of a render (a namespace may hold itself, which shared ownership would leak).
struct Namespace {
  Dict attrs;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A global (range, namespace, raise_exception, ...), a bound method or a macro.
struct Function {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> call;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kFunction,
    kGenerator
  };

  Value() = default;  // undefined
  explicit Value(bool b) : data_(b) {}
  explicit Value(int64_t i) : data_(i) {}
  explicit Value(int i) : data_(int64_t{i}) {}
  explicit Value(double f) : data_(f) {}
  explicit Value(std::string s) : data_(std::make_shared<const std::string>(std::move(s))) {}
  explicit Value(std::string_view s) : Value(std::string(s)) {}
  explicit Value(const char* s) : Value(std::string(s)) {}

  // Undefined remembers why it is undefined ("'foo' is undefined"), for the error raised when a
  // template uses it in a way jinja2's Undefined refuses (arithmetic, calls, attributes).
  static Value undefined(std::string why = {});
  static Value none();
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(Dict dict);
  static Value ns(Namespace* ns);  // not owned
  static Value generator(std::vector<Value> items, std::string deferred_error = {});
  static Value function(std::string name, std::function<Value(Interpreter&, CallArgs&)> call);

  template <typename Json>
  static Value from_json(const Json& json, int depth = 0);

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // Python's numbers.Number: bool is an int.
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  // int or bool, as Python accepts them where an index is expected.
  bool is_integral() const { return is_int() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }  // list or tuple
  bool is_tuple() const { return is_list() && as_list().is_tuple; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_function() const { return kind() == Kind::kFunction; }
  bool is_generator() const { return kind() == Kind::kGenerator; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  // int or bool as int64.
  int64_t as_integral() const { return is_bool() ? int64_t{as_bool()} : as_int(); }
  // Any number as double.
  double as_double() const;
  const std::string& as_string() const { return *std::get<StringPtr>(data_); }
  const List& as_list() const { return *std::get<ListPtr>(data_); }
  const Dict& as_dict() const { return *std::get<DictPtr>(data_); }
  Namespace& as_namespace() const { return *std::get<NamespacePtr>(data_); }
  const Function& as_function() const { return *std::get<FunctionPtr>(data_); }
  const Generator& as_generator() const { return *std::get<GeneratorPtr>(data_); }
  const std::string& undefined_reason() const;
  // Nesting depth: 0 for scalars.
  int depth() const;
  // Same object (Python's `is`) for lists, dicts, namespaces and functions.
  bool same_object(const Value& other) const;

 private:
  struct UndefinedData {
    std::shared_ptr<const std::string> why;
  };
  struct NoneData {};
  using StringPtr = std::shared_ptr<const std::string>;
  using ListPtr = std::shared_ptr<const List>;
  using DictPtr = std::shared_ptr<const Dict>;
  using NamespacePtr = Namespace*;
  using FunctionPtr = std::shared_ptr<const Function>;
  using GeneratorPtr = std::shared_ptr<const Generator>;

  std::variant<UndefinedData, NoneData, bool, int64_t, double, StringPtr, ListPtr, DictPtr,
               NamespacePtr, FunctionPtr, GeneratorPtr>
      data_;
};

// Python's truth value (undefined is falsy).
bool truthy(const Value& v);
// Python's type name, for error messages as Python words them.
std::string type_name(const Value& v);
// Python's ==, with jinja2's Undefined equal only to Undefined.
bool equal(const Value& a, const Value& b, int depth = 0);
// Python's <; raises for types Python cannot order (and for undefined, as jinja2 does).
bool less(const Value& a, const Value& b, int depth = 0);
// Raises TypeError as Python does for a dict key or set member it cannot hash.
void require_hashable(const Value& v);

// ---------------------------------------------------------------------------------------------

template <typename Json>
Value Value::from_json(const Json& json, int depth) {
  if (depth > kMaxValueDepth) {
    render_fail("context nests deeper than {} levels", kMaxValueDepth);
  }
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return none();
    case nlohmann::json::value_t::boolean:
      return Value(json.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(json.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = json.template get<uint64_t>();
      // Python would keep the exact integer; beyond int64 the nearest double is what we have.
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value(json.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(json.template get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item, depth + 1));
      return list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      d.entries.reserve(json.size());
      for (auto it = json.begin(); it != json.end(); ++it) {
        d.entries.emplace_back(Value(it.key()), from_json(it.value(), depth + 1));
      }
      return dict(std::move(d));
    }
    default:
      render_fail("context holds a JSON value of unsupported type '{}'", json.type_name());
  }
}

}  // namespace tf::jinja
