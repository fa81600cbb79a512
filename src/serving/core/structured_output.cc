#include "serving/core/structured_output.h"

#include <fmt/format.h>

#include <optional>

#include "core/error.h"
#include "sampling/json_schema.h"
#include "sampling/regex_grammar.h"
#include "serving/core/api_common.h"

namespace tf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

class Reader {
 public:
  Reader(const json& body, const std::function<ojson()>& ordered)
      : body_(body), ordered_(ordered) {}

  OutputConstraint read() {
    if (present(body_, "response_format")) response_format();
    for (const char* k : {"grammar", "guided_grammar"}) {
      if (!present(body_, k)) continue;
      const json& g = body_[k];
      if (!g.is_string()) throw HttpError(400, fmt::format("'{}' must be a string", k), "", k);
      if (!g.get<std::string>().empty()) set(OutputConstraint::kGrammar, g.get<std::string>(), k);
    }
    if (present(body_, "guided_json")) schema_field({"guided_json"}, "guided_json");
    if (present(body_, "json_schema")) schema_field({"json_schema"}, "json_schema");
    if (present(body_, "guided_regex")) regex(body_["guided_regex"], "guided_regex");
    if (present(body_, "guided_choice")) choice(body_["guided_choice"], "guided_choice");
    if (present(body_, "structured_outputs")) structured_outputs();
    if (present(body_, "guided_decoding_backend") && !body_["guided_decoding_backend"].is_string())
      throw HttpError(400, "'guided_decoding_backend' must be a string", "",
                      "guided_decoding_backend");
    if (present(body_, "guided_whitespace_pattern"))
      whitespace(body_["guided_whitespace_pattern"], "guided_whitespace_pattern");
    if (!ws_.empty()) {
      if (c_.kind != OutputConstraint::kJsonSchema && c_.kind != OutputConstraint::kJsonObject)
        throw HttpError(400, fmt::format("'{}' applies to JSON output only", ws_field_), "",
                        ws_field_);
      c_.whitespace_pattern = ws_;
    }
    return c_;
  }

 private:
  [[noreturn]] static void bad(const std::string& field, const std::string& message) {
    throw HttpError(400, message, "", field);
  }

  void set(OutputConstraint::Kind kind, std::string text, const std::string& field) {
    if (c_.kind != OutputConstraint::kNone)
      bad(field, fmt::format("give one structured output: '{}' and '{}' both ask for one", c_.field,
                             field));
    c_.kind = kind;
    c_.text = std::move(text);
    c_.field = field;
  }

  // The body's subtree at path, with its members in the order sent.
  ojson ordered_at(const std::vector<std::string>& path) {
    if (!ordered_cache_) ordered_cache_ = ordered_ ? ordered_() : ojson::parse(body_.dump());
    const ojson* node = &*ordered_cache_;
    for (const auto& k : path) node = &(*node)[k];
    return *node;
  }

  // A schema at path (an object or a boolean; for guided_json also a string of JSON text).
  void schema_field(const std::vector<std::string>& path, const std::string& field) {
    const json* v = &body_;
    for (const auto& k : path) v = &(*v)[k];
    std::string text;
    if (v->is_object() || v->is_boolean()) {
      text = ordered_at(path).dump();
    } else if (v->is_string() && (field == "guided_json" || field == "structured_outputs")) {
      const ojson parsed = ojson::parse(v->get<std::string>(), nullptr, false);
      if (parsed.is_discarded()) bad(field, fmt::format("'{}' is not valid JSON", field));
      text = parsed.dump();
    } else {
      bad(field, fmt::format("'{}' must be a JSON schema (an object)", field));
    }
    set(OutputConstraint::kJsonSchema, text, field);
  }

  void regex(const json& v, const std::string& field) {
    if (!v.is_string()) bad(field, fmt::format("'{}' must be a string", field));
    set(OutputConstraint::kRegex, v.get<std::string>(), field);
  }

  void choice(const json& v, const std::string& field) {
    if (!v.is_array() || v.empty())
      bad(field, fmt::format("'{}' must be a non-empty list of strings", field));
    std::vector<std::string> choices;
    for (const auto& e : v) {
      if (!e.is_string())
        bad(field, fmt::format("'{}' must be a non-empty list of strings", field));
      choices.push_back(e.get<std::string>());
    }
    set(OutputConstraint::kChoice, "", field);
    c_.choices = std::move(choices);
  }

  void whitespace(const json& v, const std::string& field) {
    if (!v.is_string()) bad(field, fmt::format("'{}' must be a string", field));
    ws_ = v.get<std::string>();
    ws_field_ = field;
  }

  void response_format() {
    const json& f = body_["response_format"];
    const std::string field = "response_format";
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
      bad(field, "'response_format' must be an object with a 'type'");
    const std::string type = f["type"].get<std::string>();
    for (const auto& [k, v] : f.items()) {
      if (k != "type" && k != "json_schema" && k != "schema")
        bad(field, fmt::format("'response_format' has an unknown member '{}'", k));
    }
    if (type == "text") return;
    if (type == "json_object") {
      // llama.cpp's form: {"type": "json_object", "schema": {...}}.
      if (f.contains("schema"))
        schema_field({"response_format", "schema"}, field);
      else
        set(OutputConstraint::kJsonObject, "", field);
      return;
    }
    if (type != "json_schema")
      bad(field, fmt::format("'response_format' type '{}' is not supported (text, json_object, "
                             "json_schema are)",
                             type));
    if (f.contains("schema")) {  // llama.cpp's form
      schema_field({"response_format", "schema"}, field);
      return;
    }
    if (!f.contains("json_schema") || !f["json_schema"].is_object())
      bad(field, "'response_format' of type json_schema needs a 'json_schema' object");
    const json& js = f["json_schema"];
    for (const auto& [k, v] : js.items()) {
      if (k != "name" && k != "description" && k != "schema" && k != "strict")
        bad(field, fmt::format("'response_format.json_schema' has an unknown member '{}'", k));
    }
    if (js.contains("name") && !js["name"].is_string())
      bad(field, "'response_format.json_schema.name' must be a string");
    if (js.contains("strict") && !js["strict"].is_boolean() && !js["strict"].is_null())
      bad(field, "'response_format.json_schema.strict' must be true or false");
    if (js.contains("schema"))
      schema_field({"response_format", "json_schema", "schema"}, field);
    else
      set(OutputConstraint::kJsonObject, "", field);
  }

  void structured_outputs() {
    const std::string field = "structured_outputs";
    const json& s = body_[field];
    if (!s.is_object()) bad(field, "'structured_outputs' must be an object");
    for (const auto& [k, v] : s.items()) {
      if (v.is_null()) continue;
      if (k == "json") {
        schema_field({field, "json"}, field);
      } else if (k == "regex") {
        regex(v, field);
      } else if (k == "choice") {
        choice(v, field);
      } else if (k == "grammar") {
        if (!v.is_string()) bad(field, "'structured_outputs.grammar' must be a string");
        set(OutputConstraint::kGrammar, v.get<std::string>(), field);
      } else if (k == "json_object") {
        if (!v.is_boolean()) bad(field, "'structured_outputs.json_object' must be true or false");
        if (v.get<bool>()) set(OutputConstraint::kJsonObject, "", field);
      } else if (k == "whitespace_pattern") {
        whitespace(v, field);
      } else if (k == "disable_any_whitespace" || k == "disable_additional_properties" ||
                 k == "disable_fallback") {
        // Already so: output is compact unless a whitespace pattern is given, a schema with
        // properties allows no others unless it says so, and there is no other backend.
        if (!v.is_boolean())
          bad(field, fmt::format("'structured_outputs.{}' must be true or false", k));
      } else {
        bad(field, fmt::format("'structured_outputs.{}' is not supported", k));
      }
    }
  }

  const json& body_;
  const std::function<ojson()>& ordered_;
  std::optional<ojson> ordered_cache_;
  OutputConstraint c_;
  std::string ws_, ws_field_;
};

}  // namespace

OutputConstraint read_output_constraint(const json& body,
                                        const std::function<ojson()>& ordered_body) {
  return Reader(body, ordered_body).read();
}

std::string output_grammar(const OutputConstraint& c) {
  try {
    JsonSchemaOptions options;
    if (!c.whitespace_pattern.empty())
      options.whitespace = fmt::format("({})", regex_gbnf_expression(c.whitespace_pattern, false));
    switch (c.kind) {
      case OutputConstraint::kNone:
        return "";
      case OutputConstraint::kGrammar:
        return c.text;
      case OutputConstraint::kJsonSchema:
        return json_schema_to_gbnf(ojson::parse(c.text), options);
      case OutputConstraint::kJsonObject:
        return json_schema_to_gbnf(
            c.text.empty() ? ojson{{"type", "object"}} : ojson::parse(c.text), options);
      case OutputConstraint::kRegex:
        return regex_to_gbnf(c.text);
      case OutputConstraint::kChoice:
        return choice_to_gbnf(c.choices);
    }
  } catch (const HttpError&) {
    throw;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInternal) throw;
    throw HttpError(400, fmt::format("'{}': {}", c.field, e.what()), "", c.field);
  } catch (const nlohmann::json::exception& e) {
    throw HttpError(400, fmt::format("'{}': {}", c.field, e.what()), "", c.field);
  }
  return "";
}

}  // namespace tf
