#include "chat/jinja/py_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "chat/jinja/py_text.h"

namespace tf::jinja {

namespace {

void append_repr(std::string& out, const Value& v, int depth);

void append_items_repr(std::string& out, const std::vector<Value>& items, int depth) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, items[i], depth);
  }
}

void append_dict_repr(std::string& out, const Dict& d, int depth) {
  out += '{';
  for (size_t i = 0; i < d.entries.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, d.entries[i].first, depth);
    out += ": ";
    append_repr(out, d.entries[i].second, depth);
  }
  out += '}';
}

// str() and repr() differ only for strings and undefined at the top level.
void append_str(std::string& out, const Value& v, int depth) {
  // A namespace may hold itself, so depth is checked here rather than trusted from creation.
  if (depth > kMaxValueDepth) render_fail("value nests deeper than {} levels", kMaxValueDepth);
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return;
    case Value::Kind::kNone:
      out += "None";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "True" : "False";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat:
      out += py_repr_float(v.as_float());
      return;
    case Value::Kind::kString:
      out += v.as_string();
      return;
    case Value::Kind::kNamespace:
      out += "<Namespace ";
      append_dict_repr(out, v.as_namespace().attrs, depth + 1);
      out += '>';
      return;
    case Value::Kind::kFunction:
      out += "<function " + v.as_function().name + ">";
      return;
    case Value::Kind::kGenerator:
      out += "<generator object>";
      return;
    default:
      append_repr(out, v, depth);
  }
}

void append_repr(std::string& out, const Value& v, int depth) {
  if (depth > kMaxValueDepth) render_fail("value nests deeper than {} levels", kMaxValueDepth);
  switch (v.kind()) {
    case Value::Kind::kString:
      out += py_repr_string(v.as_string());
      return;
    case Value::Kind::kUndefined:
      out += "Undefined";
      return;
    case Value::Kind::kList: {
      const List& l = v.as_list();
      out += l.is_tuple ? '(' : '[';
      append_items_repr(out, l.items, depth + 1);
      if (l.is_tuple && l.items.size() == 1) out += ',';
      out += l.is_tuple ? ')' : ']';
      return;
    }
    case Value::Kind::kDict:
      append_dict_repr(out, v.as_dict(), depth + 1);
      return;
    default:
      append_str(out, v, depth);
  }
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = next_code_point(s, i);
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
      }
    } else {
      append_utf8(out, cp);
    }
  }
  out += '"';
}

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return py_repr_float(f);
}

class JsonWriter {
 public:
  JsonWriter(std::string& out, const JsonOptions& options) : out_(out), options_(options) {}

  void write(const Value& v, int level) {
    if (level > kMaxValueDepth) render_fail("value nests deeper than {} levels", kMaxValueDepth);
    switch (v.kind()) {
      case Value::Kind::kNone:
        out_ += "null";
        return;
      case Value::Kind::kBool:
        out_ += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::kInt:
        out_ += std::to_string(v.as_int());
        return;
      case Value::Kind::kFloat:
        out_ += json_float(v.as_float());
        return;
      case Value::Kind::kString:
        append_json_string(out_, v.as_string(), options_.ensure_ascii);
        return;
      case Value::Kind::kList:
        write_list(v.as_list().items, level);
        return;
      case Value::Kind::kDict:
        write_dict(v.as_dict(), level);
        return;
      default:
        render_fail("Object of type {} is not JSON serializable", type_name(v));
    }
  }

 private:
  // What Python writes between items (and after the opening bracket) at this nesting level.
  std::string newline_indent(int level) const {
    std::string s = "\n";
    for (int i = 0; i < level; ++i) s += *options_.indent;
    return s;
  }

  void write_list(const std::vector<Value>& items, int level) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    out_ += '[';
    const std::string nl = options_.indent ? newline_indent(level + 1) : "";
    out_ += nl;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) {
        out_ += options_.item_separator;
        out_ += nl;
      }
      write(items[i], level + 1);
    }
    if (options_.indent) out_ += newline_indent(level);
    out_ += ']';
  }

  std::string key_string(const Value& k) const {
    switch (k.kind()) {
      case Value::Kind::kString:
        return k.as_string();
      case Value::Kind::kFloat:
        return json_float(k.as_float());
      case Value::Kind::kBool:
        return k.as_bool() ? "true" : "false";
      case Value::Kind::kNone:
        return "null";
      case Value::Kind::kInt:
        return std::to_string(k.as_int());
      default:
        render_fail("keys must be str, int, float, bool or None, not {}", type_name(k));
    }
  }

  void write_dict(const Dict& d, int level) {
    if (d.entries.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& e : d.entries) entries.push_back(&e);
    if (options_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return less(a->first, b->first); });
    }
    out_ += '{';
    const std::string nl = options_.indent ? newline_indent(level + 1) : "";
    out_ += nl;
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i) {
        out_ += options_.item_separator;
        out_ += nl;
      }
      append_json_string(out_, key_string(entries[i]->first), options_.ensure_ascii);
      out_ += options_.key_separator;
      write(entries[i]->second, level + 1);
    }
    if (options_.indent) out_ += newline_indent(level);
    out_ += '}';
  }

  std::string& out_;
  const JsonOptions& options_;
};

}  // namespace

std::string to_str(const Value& v) {
  if (v.is_string()) return v.as_string();
  std::string out;
  append_str(out, v, 0);
  return out;
}

std::string to_repr(const Value& v) {
  std::string out;
  append_repr(out, v, 0);
  return out;
}

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  JsonWriter(out, options).write(v, 0);
  return out;
}

}  // namespace tf::jinja
