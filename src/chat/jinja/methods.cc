// The methods of str, dict and list that chat templates call (message.content.strip(),
// tool.items(), ...), and the globals transformers renders with. Mutating methods are refused,
// as jinja2's ImmutableSandboxedEnvironment refuses them.

#include <algorithm>
#include <ctime>

#include "chat/jinja/builtins.h"
#include "chat/jinja/interpreter.h"
#include "chat/jinja/params.h"
#include "chat/jinja/py_format.h"
#include "chat/jinja/py_text.h"

namespace tf::jinja {

namespace {

constexpr std::string_view kStrMethods[] = {
    "capitalize", "center",     "count",        "endswith",     "find",    "format",
    "index",      "isalnum",    "isalpha",      "isdecimal",    "isdigit", "islower",
    "isnumeric",  "isspace",    "isupper",      "join",         "ljust",   "lower",
    "lstrip",     "partition",  "removeprefix", "removesuffix", "replace", "rfind",
    "rindex",     "rjust",      "rpartition",   "rsplit",       "rstrip",  "split",
    "splitlines", "startswith", "strip",        "title",        "upper",   "zfill"};
constexpr std::string_view kDictMethods[] = {"copy", "get", "items", "keys", "values"};
constexpr std::string_view kDictMutators[] = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr std::string_view kListMethods[] = {"copy", "count", "index"};
constexpr std::string_view kListMutators[] = {"append", "clear",  "extend",  "insert",
                                              "pop",    "remove", "reverse", "sort"};

template <size_t N>
bool in_table(const std::string_view (&table)[N], std::string_view name) {
  return std::find(std::begin(table), std::end(table), name) != std::end(table);
}

std::string unsafe_message(const Value& obj, std::string_view name) {
  return fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj));
}

bool is_digit_cp(char32_t cp) {
  return (cp >= '0' && cp <= '9') || (cp >= 0x660 && cp <= 0x669) || (cp >= 0x6F0 && cp <= 0x6F9) ||
         (cp >= 0x966 && cp <= 0x96F) || (cp >= 0xFF10 && cp <= 0xFF19) || cp == 0xB2 ||
         cp == 0xB3 || cp == 0xB9;
}

// Close to str.isalpha() for the scripts chat text uses: letters, not punctuation or symbols.
bool is_alpha_cp(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  if (is_space(cp) || is_digit_cp(cp)) return false;
  if (cp < 0xC0) return cp == 0xAA || cp == 0xB5 || cp == 0xBA;
  if (cp == 0xD7 || cp == 0xF7) return false;
  if ((cp >= 0x2000 && cp <= 0x2BFF) || (cp >= 0x3000 && cp <= 0x303F) ||
      (cp >= 0xFF00 && cp <= 0xFF20) || (cp >= 0xFE30 && cp <= 0xFE4F) ||
      (cp >= 0x1F000 && cp <= 0x1FAFF) || (cp >= 0xD800 && cp <= 0xF8FF)) {
    return false;
  }
  return true;
}

template <typename Pred>
bool all_code_points(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();) {
    if (!pred(next_code_point(s, i))) return false;
  }
  return true;
}

// The code points [start, end) of s, with Python's slice clamping, and the code point offset.
std::string_view code_point_range(const std::string& s, const Params& p, size_t start_slot,
                                  size_t* first_cp = nullptr) {
  const CodePointOffsets off(s);
  const int64_t n = static_cast<int64_t>(off.count());
  auto clamp = [&](int64_t i) { return i < 0 ? std::max<int64_t>(0, i + n) : std::min(i, n); };
  const int64_t a = clamp(p.get_int(start_slot, 0));
  const int64_t b = std::max(a, clamp(p.get_int(start_slot + 1, n)));
  if (first_cp) *first_cp = static_cast<size_t>(a);
  return std::string_view(s).substr(off[static_cast<size_t>(a)],
                                    off[static_cast<size_t>(b)] - off[static_cast<size_t>(a)]);
}

const std::string& str_arg(const Params& p, size_t i, const char* method) {
  const Value& v = p.get(i);
  if (!v.is_string()) render_fail("{}() argument must be str, not {}", method, type_name(v));
  return v.as_string();
}

std::vector<std::string> affixes(const Value& v, const char* method) {
  std::vector<std::string> out;
  if (v.is_string()) {
    out.push_back(v.as_string());
  } else if (v.is_tuple()) {
    for (const Value& item : v.as_list().items) {
      if (!item.is_string()) render_fail("tuple for {} must only contain str", method);
      out.push_back(item.as_string());
    }
  } else {
    render_fail("{} first arg must be str or a tuple of str, not {}", method, type_name(v));
  }
  return out;
}

Value string_list(Interpreter& in, std::vector<std::string> parts, bool tuple = false) {
  in.charge(static_cast<int64_t>(parts.size()));
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& part : parts) out.emplace_back(std::move(part));
  return Value::list(std::move(out), tuple);
}

std::string pad(const std::string& s, int64_t width, const std::string& fill, char how) {
  const int64_t len = static_cast<int64_t>(code_point_count(s));
  if (width <= len) return s;
  const int64_t margin = std::min<int64_t>(width - len, 1 << 24);
  int64_t left = how == 'r' ? margin : how == 'l' ? 0 : margin / 2 + (margin & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < margin - left; ++i) out += fill;
  return out;
}

// str.format(): {} {0} {name}, attribute and index lookups, !r/!s, and format specs as Python's
// mini-language shares them with fmt.
std::string format_string(Interpreter& in, const std::string& s, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '}') {
      if (i + 1 < s.size() && s[i + 1] == '}')
        ++i;
      else
        render_fail("{}", "Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < s.size() && s[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = s.find('}', i + 1);
    if (close == std::string::npos) render_fail("{}", "expected '}' before end of string");
    std::string field = s.substr(i + 1, close - i - 1);
    i = close;
    if (field.find('{') != std::string::npos) {
      throw TemplateError(ErrorKind::kUnsupported,
                          "nested fields in str.format() are not supported");
    }
    std::string spec, conversion;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = field.substr(bang + 1);
      field.resize(bang);
    }
    const size_t name_end = std::min(field.find('.'), field.find('['));
    const std::string head = field.substr(0, name_end);
    Value v;
    if (head.empty() || std::all_of(head.begin(), head.end(), ::isdigit)) {
      const size_t index = head.empty() ? auto_index++ : std::stoul(head);
      if (index >= args.positional.size()) {
        render_fail("Replacement index {} out of range for positional args tuple", index);
      }
      v = args.positional[index];
    } else {
      const auto kw = std::find_if(args.keyword.begin(), args.keyword.end(),
                                   [&](const auto& p) { return p.first == head; });
      if (kw == args.keyword.end()) render_fail("'{}'", head);
      v = kw->second;
    }
    for (size_t k = name_end; k < field.size();) {
      if (field[k] == '.') {
        const size_t end = std::min(field.find('.', k + 1), field.find('[', k + 1));
        v = in.get_attr(v, field.substr(k + 1, end - k - 1));
        k = end;
      } else {
        const size_t end = field.find(']', k);
        if (end == std::string::npos) render_fail("Missing ']' in format string");
        const std::string key = field.substr(k + 1, end - k - 1);
        const bool digits = !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit);
        v = in.get_item(v, digits ? Value(static_cast<int64_t>(std::stoll(key))) : Value(key));
        k = end + 1;
      }
    }
    if (conversion == "r" || conversion == "a") {
      v = Value(to_repr(v));
    } else if (conversion == "s") {
      v = Value(to_str(v));
    } else if (!conversion.empty()) {
      render_fail("Unknown conversion specifier {}", conversion);
    }
    if (spec.empty()) {
      out += to_str(v);
      continue;
    }
    try {
      const std::string f = "{:" + spec + "}";
      const char type = spec.back();
      const bool float_type = std::string_view("eEfFgG%").find(type) != std::string_view::npos;
      if (v.is_string()) {
        out += fmt::format(fmt::runtime(f), v.as_string());
      } else if (v.is_float() || (v.is_integral() && float_type)) {
        out += fmt::format(fmt::runtime(f), v.as_double());
      } else if (v.is_integral()) {
        out += fmt::format(fmt::runtime(f), v.as_integral());
      } else {
        render_fail("unsupported format string passed to {}.__format__", type_name(v));
      }
    } catch (const fmt::format_error&) {
      render_fail("Invalid format specifier '{}'", spec);
    }
    in.check_string_size(out.size());
  }
  return out;
}

bool string_method(Interpreter& in, const Value& obj, std::string_view name, CallArgs& args,
                   Value& out) {
  const std::string& s = obj.as_string();
  const std::string m(name);
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Params p(m, args, {"chars"});
    const StripSide side = name == "strip"    ? StripSide::kBoth
                           : name == "lstrip" ? StripSide::kLeft
                                              : StripSide::kRight;
    out = Value(py_strip(s, side, p.get_str(0)));
  } else if (name == "split" || name == "rsplit") {
    Params p(m, args, {"sep", "maxsplit"});
    const auto sep = p.get_str(0);
    if (sep && sep->empty()) render_fail("empty separator");
    out = string_list(in, py_split(s, sep, p.get_int(1, -1), name == "rsplit"));
  } else if (name == "splitlines") {
    Params p(m, args, {"keepends"});
    out = string_list(in, py_splitlines(s, p.get_bool(0, false)));
  } else if (name == "startswith" || name == "endswith") {
    Params p(m, args, {"prefix", "start", "end"});
    const std::string_view range = code_point_range(s, p, 1);
    bool match = false;
    for (const std::string& a : affixes(p.get(0), m.c_str())) {
      match = match || (range.size() >= a.size() &&
                        (name == "startswith" ? range.substr(0, a.size()) == a
                                              : range.substr(range.size() - a.size()) == a));
    }
    out = Value(match);
  } else if (name == "upper") {
    Params(m, args, {});
    out = Value(py_upper(s));
  } else if (name == "lower") {
    Params(m, args, {});
    out = Value(py_lower(s));
  } else if (name == "title") {
    Params(m, args, {});
    out = Value(py_title(s));
  } else if (name == "capitalize") {
    Params(m, args, {});
    out = Value(py_capitalize(s));
  } else if (name == "replace") {
    Params p(m, args, {"old", "new", "count"});
    std::string r =
        py_replace(s, str_arg(p, 0, "replace"), str_arg(p, 1, "replace"), p.get_int(2, -1));
    in.check_string_size(r.size());
    out = Value(std::move(r));
  } else if (name == "find" || name == "rfind" || name == "index" || name == "rindex" ||
             name == "count") {
    Params p(m, args, {"sub", "start", "end"});
    const std::string& sub = str_arg(p, 0, m.c_str());
    size_t first_cp = 0;
    const std::string_view range = code_point_range(s, p, 1, &first_cp);
    if (name == "count") {
      int64_t n = 0;
      if (sub.empty()) {
        n = static_cast<int64_t>(code_point_count(range)) + 1;
      } else {
        for (size_t at = range.find(sub); at != std::string_view::npos;
             at = range.find(sub, at + sub.size())) {
          ++n;
        }
      }
      out = Value(n);
    } else {
      const bool from_right = name[0] == 'r';
      const size_t at = from_right ? range.rfind(sub) : range.find(sub);
      if (at == std::string_view::npos) {
        if (name == "index" || name == "rindex") render_fail("substring not found");
        out = Value(int64_t{-1});
      } else {
        out = Value(static_cast<int64_t>(first_cp + code_point_count(range.substr(0, at))));
      }
    }
  } else if (name == "join") {
    Params p(m, args, {"iterable"});
    std::string r;
    size_t k = 0;
    for (const Value& item : in.iterate(p.get(0))) {
      if (!item.is_string()) {
        render_fail("sequence item {}: expected str instance, {} found", k, type_name(item));
      }
      if (k++) r += s;
      r += item.as_string();
      in.check_string_size(r.size());
    }
    out = Value(std::move(r));
  } else if (name == "format") {
    out = Value(format_string(in, s, args));
  } else if (name.substr(0, 2) == "is") {
    Params(m, args, {});
    bool r = false;
    if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") {
      r = all_code_points(s, is_digit_cp);
    } else if (name == "isalpha") {
      r = all_code_points(s, is_alpha_cp);
    } else if (name == "isalnum") {
      r = all_code_points(s, [](char32_t cp) { return is_alpha_cp(cp) || is_digit_cp(cp); });
    } else if (name == "isspace") {
      r = all_code_points(s, is_space);
    } else if (name == "isupper") {
      r = py_isupper(s);
    } else if (name == "islower") {
      r = py_islower(s);
    }
    out = Value(r);
  } else if (name == "removeprefix" || name == "removesuffix") {
    Params p(m, args, {"affix"});
    const std::string& a = str_arg(p, 0, m.c_str());
    const bool prefix = name == "removeprefix";
    const bool has =
        s.size() >= a.size() && (prefix ? s.compare(0, a.size(), a) == 0
                                        : s.compare(s.size() - a.size(), a.size(), a) == 0);
    out = !has ? obj : Value(prefix ? s.substr(a.size()) : s.substr(0, s.size() - a.size()));
  } else if (name == "ljust" || name == "rjust" || name == "center") {
    Params p(m, args, {"width", "fillchar"});
    const std::string fill = p.get_str(1).value_or(" ");
    if (code_point_count(fill) != 1)
      render_fail("The fill character must be exactly one character long");
    out = Value(pad(s, p.get_int(0, 0), fill, name == "ljust" ? 'l' : name == "rjust" ? 'r' : 'c'));
  } else if (name == "zfill") {
    Params p(m, args, {"width"});
    const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
    std::string padded = pad(s.substr(sign ? 1 : 0), p.get_int(0, 0) - (sign ? 1 : 0), "0", 'r');
    out = Value(sign ? s.substr(0, 1) + padded : padded);
  } else if (name == "partition" || name == "rpartition") {
    Params p(m, args, {"sep"});
    const std::string& sep = str_arg(p, 0, m.c_str());
    if (sep.empty()) render_fail("empty separator");
    const size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos) {
      out = name == "partition" ? string_list(in, {s, "", ""}, true)
                                : string_list(in, {"", "", s}, true);
    } else {
      out = string_list(in, {s.substr(0, at), sep, s.substr(at + sep.size())}, true);
    }
  } else {
    return false;
  }
  return true;
}

bool dict_method(Interpreter& in, const Value& obj, std::string_view name, CallArgs& args,
                 Value& out) {
  const Dict& d = obj.as_dict();
  const std::string m(name);
  if (name == "items" || name == "keys" || name == "values") {
    Params(m, args, {});
    std::vector<Value> items;
    items.reserve(d.entries.size());
    for (const auto& [k, v] : d.entries) {
      items.push_back(name == "items" ? Value::list({k, v}, true) : name == "keys" ? k : v);
    }
    in.charge(static_cast<int64_t>(items.size()));
    out = Value::list(std::move(items));
  } else if (name == "get") {
    Params p(m, args, {"key", "default"});
    require_hashable(p.get(0));
    const Value* v = d.find(p.get(0));
    out = v ? *v : p.get_or(1, Value::none());
  } else if (name == "copy") {
    Params(m, args, {});
    out = obj;
  } else {
    return false;
  }
  return true;
}

bool list_method(Interpreter&, const Value& obj, std::string_view name, CallArgs& args,
                 Value& out) {
  const auto& items = obj.as_list().items;
  const std::string m(name);
  if (name == "index" || name == "count") {
    Params p(m, args, {"value"});
    int64_t n = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!equal(items[i], p.get(0))) continue;
      if (name == "index") {
        out = Value(static_cast<int64_t>(i));
        return true;
      }
      ++n;
    }
    if (name == "index") render_fail("{} is not in list", to_repr(p.get(0)));
    out = Value(n);
  } else if (name == "copy") {
    Params(m, args, {});
    out = obj;
  } else {
    return false;
  }
  return true;
}

bool is_mutator(const Value& obj, std::string_view name) {
  return (obj.is_dict() && in_table(kDictMutators, name)) ||
         (obj.is_list() && in_table(kListMutators, name));
}

bool has_method(const Value& obj, std::string_view name) {
  return (obj.is_string() && in_table(kStrMethods, name)) ||
         (obj.is_dict() && in_table(kDictMethods, name)) ||
         (obj.is_list() && !obj.is_tuple() && in_table(kListMethods, name)) ||
         (obj.is_tuple() && (name == "index" || name == "count"));
}

// dict(...) and namespace(...): a mapping or pairs, then keyword arguments.
Dict dict_from_args(Interpreter& in, const char* function, CallArgs& args) {
  if (args.positional.size() > 1) {
    render_fail("{} expected at most 1 argument, got {}", function, args.positional.size());
  }
  Dict d;
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict()) {
      d = source.as_dict();
    } else {
      for (const Value& pair : in.iterate(source)) {
        const std::vector<Value> kv = in.iterate(pair);
        if (kv.size() != 2) {
          render_fail("dictionary update sequence element has length {}; 2 is required", kv.size());
        }
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : args.keyword) d.set(Value(k), v);
  return d;
}

Value g_range(Interpreter& in, CallArgs& args) {
  if (!args.keyword.empty()) render_fail("range() takes no keyword arguments");
  const auto& a = args.positional;
  if (a.empty() || a.size() > 3) render_fail("range expected 1 to 3 arguments, got {}", a.size());
  for (const Value& v : a) {
    if (!v.is_integral())
      render_fail("'{}' object cannot be interpreted as an integer", type_name(v));
  }
  const int64_t start = a.size() == 1 ? 0 : a[0].as_integral();
  const int64_t stop = a.size() == 1 ? a[0].as_integral() : a[1].as_integral();
  const int64_t step = a.size() == 3 ? a[2].as_integral() : 1;
  if (step == 0) render_fail("range() arg 3 must not be zero");
  const __int128 span = step > 0 ? __int128{stop} - start : __int128{start} - stop;
  const __int128 abs_step = step > 0 ? __int128{step} : -__int128{step};
  const __int128 count = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
  // jinja2's sandbox refuses bigger ranges.
  if (count > 100000) {
    render_fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  in.charge(static_cast<int64_t>(count));
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) out.emplace_back(start + i * step);
  return Value::list(std::move(out));
}

Value g_namespace(Interpreter& in, CallArgs& args) {
  return in.new_namespace(dict_from_args(in, "namespace", args));
}

Value g_dict(Interpreter& in, CallArgs& args) {
  return Value::dict(dict_from_args(in, "dict", args));
}

Value g_raise_exception(Interpreter&, CallArgs& args) {
  Params p("raise_exception", args, {"message"});
  throw TemplateError(ErrorKind::kInvalidArgument, to_str(p.get(0)), /*verbatim=*/true);
}

Value g_strftime_now(Interpreter&, CallArgs& args) {
  Params p("strftime_now", args, {"format"});
  const std::string format = p.get_str(0).value_or("");
  if (format.size() > 256) render_fail("strftime_now: format longer than 256 characters");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[2048];
  const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &local);
  return Value(std::string(buf, n));
}

}  // namespace

bool call_method(Interpreter& in, const Value& obj, std::string_view name, CallArgs& args,
                 Value& result) {
  if (is_mutator(obj, name)) render_fail("{}", unsafe_message(obj, name));
  if (!has_method(obj, name)) return false;
  if (obj.is_string()) return string_method(in, obj, name, args, result);
  if (obj.is_dict()) return dict_method(in, obj, name, args, result);
  return list_method(in, obj, name, args, result);
}

Value bound_method(const Value& obj, std::string_view name, bool& found) {
  found = true;
  if (is_mutator(obj, name)) return Value::undefined(unsafe_message(obj, name));
  if (!has_method(obj, name)) {
    found = false;
    return Value();
  }
  const std::string method(name);
  return Value::function(method, [obj, method](Interpreter& in, CallArgs& args) {
    Value result;
    call_method(in, obj, method, args, result);
    return result;
  });
}

Dict make_globals() {
  Dict d;
  d.entries.emplace_back(Value("range"), Value::function("range", g_range));
  d.entries.emplace_back(Value("namespace"), Value::function("namespace", g_namespace));
  d.entries.emplace_back(Value("dict"), Value::function("dict", g_dict));
  d.entries.emplace_back(Value("raise_exception"),
                         Value::function("raise_exception", g_raise_exception));
  d.entries.emplace_back(Value("strftime_now"), Value::function("strftime_now", g_strftime_now));
  return d;
}

}  // namespace tf::jinja
