// jinja2's built-in filters, as jinja2 3.1 defines them (tojson as transformers redefines it:
// json.dumps without HTML escaping).

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "chat/jinja/builtins.h"
#include "chat/jinja/interpreter.h"
#include "chat/jinja/params.h"
#include "chat/jinja/py_format.h"
#include "chat/jinja/py_text.h"

namespace tf::jinja {

namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);

// jinja2 filters and tests this renderer does not implement: known (so templates that merely
// contain them parse, as in jinja2) but refused when they run.
constexpr std::string_view kUnimplementedFilters[] = {
    "center",    "filesizeformat", "forceescape", "groupby", "pprint",    "random",   "slice",
    "striptags", "truncate",       "urlencode",   "urlize",  "wordcount", "wordwrap", "xmlattr"};

// item.a.b (or item[0] for "0"): jinja2's make_attrgetter, which looks up with getitem.
Value attribute_path(Interpreter& in, Value item, const Value& attribute) {
  if (!attribute.is_string()) return in.get_item(item, attribute);
  for (const std::string& part : py_split(attribute.as_string(), std::string("."), -1)) {
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
    item = in.get_item(item, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
  }
  return item;
}

// jinja2's generator filters run their body only when the result is iterated, so their errors
// surface there; the result's own behavior is the Generator's.
template <typename Compute>
Value lazily(Compute compute) {
  try {
    return Value::generator(compute());
  } catch (const TemplateError& e) {
    if (e.kind() == ErrorKind::kResourceExhausted || e.verbatim()) throw;
    return Value::generator({}, e.what());
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(code_point_count(v.as_string()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.as_list().items.size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.as_dict().entries.size());
    default:
      render_fail("object of type '{}' has no len()", type_name(v));
  }
}

// Sort/min/max/unique keys: jinja2 lower-cases strings unless case_sensitive.
Value sort_key(Interpreter& in, const Value& item, const Params& p, size_t attr_slot,
               bool case_sensitive) {
  Value key = p.given(attr_slot) ? attribute_path(in, item, p.get(attr_slot)) : item;
  if (!case_sensitive && key.is_string()) return Value(py_lower(key.as_string()));
  return key;
}

std::vector<Value> sorted(Interpreter& in, const Value& seq, const Params& p, size_t attr_slot,
                          bool case_sensitive, bool reverse) {
  std::vector<Value> items = in.iterate(seq);
  std::vector<std::pair<Value, size_t>> keyed;
  keyed.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    keyed.emplace_back(sort_key(in, items[i], p, attr_slot, case_sensitive), i);
  }
  in.charge(static_cast<int64_t>(items.size()) * 8);
  // Python's sort is stable, also in reverse.
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less(b.first, a.first) : less(a.first, b.first);
  });
  std::vector<Value> out;
  out.reserve(items.size());
  for (const auto& [k, i] : keyed) out.push_back(items[i]);
  return out;
}

Value html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '"':
        out += "&#34;";
        break;
      default:
        out += c;
    }
  }
  return Value(std::move(out));
}

// Python's float(str): surrounding whitespace, a sign, digits with single underscores between
// them, inf/infinity/nan in any case.
std::optional<double> parse_py_float(std::string_view s) {
  std::string t = py_strip(s, StripSide::kBoth);
  std::string clean;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_') {
      const bool between = i > 0 && i + 1 < t.size() &&
                           std::isdigit(static_cast<unsigned char>(t[i - 1])) &&
                           std::isdigit(static_cast<unsigned char>(t[i + 1]));
      if (!between) return std::nullopt;
      continue;
    }
    clean += t[i];
  }
  if (clean.empty()) return std::nullopt;
  std::string lower = py_lower(clean);
  const size_t sign = (lower[0] == '+' || lower[0] == '-') ? 1 : 0;
  const std::string body = lower.substr(sign);
  if (body == "inf" || body == "infinity" || body == "nan") {
    const double v = body == "nan" ? NAN : INFINITY;
    return lower[0] == '-' ? -v : v;
  }
  // Only decimal digits, one dot, an exponent: no hex floats or other strtod extensions.
  if (body.find_first_not_of("0123456789.e+-") != std::string::npos) return std::nullopt;
  if (body.empty() || !(std::isdigit(static_cast<unsigned char>(body[0])) || body[0] == '.')) {
    return std::nullopt;
  }
  char* end = nullptr;
  const double v = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return v;
}

// Python's int(str, base).
std::optional<int64_t> parse_py_int(std::string_view s, int64_t base) {
  std::string t = py_strip(s, StripSide::kBoth);
  bool negative = false;
  size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) negative = t[i++] == '-';
  if (i + 1 < t.size() && t[i] == '0') {
    const char p = static_cast<char>(std::tolower(t[i + 1]));
    const int64_t prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefixed && (base == prefixed || base == 0)) {
      base = prefixed;
      i += 2;
      if (i < t.size() && t[i] == '_') ++i;
    }
  }
  if (base == 0) base = 10;
  if (base < 2 || base > 36 || i >= t.size()) return std::nullopt;
  __int128 v = 0;
  bool last_underscore = true;
  for (; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '_') {
      if (last_underscore) return std::nullopt;
      last_underscore = true;
      continue;
    }
    const int d = std::isdigit(static_cast<unsigned char>(c))   ? c - '0'
                  : std::isalpha(static_cast<unsigned char>(c)) ? std::tolower(c) - 'a' + 10
                                                                : 99;
    if (d >= base) return std::nullopt;
    v = v * base + d;
    if (v > INT64_MAX) render_fail("integer overflow (beyond 64 bits)");
    last_underscore = false;
  }
  if (last_underscore) return std::nullopt;
  return static_cast<int64_t>(negative ? -v : v);
}

// ---- filters -------------------------------------------------------------------------------

Value f_abs(Interpreter&, const Value& v, CallArgs& args) {
  Params("abs", args, {});
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_integral()) {
    if (v.as_integral() == INT64_MIN) render_fail("integer overflow (beyond 64 bits)");
    return Value(std::abs(v.as_integral()));
  }
  if (v.is_undefined()) render_fail("{}", v.undefined_reason());
  render_fail("bad operand type for abs(): '{}'", type_name(v));
}

Value f_attr(Interpreter& in, const Value& v, CallArgs& args) {
  Params p("attr", args, {"name"});
  const Value& name = p.get(0);
  if (!name.is_string()) return Value::undefined("attribute name is not a string");
  if (v.is_dict() || v.is_string() || v.is_list()) {
    bool found = false;
    Value m = bound_method(v, name.as_string(), found);
    return found ? m : Value::undefined(fmt::format("no attribute '{}'", name.as_string()));
  }
  return in.get_attr(v, name.as_string());
}

Value f_capitalize(Interpreter&, const Value& v, CallArgs& args) {
  Params("capitalize", args, {});
  return Value(py_capitalize(to_str(v)));
}

Value f_length(Interpreter&, const Value& v, CallArgs& args) {
  Params("length", args, {});
  return Value(length(v));
}

Value f_default(Interpreter&, const Value& v, CallArgs& args) {
  Params p("default", args, {"default_value", "boolean"});
  const bool use_default = v.is_undefined() || (p.get_bool(1, false) && !truthy(v));
  return use_default ? p.get_or(0, Value("")) : v;
}

Value f_dictsort(Interpreter& in, const Value& v, CallArgs& args) {
  Params p("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) render_fail("dictsort: can only sort a mapping, not '{}'", type_name(v));
  const std::string by = p.get_str(1).value_or("key");
  if (by != "key" && by != "value") render_fail("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> pairs;
  for (const auto& [k, val] : v.as_dict().entries) pairs.push_back(Value::list({k, val}, true));
  const bool case_sensitive = p.get_bool(0, false);
  const size_t pos = by == "key" ? 0 : 1;
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < pairs.size(); ++i) {
    Value key = pairs[i].as_list().items[pos];
    if (!case_sensitive && key.is_string()) key = Value(py_lower(key.as_string()));
    keyed.emplace_back(std::move(key), i);
  }
  in.charge(static_cast<int64_t>(pairs.size()) * 8);
  const bool reverse = p.get_bool(2, false);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less(b.first, a.first) : less(a.first, b.first);
  });
  std::vector<Value> out;
  for (const auto& [k, i] : keyed) out.push_back(pairs[i]);
  return Value::list(std::move(out));
}

Value f_escape(Interpreter&, const Value& v, CallArgs& args) {
  Params("escape", args, {});
  return html_escape(to_str(v));
}

Value f_first(Interpreter& in, const Value& v, CallArgs& args) {
  Params("first", args, {});
  if (v.is_list()) {
    const auto& items = v.as_list().items;
    return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
  }
  const std::vector<Value> items = in.iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Interpreter& in, const Value& v, CallArgs& args) {
  Params("last", args, {});
  if (v.is_generator()) render_fail("'generator' object is not reversible");
  if (v.is_list()) {
    const auto& items = v.as_list().items;
    return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
  }
  const std::vector<Value> items = in.iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_float(Interpreter&, const Value& v, CallArgs& args) {
  Params p("float", args, {"default"});
  const Value fallback = p.get_or(0, Value(0.0));
  if (v.is_undefined()) render_fail("{}", v.undefined_reason());
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    if (auto f = parse_py_float(v.as_string())) return Value(*f);
  }
  return fallback;
}

Value f_int(Interpreter&, const Value& v, CallArgs& args) {
  Params p("int", args, {"default", "base"});
  const Value fallback = p.get_or(0, Value(int64_t{0}));
  if (v.is_undefined()) render_fail("{}", v.undefined_reason());
  if (v.is_integral()) return Value(v.as_integral());
  double f = 0;
  if (v.is_float()) {
    f = v.as_float();
  } else if (v.is_string()) {
    if (auto i = parse_py_int(v.as_string(), p.get_int(1, 10))) return Value(*i);
    // jinja2's quirk: "42.23"|int is 42.
    const auto parsed = parse_py_float(v.as_string());
    if (!parsed) return fallback;
    f = *parsed;
  } else {
    return fallback;
  }
  if (std::isnan(f)) return fallback;
  if (std::isinf(f)) render_fail("cannot convert float infinity to integer");
  if (std::fabs(f) >= 9.2e18) render_fail("integer overflow (beyond 64 bits)");
  return Value(static_cast<int64_t>(f));
}

Value f_items(Interpreter&, const Value& v, CallArgs& args) {
  Params("items", args, {});
  return lazily([&] {
    std::vector<Value> out;
    if (v.is_undefined()) return out;
    if (!v.is_dict()) render_fail("Can only get item pairs from a mapping.");
    for (const auto& [k, val] : v.as_dict().entries) out.push_back(Value::list({k, val}, true));
    return out;
  });
}

Value f_join(Interpreter& in, const Value& v, CallArgs& args) {
  Params p("join", args, {"d", "attribute"});
  const std::string sep = to_str(p.get_or(0, Value("")));
  std::string out;
  bool first = true;
  for (const Value& item : in.iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(p.given(1) ? attribute_path(in, item, p.get(1)) : item);
    in.check_string_size(out.size());
  }
  return Value(std::move(out));
}

Value f_list(Interpreter& in, const Value& v, CallArgs& args) {
  Params("list", args, {});
  return Value::list(in.iterate(v));
}

Value f_lower(Interpreter&, const Value& v, CallArgs& args) {
  Params("lower", args, {});
  return Value(py_lower(to_str(v)));
}

Value f_upper(Interpreter&, const Value& v, CallArgs& args) {
  Params("upper", args, {});
  return Value(py_upper(to_str(v)));
}

Value f_map(Interpreter& in, const Value& v, CallArgs& args) {
  return lazily([&] {
    std::vector<Value> out;
    if (!truthy(v)) return out;  // jinja2 checks `if value:` before anything else
    if (args.positional.empty()) {
      Params p("map", args, {"attribute", "default"});
      const Value& attribute = p.get(0);
      for (const Value& item : in.iterate(v)) {
        Value mapped = attribute_path(in, item, attribute);
        if (mapped.is_undefined() && p.given(1)) mapped = p.get(1);
        out.push_back(std::move(mapped));
      }
      return out;
    }
    if (!args.positional[0].is_string()) render_fail("map: the filter name must be a string");
    const std::string name = args.positional[0].as_string();
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const Value& item : in.iterate(v)) {
      CallArgs each = rest;
      out.push_back(apply_filter(in, name, item, each));
    }
    return out;
  });
}

Value min_max(Interpreter& in, const Value& v, CallArgs& args, bool want_max) {
  Params p(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = p.get_bool(0, false);
  const std::vector<Value> items = in.iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(in, items[0], p, 1, case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = sort_key(in, items[i], p, 1, case_sensitive);
    if (want_max ? less(best_key, key) : less(key, best_key)) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Value f_max(Interpreter& in, const Value& v, CallArgs& args) {
  return min_max(in, v, args, true);
}
Value f_min(Interpreter& in, const Value& v, CallArgs& args) {
  return min_max(in, v, args, false);
}

Value f_replace(Interpreter& in, const Value& v, CallArgs& args) {
  Params p("replace", args, {"old", "new", "count"});
  std::string out = py_replace(to_str(v), to_str(p.get(0)), to_str(p.get(1)), p.get_int(2, -1));
  in.check_string_size(out.size());
  return Value(std::move(out));
}

Value f_reverse(Interpreter& in, const Value& v, CallArgs& args) {
  Params("reverse", args, {});
  if (v.is_string()) {
    std::vector<std::string> cps = code_points(v.as_string());
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
    return Value(std::move(out));
  }
  const bool reversible = v.is_list() || v.is_dict() || v.is_undefined();
  std::vector<Value> items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  // reversed() gives an iterator; what is not reversible becomes a list first.
  return reversible ? Value::generator(std::move(items)) : Value::list(std::move(items));
}

Value f_round(Interpreter&, const Value& v, CallArgs& args) {
  Params p("round", args, {"precision", "method"});
  const int64_t precision = p.get_int(0, 0);
  const std::string method = p.get_str(1).value_or("common");
  if (method != "common" && method != "ceil" && method != "floor") {
    render_fail("method must be common, ceil or floor");
  }
  if (!v.is_number()) render_fail("type {} doesn't define __round__ method", type_name(v));
  if (precision < -300 || precision > 300) render_fail("round: precision out of range");
  if (method != "common") {
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = v.as_double() * scale;
    return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
  }
  if (v.is_integral() && precision >= 0) return Value(v.as_integral());
  if (v.is_integral()) {
    // round(int, negative) rounds half to even on the exact integer.
    int64_t scale = 1;
    for (int64_t k = 0; k < -precision && scale <= INT64_MAX / 10; ++k) scale *= 10;
    const int64_t x = v.as_integral();
    int64_t q = x / scale, r = x % scale;
    if (r < 0) {
      r += scale;
      --q;
    }
    if (2 * r > scale || (2 * r == scale && q % 2 != 0)) ++q;
    return Value(q * scale);
  }
  const double x = v.as_float();
  if (!std::isfinite(x)) return Value(x);
  if (precision >= 0) {
    // Correctly rounded decimal text (half to even on the exact binary value), as Python does.
    const std::string text = fmt::format("{:.{}f}", x, precision);
    return Value(std::strtod(text.c_str(), nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(-precision));
  return Value(std::nearbyint(x / scale) * scale);
}

Value f_safe(Interpreter&, const Value& v, CallArgs& args) {
  Params("safe", args, {});
  return Value(to_str(v));
}

Value f_string(Interpreter&, const Value& v, CallArgs& args) {
  Params("string", args, {});
  return Value(to_str(v));
}

Value f_sum(Interpreter& in, const Value& v, CallArgs& args) {
  Params p("sum", args, {"attribute", "start"});
  Value total = p.get_or(1, Value(int64_t{0}));
  for (const Value& item : in.iterate(v)) {
    total = binary_op(in, BinaryOp::kAdd, total,
                      p.given(0) ? attribute_path(in, item, p.get(0)) : item);
  }
  return total;
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& args) {
  Params p("sort", args, {"reverse", "case_sensitive", "attribute"});
  return Value::list(sorted(in, v, p, 2, p.get_bool(1, false), p.get_bool(0, false)));
}

Value f_title(Interpreter&, const Value& v, CallArgs& args) {
  Params("title", args, {});
  return Value(jinja_title(to_str(v)));
}

Value f_trim(Interpreter&, const Value& v, CallArgs& args) {
  Params p("trim", args, {"chars"});
  return Value(py_strip(to_str(v), StripSide::kBoth, p.get_str(0)));
}

Value f_tojson(Interpreter& in, const Value& v, CallArgs& args) {
  Params p("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions options;
  options.ensure_ascii = p.get_bool(0, false);
  options.sort_keys = p.get_bool(3, false);
  if (p.given(1)) {
    const Value& indent = p.get(1);
    if (indent.is_string()) {
      options.indent = indent.as_string();
    } else if (indent.is_integral()) {
      options.indent =
          std::string(static_cast<size_t>(std::clamp<int64_t>(indent.as_integral(), 0, 1024)), ' ');
    } else {
      render_fail("tojson: indent must be an integer or a string");
    }
    options.item_separator = ",";
  }
  if (p.given(2)) {
    const Value& sep = p.get(2);
    if (!sep.is_list() || sep.as_list().items.size() != 2 || !sep.as_list().items[0].is_string() ||
        !sep.as_list().items[1].is_string()) {
      render_fail("tojson: separators must be a pair of strings");
    }
    options.item_separator = sep.as_list().items[0].as_string();
    options.key_separator = sep.as_list().items[1].as_string();
  }
  std::string out = to_json(v, options);
  in.check_string_size(out.size());
  in.charge(static_cast<int64_t>(out.size() / 64));
  return Value(std::move(out));
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& args) {
  return lazily([&] {
    Params p("unique", args, {"case_sensitive", "attribute"});
    const bool case_sensitive = p.get_bool(0, false);
    std::vector<Value> out, seen;
    for (const Value& item : in.iterate(v)) {
      Value key = sort_key(in, item, p, 1, case_sensitive);
      require_hashable(key);
      in.charge(static_cast<int64_t>(seen.size()));
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) {
        seen.push_back(std::move(key));
        out.push_back(item);
      }
    }
    return out;
  });
}

Value f_indent(Interpreter& in, const Value& v, CallArgs& args) {
  Params p("indent", args, {"width", "first", "blank"});
  std::string indentation;
  const Value width = p.get_or(0, Value(int64_t{4}));
  if (width.is_string()) {
    indentation = width.as_string();
  } else if (width.is_integral()) {
    indentation.assign(static_cast<size_t>(std::clamp<int64_t>(width.as_integral(), 0, 1024)), ' ');
  } else {
    render_fail("indent: width must be an integer or a string");
  }
  if (!v.is_string()) {
    if (v.is_undefined()) render_fail("{}", v.undefined_reason());
    render_fail("unsupported operand type(s) for +=: '{}' and 'str'", type_name(v));
  }
  const std::vector<std::string> lines = py_splitlines(v.as_string() + "\n", false);
  std::string out;
  if (p.get_bool(2, false)) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + indentation;
      out += lines[i];
    }
  } else {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + (lines[i].empty() ? std::string() : indentation);
      out += lines[i];
    }
  }
  if (p.get_bool(1, false)) out = indentation + out;
  in.check_string_size(out.size());
  return Value(std::move(out));
}

Value f_format(Interpreter& in, const Value& v, CallArgs& args) {
  if (!args.keyword.empty()) {
    throw TemplateError(ErrorKind::kUnsupported, "format filter with keyword arguments");
  }
  Value tuple = Value::list(args.positional, true);
  return binary_op(in, BinaryOp::kMod, Value(to_str(v)), tuple);
}

// select / reject / selectattr / rejectattr.
Value select(Interpreter& in, const Value& v, CallArgs& args, bool by_attribute, bool keep) {
  return lazily([&] {
    std::vector<Value> out;
    if (!truthy(v)) return out;  // jinja2 checks `if value:` before anything else
    size_t next = 0;
    Value attribute;
    if (by_attribute) {
      if (args.positional.empty()) render_fail("Missing parameter for attribute name");
      attribute = args.positional[next++];
    }
    std::string test;
    if (next < args.positional.size()) {
      if (!args.positional[next].is_string()) render_fail("the test name must be a string");
      test = args.positional[next++].as_string();
    }
    CallArgs test_args;
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next),
                                args.positional.end());
    test_args.keyword = args.keyword;
    for (const Value& item : in.iterate(v)) {
      const Value subject = by_attribute ? attribute_path(in, item, attribute) : item;
      bool passed;
      if (test.empty()) {
        passed = truthy(subject);
      } else {
        CallArgs each = test_args;
        passed = apply_test(in, test, subject, each);
      }
      if (passed == keep) out.push_back(item);
    }
    return out;
  });
}

// batch(n, fill_with): the items in lists of n, the last one padded.
Value f_batch(Interpreter& in, const Value& v, CallArgs& args) {
  return lazily([&] {
    Params p("batch", args, {"linecount", "fill_with"});
    const int64_t n = p.get_int(0, 0);
    if (n <= 0) render_fail("batch: linecount must be positive");
    std::vector<Value> out, row;
    for (const Value& item : in.iterate(v)) {
      row.push_back(item);
      if (static_cast<int64_t>(row.size()) == n) out.push_back(Value::list(std::exchange(row, {})));
    }
    if (!row.empty()) {
      if (p.given(1)) {
        while (static_cast<int64_t>(row.size()) < n) row.push_back(p.get(1));
      }
      out.push_back(Value::list(std::move(row)));
    }
    return out;
  });
}

Value f_select(Interpreter& in, const Value& v, CallArgs& a) {
  return select(in, v, a, false, true);
}
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) {
  return select(in, v, a, false, false);
}
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return select(in, v, a, true, true);
}
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return select(in, v, a, true, false);
}

const std::map<std::string_view, FilterFn>& filters() {
  static const std::map<std::string_view, FilterFn> table = {
      {"abs", f_abs},         {"attr", f_attr},
      {"batch", f_batch},     {"capitalize", f_capitalize},
      {"count", f_length},    {"d", f_default},
      {"default", f_default}, {"dictsort", f_dictsort},
      {"e", f_escape},        {"escape", f_escape},
      {"first", f_first},     {"float", f_float},
      {"format", f_format},   {"indent", f_indent},
      {"int", f_int},         {"items", f_items},
      {"join", f_join},       {"last", f_last},
      {"length", f_length},   {"list", f_list},
      {"lower", f_lower},     {"map", f_map},
      {"max", f_max},         {"min", f_min},
      {"reject", f_reject},   {"rejectattr", f_rejectattr},
      {"replace", f_replace}, {"reverse", f_reverse},
      {"round", f_round},     {"safe", f_safe},
      {"select", f_select},   {"selectattr", f_selectattr},
      {"sort", f_sort},       {"string", f_string},
      {"sum", f_sum},         {"title", f_title},
      {"tojson", f_tojson},   {"trim", f_trim},
      {"unique", f_unique},   {"upper", f_upper},
  };
  return table;
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return filters().count(name) != 0 ||
         std::find(std::begin(kUnimplementedFilters), std::end(kUnimplementedFilters), name) !=
             std::end(kUnimplementedFilters);
}

Value apply_filter(Interpreter& in, std::string_view name, const Value& input, CallArgs& args) {
  const auto it = filters().find(name);
  if (it != filters().end()) return it->second(in, input, args);
  if (is_known_filter(name)) {
    throw TemplateError(ErrorKind::kUnsupported, fmt::format("unsupported filter '{}'", name));
  }
  throw TemplateError(ErrorKind::kUnsupported, fmt::format("unknown filter '{}'", name));
}

}  // namespace tf::jinja
