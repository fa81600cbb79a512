#include "sampling/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "sampling/regex_grammar.h"
#include "tokenizer/unicode.h"

namespace tf {
namespace {

using ojson = nlohmann::ordered_json;

constexpr int kMaxDepth = 100;
constexpr uint32_t kMaxCount = 1000;  // GBNF's limit on repetition counts
constexpr int64_t kMaxBound = 999'999'999'999'999'999;

// Keywords that describe and never constrain.
const std::set<std::string> kAnnotations = {
    "title", "description", "default",         "examples",         "$schema",   "$id",
    "id",    "$comment",    "deprecated",      "readOnly",         "writeOnly", "discriminator",
    "$defs", "definitions", "contentEncoding", "contentMediaType", "example",   "x-order"};

const std::set<std::string> kKnown = {"type",
                                      "enum",
                                      "const",
                                      "properties",
                                      "required",
                                      "additionalProperties",
                                      "items",
                                      "prefixItems",
                                      "additionalItems",
                                      "minItems",
                                      "maxItems",
                                      "uniqueItems",
                                      "anyOf",
                                      "oneOf",
                                      "allOf",
                                      "$ref",
                                      "pattern",
                                      "format",
                                      "minLength",
                                      "maxLength",
                                      "minimum",
                                      "maximum",
                                      "exclusiveMinimum",
                                      "exclusiveMaximum",
                                      "nullable",
                                      "minProperties",
                                      "maxProperties"};

// Type bits, for oneOf's overlap test and enum filtering.
enum : unsigned {
  kNull = 1,
  kBool = 2,
  kInt = 4,
  kFrac = 8,  // numbers that are not integers
  kString = 16,
  kArray = 32,
  kObject = 64,
  kAny = 127
};

unsigned type_bit(const std::string& t) {
  if (t == "null") return kNull;
  if (t == "boolean") return kBool;
  if (t == "integer") return kInt;
  if (t == "number") return kInt | kFrac;
  if (t == "string") return kString;
  if (t == "array") return kArray;
  if (t == "object") return kObject;
  return 0;
}

unsigned value_bit(const ojson& v) {
  if (v.is_null()) return kNull;
  if (v.is_boolean()) return kBool;
  if (v.is_number_integer()) return kInt;
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return std::floor(d) == d ? kInt : kFrac;
  }
  if (v.is_string()) return kString;
  if (v.is_array()) return kArray;
  return kObject;
}

std::string nines(size_t n) {
  return std::string(n, '9');
}
std::string pow10(size_t n) {
  std::string out(n + 1, '0');
  out[0] = '1';
  return out;
}

std::string digit_class(char lo, char hi) {
  if (lo == hi) return std::string("\"") + lo + "\"";
  return fmt::format("[{}-{}]", lo, hi);
}

std::string alternatives(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
  return out + ")";
}

// The numerals of x..y, strings of equal length (leading zeros allowed: they are suffixes).
std::string same_length_range(const std::string& x, const std::string& y) {
  const size_t n = x.size();
  if (n == 0) return "\"\"";
  if (x == y) return "\"" + x + "\"";
  if (x[0] == y[0]) {
    if (n == 1) return digit_class(x[0], x[0]);
    return std::string("\"") + x[0] + "\" " + same_length_range(x.substr(1), y.substr(1));
  }
  const bool x_zeros = x.find_first_not_of('0', 1) == std::string::npos;
  const bool y_nines = y.find_first_not_of('9', 1) == std::string::npos;
  const std::string any_rest = n > 1 ? fmt::format(" [0-9]{{{}}}", n - 1) : "";
  std::vector<std::string> alts;
  char lo_mid = static_cast<char>(x[0] + 1), hi_mid = static_cast<char>(y[0] - 1);
  if (x_zeros) {
    lo_mid = x[0];
  } else {
    alts.push_back(std::string("\"") + x[0] + "\" " + same_length_range(x.substr(1), nines(n - 1)));
  }
  if (y_nines) hi_mid = y[0];
  if (lo_mid <= hi_mid) alts.push_back(digit_class(lo_mid, hi_mid) + any_rest);
  if (!y_nines)
    alts.push_back(std::string("\"") + y[0] + "\" " +
                   same_length_range(std::string(n - 1, '0'), y.substr(1)));
  return alternatives(alts);
}

// The numerals without leading zeros of a..b (decimal strings, a <= b).
std::string nonneg_range(const std::string& a, const std::string& b) {
  std::vector<std::string> alts;
  for (size_t d = a.size(); d <= b.size(); ++d) {
    const std::string lo = d == a.size() ? a : pow10(d - 1);
    const std::string hi = d == b.size() ? b : nines(d);
    alts.push_back(same_length_range(lo, hi));
  }
  return alternatives(alts);
}

// The numerals >= a: a's length through a's digits, then longer ones (up to 16 digits, as the
// plain integer rule, or a's length + 1 when a is longer).
std::string at_least(const std::string& a) {
  const std::string same = nonneg_range(a, nines(a.size()));
  const size_t more = std::max<size_t>(a.size(), 15);
  return fmt::format("({} | [1-9] [0-9]{{{},{}}})", same, a.size(), more);
}

std::string dec(int64_t v) {
  return std::to_string(v);
}
std::string magnitude(int64_t v) {  // |v| as a decimal string, v > INT64_MIN by the bounds check
  return std::to_string(v < 0 ? -v : v);
}

// Integers in [lo, hi] (either side open when absent).
std::string int_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> alts;
  // Negative values: "-" and a magnitude in [max(1, -hi), -lo].
  if (!lo || *lo < 0) {
    const int64_t mmin = hi && *hi < 0 ? -*hi : 1;
    if (lo)
      alts.push_back("\"-\" " + nonneg_range(dec(mmin), magnitude(*lo)));
    else
      alts.push_back("\"-\" " + at_least(dec(mmin)));
  }
  if (!hi || *hi >= 0) {
    const int64_t a = lo && *lo > 0 ? *lo : 0;
    alts.push_back(hi ? nonneg_range(dec(a), dec(*hi)) : at_least(dec(a)));
  }
  return alternatives(alts);
}

// Numbers (no exponent) in [lo, hi], integer bounds.
std::string number_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  const std::string frac = "(\".\" [0-9]{1,15})?", zero_frac = "(\".\" \"0\"{1,15})?";
  std::vector<std::string> alts;
  if (!hi || *hi >= 0) {
    const int64_t a = lo && *lo > 0 ? *lo : 0;
    if (!hi)
      alts.push_back(at_least(dec(a)) + " " + frac);
    else if (*hi > a)
      alts.push_back(fmt::format("({} {} | \"{}\" {})", nonneg_range(dec(a), dec(*hi - 1)), frac,
                                 *hi, zero_frac));
    else
      alts.push_back(fmt::format("\"{}\" {}", *hi, zero_frac));
  }
  if (!lo || *lo < 0) {
    // Magnitudes y = -x in [ymin, ymax].
    const int64_t ymin = hi && *hi < 0 ? -*hi : 0;
    if (!lo)
      alts.push_back("\"-\" " + at_least(dec(ymin)) + " " + frac);
    else if (-*lo > ymin)
      alts.push_back(fmt::format("\"-\" ({} {} | \"{}\" {})",
                                 nonneg_range(dec(ymin), dec(-*lo - 1)), frac, -*lo, zero_frac));
    else
      alts.push_back(fmt::format("\"-\" \"{}\" {}", -*lo, zero_frac));
  }
  return alternatives(alts);
}

const char* const kBuiltins[][2] = {
    {"json-char", R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))"},
    {"json-string", R"("\"" json-char* "\"")"},
    {"json-integer", R"("-"? ("0" | [1-9] [0-9]{0,15}))"},
    {"json-number",
     R"("-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?)"},
    {"json-boolean", R"("true" | "false")"},
    {"json-null", R"("null")"},
    {"json-date",
     R"(("000" [1-9] | "00" [1-9] [0-9] | "0" [1-9] [0-9]{2} | [1-9] [0-9]{3}) "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02" "-" ("0" [1-9] | "1" [0-9] | "2" [0-8])))"},
    {"json-time",
     R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))"},
    {"json-uuid",
     R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"},
    {"json-email",
     R"([A-Za-z0-9_+-] [A-Za-z0-9_+-]{0,63} ("." [A-Za-z0-9_+-]{1,64}){0,8} "@" json-label ("." json-label){1,8})"},
    {"json-label", R"([A-Za-z0-9] ([A-Za-z0-9-]{0,61} [A-Za-z0-9])?)"},
    {"json-ipv4", R"(json-octet "." json-octet "." json-octet "." json-octet)"},
    {"json-octet", R"("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9])"},
};

constexpr size_t kMaxGrammarBytes = size_t{1} << 20;  // what parse_gbnf accepts

// Texts as a trie of code points: node 0 the root, `end` where a text ends.
struct CodePointTrie {
  struct Node {
    std::map<uint32_t, size_t> next;
    bool end = false;
  };
  std::vector<Node> nodes = std::vector<Node>(1);

  void insert(const std::vector<uint32_t>& cps) {
    size_t n = 0;
    for (uint32_t cp : cps) {
      auto it = nodes[n].next.find(cp);
      if (it == nodes[n].next.end()) {
        nodes.emplace_back();
        it = nodes[n].next.emplace(cp, nodes.size() - 1).first;
      }
      n = it->second;
    }
    nodes[n].end = true;
  }
};

std::vector<uint32_t> code_points(std::string_view text) {
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < text.size();) cps.push_back(unicode::next_code_point(text, i));
  return cps;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const ojson& root, const JsonSchemaOptions& options)
      : root_(root), ws_(options.whitespace) {}

  std::string compile() {
    const std::string root = visit(root_, "", 0);
    std::string out = "root ::= " + root + "\n";
    if (!ws_.empty()) out += "ws ::= " + ws_ + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    if (out.size() > kMaxGrammarBytes)
      fail("json_schema: the schema compiles to a grammar over 1 MiB; simplify it");
    return out;
  }

 private:
  // OpenAPI's "nullable": true or false (or absent); another type is the schema's error, not a
  // JSON library's exception.
  bool nullable(const ojson& s, const std::string& path) const {
    if (!s.is_object()) return false;
    const auto it = s.find("nullable");
    if (it == s.end() || it->is_null()) return false;
    if (!it->is_boolean()) error(path, "'nullable' must be true or false");
    return it->get<bool>();
  }
  [[noreturn]] void error(const std::string& path, const std::string& what) const {
    fail("json_schema: at #{}: {}", path, what);
  }

  static std::string pointer_escape(const std::string& key) {
    std::string out;
    for (char c : key) {
      if (c == '~')
        out += "~0";
      else if (c == '/')
        out += "~1";
      else
        out += c;
    }
    return out;
  }

  // Every rule goes through here, so a schema that asks for a grammar larger than GBNF's limit
  // (wide enums nested in long tuples, say) is refused while it is being compiled.
  void push_rule(std::string name, std::string body) {
    bytes_ += name.size() + body.size() + 6;
    if (bytes_ > kMaxGrammarBytes)
      fail("json_schema: the schema compiles to a grammar over 1 MiB; simplify it");
    rules_.emplace_back(std::move(name), std::move(body));
  }

  // A new rule with a name made from hint; returns its name.
  std::string add_rule(const std::string& hint, const std::string& body) {
    const std::string name = reserve(hint);
    push_rule(name, body);
    return name;
  }
  std::string reserve(const std::string& hint) {
    std::string base;
    for (char c : hint) {
      if (std::isalnum(static_cast<unsigned char>(c)))
        base += c;
      else if (!base.empty() && base.back() != '-')
        base += '-';
      if (base.size() >= 24) break;
    }
    if (base.empty() || base == "root" || base == "ws" || base.rfind("json-", 0) == 0)
      base = "s" + base;
    std::string name = base;
    int& k = next_suffix_[base];  // where the last probe for this base stopped
    if (k == 0) k = 2;
    while (names_.count(name)) name = base + "-" + std::to_string(k++);
    names_.insert(name);
    return name;
  }

  std::string builtin(const std::string& name) {
    if (builtins_.insert(name).second) {
      for (const auto& b : kBuiltins) {
        if (name == b[0]) {
          // Their own dependencies first.
          const std::string body = b[1];
          for (const char* dep : {"json-char", "json-label", "json-octet"})
            if (body.find(dep) != std::string::npos && name != dep) builtin(dep);
          push_rule(name, body);
        }
      }
    }
    return name;
  }

  std::string ws() const { return ws_.empty() ? " " : " ws "; }
  std::string sep(const char* c) const { return ws() + gbnf_literal(c) + ws(); }

  std::string any_value() {
    if (!builtins_.count("json-value")) {
      builtins_.insert("json-value");
      const std::string s = builtin("json-string");
      builtin("json-number");
      push_rule("json-object", "\"{\"" + ws() + "(" + s + sep(":") + "json-value (" + sep(",") + s +
                                   sep(":") + "json-value)*)?" + ws() + "\"}\"");
      push_rule("json-array",
                "\"[\"" + ws() + "(json-value (" + sep(",") + "json-value)*)?" + ws() + "\"]\"");
      push_rule("json-value",
                "json-object | json-array | json-string | json-number | \"true\" | "
                "\"false\" | \"null\"");
    }
    return "json-value";
  }

  const ojson* resolve_pointer(const std::string& ref, const std::string& path) const {
    if (ref.empty() || ref[0] != '#')
      error(path, fmt::format("'$ref' {} is not in this document (only '#...' references)",
                              ojson(ref).dump()));
    const ojson* node = &root_;
    size_t i = 1;
    if (ref.size() > 1 && ref[1] != '/')
      error(path, "'$ref' must be '#' or a JSON pointer '#/...'");
    while (i < ref.size()) {
      const size_t next = ref.find('/', i + 1);
      std::string token =
          ref.substr(i + 1, next == std::string::npos ? std::string::npos : next - i - 1);
      std::string key;
      for (size_t k = 0; k < token.size(); ++k) {
        if (token[k] == '~' && k + 1 < token.size() &&
            (token[k + 1] == '0' || token[k + 1] == '1')) {
          key += token[k + 1] == '0' ? '~' : '/';
          ++k;
        } else {
          key += token[k];
        }
      }
      if (node->is_object() && node->contains(key)) {
        node = &(*node)[key];
      } else if (node->is_array() && !key.empty() &&
                 key.find_first_not_of("0123456789") == std::string::npos && key.size() < 9 &&
                 std::stoul(key) < node->size()) {
        node = &(*node)[std::stoul(key)];
      } else {
        error(path, fmt::format("'$ref' {} points at nothing", ojson(ref).dump()));
      }
      i = next == std::string::npos ? ref.size() : next;
    }
    return node;
  }

  // The schema a $ref-only schema stands for (others as they are).
  const ojson& deref(const ojson& s, const std::string& path, int depth = 0) const {
    if (depth > kMaxDepth) error(path, "'$ref' chains deeper than 100");
    if (s.is_object() && s.contains("$ref")) {
      for (const auto& [k, v] : s.items())
        if (k != "$ref" && !kAnnotations.count(k)) return s;
      if (!s["$ref"].is_string()) error(path, "'$ref' must be a string");
      return deref(*resolve_pointer(s["$ref"].get<std::string>(), path), path, depth + 1);
    }
    return s;
  }

  // The JSON types a schema's values may have (kAny when unknown).
  unsigned types_of(const ojson& schema, const std::string& path, int depth) const {
    if (depth > kMaxDepth) return kAny;
    const ojson& s = deref(schema, path);
    if (!s.is_object()) return s == true ? static_cast<unsigned>(kAny) : 0u;
    unsigned bits = kAny;
    if (s.contains("type")) {
      bits = 0;
      const ojson& t = s["type"];
      if (t.is_string()) bits = type_bit(t.get<std::string>());
      if (t.is_array())
        for (const auto& e : t)
          if (e.is_string()) bits |= type_bit(e.get<std::string>());
    }
    if (s.contains("const")) bits &= value_bit(s["const"]);
    if (s.contains("enum") && s["enum"].is_array()) {
      unsigned e = 0;
      for (const auto& v : s["enum"]) e |= value_bit(v);
      bits &= e;
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (s.contains(k) && s[k].is_array()) {
        unsigned u = 0;
        for (const auto& alt : s[k]) u |= types_of(alt, path, depth + 1);
        bits &= u;
      }
    }
    if (s.contains("allOf") && s["allOf"].is_array())
      for (const auto& part : s["allOf"]) bits &= types_of(part, path, depth + 1);
    if (nullable(s, path)) bits |= kNull;
    return bits;
  }

  // The values a required property `key` is held to by const / enum (nullopt: not held).
  std::optional<std::vector<ojson>> discriminator_values(const ojson& alt, const std::string& key,
                                                         const std::string& path) const {
    const ojson& s = deref(alt, path);
    if (!s.is_object() || !s.contains("properties") || !s["properties"].contains(key))
      return std::nullopt;
    bool required = false;
    if (s.contains("required") && s["required"].is_array())
      for (const auto& r : s["required"]) required |= r == key;
    if (!required) return std::nullopt;
    const ojson& p = deref(s["properties"][key], path);
    if (!p.is_object()) return std::nullopt;
    if (p.contains("const")) return std::vector<ojson>{p["const"]};
    if (p.contains("enum") && p["enum"].is_array())
      return std::vector<ojson>(p["enum"].begin(), p["enum"].end());
    return std::nullopt;
  }

  void check_one_of_disjoint(const ojson& alts, const std::string& path, int depth) const {
    std::vector<unsigned> bits;
    for (const auto& a : alts) bits.push_back(types_of(a, path, depth));
    bool disjoint = true;
    for (size_t i = 0; i < bits.size() && disjoint; ++i)
      for (size_t j = i + 1; j < bits.size(); ++j)
        if (bits[i] & bits[j]) disjoint = false;
    if (disjoint) return;
    // Objects told apart by one required property's const / enum values.
    const ojson& first = deref(alts[0], path);
    if (first.is_object() && first.contains("properties") && first["properties"].is_object()) {
      for (const auto& [key, unused] : first["properties"].items()) {
        std::vector<std::vector<ojson>> sets;
        bool ok = true;
        for (const auto& a : alts) {
          auto v = discriminator_values(a, key, path);
          if (!v || types_of(a, path, depth) != kObject) {
            ok = false;
            break;
          }
          sets.push_back(*v);
        }
        for (size_t i = 0; ok && i < sets.size(); ++i)
          for (size_t j = i + 1; ok && j < sets.size(); ++j)
            for (const auto& x : sets[i])
              for (const auto& y : sets[j])
                if (x == y) ok = false;
        if (ok) return;
      }
    }
    error(path,
          "'oneOf' alternatives that may overlap cannot be enforced (give them disjoint types, "
          "or a required property with different 'const' values; or use 'anyOf')");
  }

  // allOf's parts merged into one schema, where they do not conflict.
  void merge_into(ojson& into, const ojson& part_in, const std::string& path, int depth) const {
    if (depth > kMaxDepth) error(path, "'allOf' nested deeper than 100");
    const ojson& part = deref(part_in, path);
    if (part.is_boolean()) {
      if (!part.get<bool>()) error(path, "'allOf' holds the schema false: nothing matches");
      return;
    }
    if (!part.is_object()) error(path, "an 'allOf' part must be a schema");
    if (part.contains("$ref"))
      error(path, "'$ref' beside other keywords inside 'allOf' is not supported");
    for (const auto& [k, v] : part.items()) {
      if (k == "allOf") {
        if (!v.is_array()) error(path, "'allOf' must be a list of schemas");
        for (const auto& sub : v) merge_into(into, sub, path, depth + 1);
        continue;
      }
      if (kAnnotations.count(k)) continue;
      if (!into.contains(k)) {
        into[k] = v;
      } else if (into[k] == v) {
        continue;
      } else if (k == "properties" && v.is_object() && into[k].is_object()) {
        for (const auto& [pk, pv] : v.items()) {
          if (!into[k].contains(pk))
            into[k][pk] = pv;
          else if (into[k][pk] != pv)
            into[k][pk] = ojson{{"allOf", ojson::array({into[k][pk], pv})}};
        }
      } else if (k == "required" && v.is_array() && into[k].is_array()) {
        for (const auto& r : v)
          if (std::find(into[k].begin(), into[k].end(), r) == into[k].end()) into[k].push_back(r);
      } else if (k == "type") {
        auto list = [](const ojson& t) {
          std::set<std::string> out;
          if (t.is_string()) out.insert(t.get<std::string>());
          if (t.is_array())
            for (const auto& e : t)
              if (e.is_string()) out.insert(e.get<std::string>());
          return out;
        };
        const auto a = list(into[k]), b = list(v);
        ojson both = ojson::array();
        for (const auto& t : a) {
          if (b.count(t))
            both.push_back(t);
          else if (t == "number" && b.count("integer"))
            both.push_back("integer");
          else if (t == "integer" && b.count("number"))
            both.push_back("integer");
        }
        if (both.empty()) error(path, "'allOf' parts whose types no value has");
        into[k] = both.size() == 1 ? both[0] : both;
      } else if ((k == "minimum" || k == "minLength" || k == "minItems") && v.is_number() &&
                 into[k].is_number()) {
        if (v.get<double>() > into[k].get<double>()) into[k] = v;
      } else if ((k == "maximum" || k == "maxLength" || k == "maxItems") && v.is_number() &&
                 into[k].is_number()) {
        if (v.get<double>() < into[k].get<double>()) into[k] = v;
      } else {
        error(path, fmt::format("'allOf' parts with different '{}' cannot be merged", k));
      }
    }
  }

  std::string visit(const ojson& schema, const std::string& path, int depth) {
    if (depth > kMaxDepth) error(path, "schemas nested deeper than 100");
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) error(path, "the schema false matches nothing");
      return any_value();
    }
    if (!schema.is_object()) error(path, "a schema must be an object or a boolean");
    for (const auto& [k, v] : schema.items()) {
      if (!kKnown.count(k) && !kAnnotations.count(k))
        error(path, fmt::format("'{}' is not supported", k));
    }
    if (schema.contains("$ref")) {
      for (const auto& [k, v] : schema.items())
        if (k != "$ref" && !kAnnotations.count(k))
          return visit(ojson{{"allOf", ojson::array({schema})}}, path, depth + 1);
      if (!schema["$ref"].is_string()) error(path, "'$ref' must be a string");
      const std::string ref = schema["$ref"].get<std::string>();
      auto it = ref_rules_.find(ref);
      if (it != ref_rules_.end()) return it->second;
      const ojson* target = resolve_pointer(ref, path);
      const std::string name = reserve(ref.substr(ref.rfind('/') + 1));
      ref_rules_[ref] = name;
      const std::string body = visit(*target, ref.substr(1), depth + 1);
      push_rule(name, body);
      return name;
    }
    if (schema.contains("allOf")) {
      if (!schema["allOf"].is_array() || schema["allOf"].empty())
        error(path, "'allOf' must be a non-empty list of schemas");
      ojson merged = ojson::object();
      ojson rest = schema;
      rest.erase("allOf");
      merge_into(merged, rest, path, depth);
      for (const auto& part : schema["allOf"]) merge_into(merged, part, path + "/allOf", depth);
      return visit(merged, path, depth + 1);
    }
    if (nullable(schema, path)) {
      ojson rest = schema;
      rest.erase("nullable");
      return add_rule(hint(path), visit(rest, path, depth + 1) + " | " + builtin("json-null"));
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!schema.contains(k)) continue;
      const ojson& alts = schema[k];
      if (!alts.is_array() || alts.empty())
        error(path, fmt::format("'{}' must be a non-empty list of schemas", k));
      if (schema.contains(k == std::string("anyOf") ? "oneOf" : "anyOf"))
        error(path, "'anyOf' and 'oneOf' together are not supported");
      ojson rest = schema;
      rest.erase(k);
      bool siblings = false;
      for (const auto& [rk, rv] : rest.items()) siblings |= !kAnnotations.count(rk);
      std::vector<std::string> out;
      for (size_t i = 0; i < alts.size(); ++i) {
        const std::string sub = fmt::format("{}/{}/{}", path, k, i);
        out.push_back(siblings
                          ? visit(ojson{{"allOf", ojson::array({rest, alts[i]})}}, sub, depth + 1)
                          : visit(alts[i], sub, depth + 1));
      }
      if (k == std::string("oneOf")) {
        if (siblings) {
          ojson merged_alts = ojson::array();
          for (const auto& a : alts)
            merged_alts.push_back(ojson{{"allOf", ojson::array({rest, a})}});
          check_one_of_disjoint(merged_alts, path, depth);
        } else {
          check_one_of_disjoint(alts, path, depth);
        }
      }
      std::string body;
      for (size_t i = 0; i < out.size(); ++i) body += (i ? " | " : "") + out[i];
      return add_rule(hint(path), body);
    }
    if (schema.contains("const") || schema.contains("enum")) return enumeration(schema, path);
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const ojson& t = schema["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const auto& e : t) {
          if (!e.is_string()) error(path, "'type' must be a string or a list of strings");
          types.push_back(e.get<std::string>());
        }
      } else {
        error(path, "'type' must be a string or a non-empty list of strings");
      }
      for (const auto& ty : types)
        if (!type_bit(ty)) error(path, fmt::format("unknown type '{}'", ty));
    } else {
      for (const char* k : {"properties", "additionalProperties", "required"})
        if (schema.contains(k)) types = {"object"};
      for (const char* k : {"items", "prefixItems", "minItems", "maxItems"})
        if (types.empty() && schema.contains(k)) types = {"array"};
      for (const char* k : {"pattern", "format", "minLength", "maxLength"})
        if (types.empty() && schema.contains(k)) types = {"string"};
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
        if (types.empty() && schema.contains(k)) types = {"number"};
      if (types.empty()) return any_value();
    }
    std::vector<std::string> alts;
    for (const auto& ty : types) alts.push_back(typed(schema, ty, path, depth));
    if (alts.size() == 1) return alts[0];
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
    return add_rule(hint(path), body);
  }

  static std::string hint(const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
  }

  std::string enumeration(const ojson& schema, const std::string& path) {
    for (const auto& [k, v] : schema.items())
      if (k != "const" && k != "enum" && k != "type" && !kAnnotations.count(k))
        error(path, fmt::format("'{}' beside 'enum' / 'const' is not supported", k));
    std::vector<ojson> values;
    if (schema.contains("const")) values.push_back(schema["const"]);
    if (schema.contains("enum")) {
      if (!schema["enum"].is_array() || schema["enum"].empty())
        error(path, "'enum' must be a non-empty list");
      if (schema.contains("const")) {
        if (std::find(schema["enum"].begin(), schema["enum"].end(), schema["const"]) ==
            schema["enum"].end())
          error(path, "'const' is not among 'enum': nothing matches");
      } else {
        values.assign(schema["enum"].begin(), schema["enum"].end());
      }
    }
    unsigned allowed = kAny;
    if (schema.contains("type")) allowed = types_of(ojson{{"type", schema["type"]}}, path, 0);
    std::vector<std::string> texts;
    for (const auto& v : values)
      if (value_bit(v) & allowed) texts.push_back(v.dump());
    if (texts.empty()) error(path, "no value of 'enum' / 'const' has the schema's 'type'");
    return add_rule(hint(path), literal_trie(texts));
  }

  // The alternation of literal texts, factored by their common prefixes: a matcher following
  // it keeps one way to continue per distinct next character, not one per text (an enum of
  // 20,000 strings written as 20,000 alternatives held 20,000 stacks at its first character,
  // and a mask needed a context for each).
  static std::string literal_trie(const std::vector<std::string>& texts) {
    CodePointTrie t;
    for (const std::string& text : texts) t.insert(code_points(text));
    const std::vector<CodePointTrie::Node>& trie = t.nodes;
    // Every text below node n (for the flat fallback of very deep tries).
    auto below = [&](size_t n) {
      std::vector<std::string> out;
      std::vector<std::pair<size_t, std::string>> todo = {{n, ""}};
      while (!todo.empty()) {
        auto [m, text] = std::move(todo.back());
        todo.pop_back();
        if (trie[m].end) out.push_back(text);
        for (const auto& [cp, child] : trie[m].next) {
          std::string t = text;
          unicode::append_utf8(t, cp);
          todo.push_back({child, std::move(t)});
        }
      }
      return out;
    };
    std::function<std::string(size_t, int)> emit = [&](size_t n, int depth) -> std::string {
      std::string chain;
      while (!trie[n].end && trie[n].next.size() == 1) {
        unicode::append_utf8(chain, trie[n].next.begin()->first);
        n = trie[n].next.begin()->second;
      }
      const std::string head = chain.empty() ? "" : gbnf_literal(chain) + " ";
      if (trie[n].next.empty()) return chain.empty() ? std::string("\"\"") : gbnf_literal(chain);
      std::string body;
      if (depth >= 64) {  // deeper branch points: the rest as plain alternatives
        for (const std::string& t : below(n))
          if (!t.empty()) body += (body.empty() ? "" : " | ") + gbnf_literal(t);
      } else {
        for (const auto& [cp, child] : trie[n].next) {
          std::string c;
          unicode::append_utf8(c, cp);
          std::string rest = emit(child, depth + 1);
          body +=
              (body.empty() ? "" : " | ") + gbnf_literal(c) + (rest == "\"\"" ? "" : " " + rest);
        }
      }
      return head + "(" + body + ")" + (trie[n].end ? "?" : "");
    };
    return emit(0, 0);
  }

  // A bound as an integer (ceil for lower bounds, floor for upper); for numbers, an integer
  // value is required.
  std::optional<int64_t> bound(const ojson& schema, const char* key, bool lower, bool integer,
                               const std::string& path) const {
    if (!schema.contains(key)) return std::nullopt;
    const ojson& v = schema[key];
    if (v.is_boolean()) return std::nullopt;  // draft 4's exclusive flags: read with their bound
    if (!v.is_number()) error(path, fmt::format("'{}' must be a number", key));
    const double d = v.get<double>();
    if (!(std::fabs(d) <= static_cast<double>(kMaxBound)))
      error(path, fmt::format("'{}' is out of range (|value| < 1e18)", key));
    bool exclusive = std::string(key).rfind("exclusive", 0) == 0;
    if (!exclusive) {
      const char* flag = lower ? "exclusiveMinimum" : "exclusiveMaximum";
      exclusive = schema.contains(flag) && schema[flag].is_boolean() && schema[flag].get<bool>();
    }
    if (!integer) {
      if (exclusive)
        error(path,
              "exclusive bounds on a number that may have a fraction are not supported "
              "(inclusive whole-number bounds are; or use type integer)");
      if (std::floor(d) != d)
        error(path,
              fmt::format("'{}' that is not a whole number is supported only for integers", key));
      return static_cast<int64_t>(d);
    }
    if (v.is_number_integer() && !exclusive) return v.get<int64_t>();
    if (lower) return static_cast<int64_t>(exclusive ? std::floor(d) + 1 : std::ceil(d));
    return static_cast<int64_t>(exclusive ? std::ceil(d) - 1 : std::floor(d));
  }

  std::string number(const ojson& schema, bool integer, const std::string& path) {
    std::optional<int64_t> lo, hi;
    for (const char* k : {"minimum", "exclusiveMinimum"}) {
      auto b = bound(schema, k, true, integer, path);
      if (b && (!lo || *b > *lo)) lo = b;
    }
    for (const char* k : {"maximum", "exclusiveMaximum"}) {
      auto b = bound(schema, k, false, integer, path);
      if (b && (!hi || *b < *hi)) hi = b;
    }
    if (lo && hi && *lo > *hi) error(path, "the bounds leave no value");
    if (!lo && !hi) return builtin(integer ? "json-integer" : "json-number");
    return add_rule(hint(path), integer ? int_range(lo, hi) : number_range(lo, hi));
  }

  uint32_t count(const ojson& schema, const char* key, const std::string& path) const {
    const ojson& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      error(path, fmt::format("'{}' must be a non-negative integer", key));
    if (v.get<int64_t>() > kMaxCount)
      error(path, fmt::format("'{}' above {} is not supported", key, kMaxCount));
    return static_cast<uint32_t>(v.get<int64_t>());
  }

  std::string string_rule(const ojson& schema, const std::string& path) {
    const bool lengths = schema.contains("minLength") || schema.contains("maxLength");
    if (schema.contains("format")) {
      if (!schema["format"].is_string()) error(path, "'format' must be a string");
      if (schema.contains("pattern") || lengths)
        error(path, "'format' beside 'pattern' or a length is not supported");
      const std::string f = schema["format"].get<std::string>();
      std::string body;
      if (f == "date")
        body = builtin("json-date");
      else if (f == "time")
        body = builtin("json-time");
      else if (f == "date-time")
        body = builtin("json-date") + " \"T\" " + builtin("json-time");
      else if (f == "uuid")
        body = builtin("json-uuid");
      else if (f == "email")
        body = builtin("json-email");
      else if (f == "ipv4")
        body = builtin("json-ipv4");
      else
        error(path, fmt::format("format '{}' is not supported (date, time, date-time, uuid, "
                                "email and ipv4 are)",
                                f));
      return add_rule(hint(path), "\"\\\"\" " + body + " \"\\\"\"");
    }
    if (schema.contains("pattern")) {
      if (!schema["pattern"].is_string()) error(path, "'pattern' must be a string");
      if (lengths) error(path, "'pattern' beside 'minLength' / 'maxLength' is not supported");
      std::string expr;
      try {
        expr = regex_gbnf_expression(schema["pattern"].get<std::string>(), true);
      } catch (const Error& e) {
        error(path, fmt::format("'pattern': {}", e.what()));
      }
      return add_rule(hint(path), "\"\\\"\" " + expr + " \"\\\"\"");
    }
    if (!lengths) return builtin("json-string");
    const uint32_t lo = schema.contains("minLength") ? count(schema, "minLength", path) : 0;
    const std::string c = builtin("json-char");
    if (!schema.contains("maxLength"))
      return add_rule(hint(path), fmt::format("\"\\\"\" {}{{{},}} \"\\\"\"", c, lo));
    const uint32_t hi = count(schema, "maxLength", path);
    if (hi < lo) error(path, "'maxLength' < 'minLength': nothing matches");
    return add_rule(hint(path), fmt::format("\"\\\"\" {}{{{},{}}} \"\\\"\"", c, lo, hi));
  }

  std::string array_rule(const ojson& schema, const std::string& path, int depth) {
    if (schema.contains("uniqueItems") && schema["uniqueItems"] != false)
      error(path, "'uniqueItems' is not supported");
    std::vector<std::string> prefix;
    const ojson* items = schema.contains("items") ? &schema["items"] : nullptr;
    const ojson* prefix_schemas = nullptr;
    const char* prefix_key = "prefixItems";
    if (schema.contains("prefixItems")) {
      prefix_schemas = &schema["prefixItems"];
      if (items && items->is_array()) error(path, "'items' must be a schema beside 'prefixItems'");
    } else if (items && items->is_array()) {  // draft 4-7 tuples
      prefix_schemas = items;
      prefix_key = "items";
      items = schema.contains("additionalItems") ? &schema["additionalItems"] : nullptr;
    }
    if (prefix_schemas) {
      if (!prefix_schemas->is_array()) error(path, fmt::format("'{}' must be a list", prefix_key));
      for (size_t i = 0; i < prefix_schemas->size(); ++i)
        prefix.push_back(
            visit((*prefix_schemas)[i], fmt::format("{}/{}/{}", path, prefix_key, i), depth + 1));
    }
    const bool rest_allowed = !(items && items->is_boolean() && !items->get<bool>());
    std::string item;
    if (rest_allowed) item = items ? visit(*items, path + "/items", depth + 1) : any_value();
    const uint32_t k = static_cast<uint32_t>(prefix.size());
    const uint32_t lo = schema.contains("minItems") ? count(schema, "minItems", path) : 0;
    std::optional<uint32_t> hi;
    if (schema.contains("maxItems")) hi = count(schema, "maxItems", path);
    if (!rest_allowed) hi = std::min(hi.value_or(k), k);
    if (hi && *hi < lo)
      error(path, "'maxItems' < 'minItems' (or fewer items allowed): nothing matches");
    const std::string open = "\"[\"" + ws(), close = ws() + "\"]\"";
    if (hi && *hi == 0) return add_rule(hint(path), open + close);
    const std::string comma = sep(",");
    // After the prefix: the rest's items, each after a comma, between these counts.
    auto rest = [&](uint32_t rmin, std::optional<uint32_t> rmax) -> std::string {
      if (rmax && *rmax == 0) return "";
      const std::string counts =
          rmax ? fmt::format("{{{},{}}}", rmin, *rmax) : fmt::format("{{{},}}", rmin);
      return "(" + comma + item + ")" + counts;
    };
    std::string content;
    if (k == 0) {
      const uint32_t first_min = lo > 0 ? lo - 1 : 0;
      std::optional<uint32_t> first_max;
      if (hi) first_max = *hi - 1;
      content = "(" + item + " " + rest(first_min, first_max) + ")" + (lo == 0 ? "?" : "");
    } else {
      // T_j: the items from the j-th (1-based) of the prefix on, each after a comma; stopping
      // before it is allowed when j - 1 >= minItems. Built from the back.
      const uint32_t last = hi ? std::min(*hi, k) : k;
      std::string tail;
      if (rest_allowed && (!hi || *hi > k)) {
        std::optional<uint32_t> rmax;
        if (hi) rmax = *hi - k;
        tail = rest(lo > k ? lo - k : 0, rmax);
      }
      std::string next = tail.empty() ? "" : add_rule(hint(path) + "-rest", tail);
      for (uint32_t j = last; j >= 2; --j) {
        std::string body = comma + prefix[j - 1] + (next.empty() ? "" : " " + next);
        if (j - 1 >= lo) body = "(" + body + ")?";
        next = add_rule(hint(path) + "-t" + std::to_string(j), body);
      }
      content = "(" + prefix[0] + (next.empty() ? "" : " " + next) + ")" + (lo == 0 ? "?" : "");
    }
    return add_rule(hint(path), open + content + close);
  }

  // A JSON string key that is none of `keys`, without escapes (so that no spelling of a defined
  // key slips through).
  std::string other_key(const std::vector<std::string>& keys) {
    CodePointTrie t;
    for (const auto& key : keys) {
      if (key.find_first_of(std::string("\"\\\0", 3)) != std::string::npos) continue;
      const std::vector<uint32_t> cps = code_points(key);
      bool control = false;
      for (uint32_t cp : cps) control |= cp < 0x20;
      if (!control) t.insert(cps);
    }
    const std::vector<CodePointTrie::Node>& trie = t.nodes;
    const std::string free_rest = add_rule("key-rest", "[^\"\\\\\\x00-\\x1F]* \"\\\"\"");
    // Rules from the leaves up; node n's rule: the key's rest from n.
    std::vector<std::string> rule(trie.size());
    for (size_t n = trie.size(); n-- > 0;) {
      std::vector<std::string> alts;
      std::string excluded = "\"\\\\\\x00-\\x1F";
      for (const auto& [cp, child] : trie[n].next) {
        std::string s;
        unicode::append_utf8(s, cp);
        alts.push_back(gbnf_literal(s) + " " + rule[child]);
        excluded += fmt::format("\\U{:08X}", cp);
      }
      alts.push_back("[^" + excluded + "] " + free_rest);
      if (!trie[n].end) alts.push_back("\"\\\"\"");
      std::string body;
      for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
      rule[n] = reserve("other-key");
      push_rule(rule[n], body);
    }
    return add_rule("key", "\"\\\"\" " + rule[0]);
  }

  std::string object_rule(const ojson& schema, const std::string& path, int depth) {
    for (const char* k : {"minProperties", "maxProperties"})
      if (schema.contains(k)) error(path, fmt::format("'{}' is not supported", k));
    struct Prop {
      std::string key, expr;
      bool required = false;
    };
    std::vector<Prop> props;
    std::set<std::string> required;
    if (schema.contains("required")) {
      if (!schema["required"].is_array()) error(path, "'required' must be a list of names");
      for (const auto& r : schema["required"]) {
        if (!r.is_string()) error(path, "'required' must be a list of names");
        required.insert(r.get<std::string>());
      }
    }
    const bool has_props = schema.contains("properties");
    if (has_props && !schema["properties"].is_object())
      error(path, "'properties' must be an object");
    const ojson ap = schema.contains("additionalProperties") ? schema["additionalProperties"]
                                                             : ojson(!has_props);
    if (!ap.is_boolean() && !ap.is_object()) error(path, "'additionalProperties' must be a schema");
    const bool extra = !(ap.is_boolean() && !ap.get<bool>());
    std::set<std::string> seen;
    if (has_props) {
      for (const auto& [key, sub] : schema["properties"].items()) {
        seen.insert(key);
        if (sub.is_boolean() && !sub.get<bool>()) {
          if (required.count(key))
            error(path, fmt::format("required property '{}' has the schema false", key));
          continue;
        }
        props.push_back({key, visit(sub, path + "/properties/" + pointer_escape(key), depth + 1),
                         required.count(key) > 0});
      }
    }
    std::string extra_value;
    if (extra)
      extra_value =
          ap.is_object() ? visit(ap, path + "/additionalProperties", depth + 1) : any_value();
    for (const auto& r : required) {
      if (seen.count(r)) continue;
      if (!extra)
        error(path, fmt::format("required property '{}' is neither in 'properties' nor allowed "
                                "by 'additionalProperties'",
                                r));
      props.push_back({r, extra_value, true});
      seen.insert(r);
    }
    auto kv = [&](const Prop& p) { return gbnf_literal(ojson(p.key).dump()) + sep(":") + p.expr; };
    const std::string comma = sep(",");
    const std::string open = "\"{\"" + ws(), close = ws() + "\"}\"";
    bool all_required = true;
    for (const auto& p : props) all_required &= p.required;
    if (all_required && !extra) {
      std::string body = open;
      for (size_t i = 0; i < props.size(); ++i) body += (i ? comma : "") + kv(props[i]);
      return add_rule(hint(path), body + close);
    }
    // C_i: the members from the i-th on after at least one (each after a comma); F_i: the same
    // before any (the first without a comma). Built from the back.
    std::string c_next, f_next;
    if (extra) {
      std::vector<std::string> keys;
      for (const auto& p : props) keys.push_back(p.key);
      const std::string other = other_key(keys);
      const std::string extra_kv = add_rule(hint(path) + "-extra", other + sep(":") + extra_value);
      c_next = add_rule(hint(path) + "-c", "(" + comma + extra_kv + ")*");
      f_next = add_rule(hint(path) + "-f", "(" + extra_kv + " " + c_next + ")?");
    }
    for (size_t i = props.size(); i-- > 0;) {
      const std::string member = kv(props[i]);
      const std::string cn = c_next.empty() ? "" : " " + c_next;
      std::string c = props[i].required ? comma + member + cn : "(" + comma + member + ")?" + cn;
      std::string f = props[i].required ? member + cn
                                        : member + cn + " | " + (f_next.empty() ? "\"\"" : f_next);
      c_next = add_rule(hint(path) + "-c", c);
      f_next = add_rule(hint(path) + "-f", f);
    }
    return add_rule(hint(path), open + (f_next.empty() ? "" : f_next) + close);
  }

  std::string typed(const ojson& schema, const std::string& type, const std::string& path,
                    int depth) {
    if (type == "null") return builtin("json-null");
    if (type == "boolean") return builtin("json-boolean");
    if (type == "integer") return number(schema, true, path);
    if (type == "number") return number(schema, false, path);
    if (type == "string") return string_rule(schema, path);
    if (type == "array") return array_rule(schema, path, depth);
    return object_rule(schema, path, depth);
  }

  const ojson& root_;
  std::string ws_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> names_, builtins_;
  std::map<std::string, int> next_suffix_;
  std::map<std::string, std::string> ref_rules_;
  size_t bytes_ = 0;
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                const JsonSchemaOptions& options) {
  return SchemaCompiler(schema, options).compile();
}

}  // namespace tf
