#include "chat/jinja/value.h"

#include <algorithm>
#include <cmath>

namespace tf::jinja {

namespace {

int max_depth(const std::vector<Value>& items) {
  int d = 0;
  for (const Value& v : items) d = std::max(d, v.depth());
  return d;
}

void check_depth(int depth) {
  if (depth > kMaxValueDepth) render_fail("value nests deeper than {} levels", kMaxValueDepth);
}

// Python compares int and float exactly; doubles are exact for every int a template meets.
int compare_numbers(const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) {
    const int64_t x = a.as_integral(), y = b.as_integral();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  const double x = a.as_double(), y = b.as_double();
  if (x < y) return -1;
  if (x > y) return 1;
  return x == y ? 0 : 2;  // 2: unordered (NaN)
}

}  // namespace

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : entries) {
    if (equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

void Dict::set(Value key, Value value) {
  require_hashable(key);
  check_depth(value.depth() + 1);
  depth = std::max(depth, value.depth() + 1);
  for (auto& [k, v] : entries) {
    if (equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string why) {
  Value v;
  if (!why.empty()) {
    std::get<UndefinedData>(v.data_).why = std::make_shared<const std::string>(std::move(why));
  }
  return v;
}

Value Value::none() {
  Value v;
  v.data_ = NoneData{};
  return v;
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  const int depth = max_depth(items) + 1;
  check_depth(depth);
  Value v;
  v.data_ = std::make_shared<const List>(List{std::move(items), is_tuple, depth});
  return v;
}

Value Value::dict(Dict dict) {
  int depth = 0;
  for (const auto& [k, val] : dict.entries) {
    require_hashable(k);
    depth = std::max(depth, val.depth());
  }
  dict.depth = depth + 1;
  check_depth(dict.depth);
  Value v;
  v.data_ = std::make_shared<const Dict>(std::move(dict));
  return v;
}

Value Value::ns(Namespace* ns) {
  Value v;
  v.data_ = ns;
  return v;
}

Value Value::generator(std::vector<Value> items, std::string deferred_error) {
  const int depth = max_depth(items) + 1;
  check_depth(depth);
  Value v;
  v.data_ = std::make_shared<const Generator>(
      Generator{std::move(items), std::move(deferred_error), depth});
  return v;
}

Value Value::function(std::string name, std::function<Value(Interpreter&, CallArgs&)> call) {
  Value v;
  v.data_ = std::make_shared<const Function>(Function{std::move(name), std::move(call)});
  return v;
}

double Value::as_double() const {
  if (is_float()) return as_float();
  return static_cast<double>(as_integral());
}

const std::string& Value::undefined_reason() const {
  static const std::string kGeneric = "undefined value";
  const auto& why = std::get<UndefinedData>(data_).why;
  return why ? *why : kGeneric;
}

int Value::depth() const {
  switch (kind()) {
    case Kind::kList:
      return as_list().depth;
    case Kind::kDict:
      return as_dict().depth;
    case Kind::kGenerator:
      return as_generator().depth;
    case Kind::kNamespace:
      return 1;  // a namespace's attributes are checked when assigned
    default:
      return 0;
  }
}

bool Value::same_object(const Value& other) const {
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kList:
      return std::get<ListPtr>(data_) == std::get<ListPtr>(other.data_);
    case Kind::kDict:
      return std::get<DictPtr>(data_) == std::get<DictPtr>(other.data_);
    case Kind::kNamespace:
      return std::get<NamespacePtr>(data_) == std::get<NamespacePtr>(other.data_);
    case Kind::kFunction:
      return std::get<FunctionPtr>(data_) == std::get<FunctionPtr>(other.data_);
    case Kind::kGenerator:
      return std::get<GeneratorPtr>(data_) == std::get<GeneratorPtr>(other.data_);
    default:
      return false;
  }
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.as_bool();
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_float() != 0.0;
    case Value::Kind::kString:
      return !v.as_string().empty();
    case Value::Kind::kList:
      return !v.as_list().items.empty();
    case Value::Kind::kDict:
      return !v.as_dict().entries.empty();
    case Value::Kind::kNamespace:
    case Value::Kind::kFunction:
    case Value::Kind::kGenerator:
      return true;
  }
  return false;
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.as_list().is_tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kFunction:
      return "function";
    case Value::Kind::kGenerator:
      return "generator";
  }
  return "object";
}

bool equal(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) render_fail("value nests deeper than {} levels", kMaxValueDepth);
  if (a.is_number() && b.is_number()) return compare_numbers(a, b) == 0;
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!equal(x.items[i], y.items[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (other == nullptr || !equal(v, *other, depth + 1)) return false;
      }
      return true;
    }
    default:
      return a.same_object(b);
  }
}

bool less(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) render_fail("value nests deeper than {} levels", kMaxValueDepth);
  if (a.is_undefined()) render_fail("{}", a.undefined_reason());
  if (b.is_undefined()) render_fail("{}", b.undefined_reason());
  if (a.is_number() && b.is_number()) return compare_numbers(a, b) == -1;
  if (a.is_string() && b.is_string())
    return a.as_string() < b.as_string();  // UTF-8 sorts by code point
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal(x[i], y[i], depth + 1)) return less(x[i], y[i], depth + 1);
    }
    return x.size() < y.size();
  }
  render_fail("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

void require_hashable(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kList:
      if (v.is_tuple()) {
        for (const Value& item : v.as_list().items) require_hashable(item);
        return;
      }
      [[fallthrough]];
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      render_fail("unhashable type: '{}'", type_name(v));
    default:
      return;
  }
}

}  // namespace tf::jinja
