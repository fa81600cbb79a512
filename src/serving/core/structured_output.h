#pragma once
// What a request holds its output to (issue 24), as every door names it: OpenAI's
// response_format (json_object, json_schema), vLLM's structured_outputs and guided_json /
// guided_regex / guided_choice / guided_grammar (with guided_whitespace_pattern), llama.cpp's
// json_schema and grammar, and the gRPC GenerateRequest's structured_output. Read into one
// OutputConstraint; compiled to GBNF (sampling/json_schema.h, sampling/regex_grammar.h) by the
// planner, whose errors are 400s naming the field the constraint came from.

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace tf {

struct OutputConstraint {
  enum Kind { kNone, kGrammar, kJsonSchema, kJsonObject, kRegex, kChoice };
  Kind kind = kNone;
  // kGrammar: GBNF; kJsonSchema: the schema's JSON text (its members in the order sent);
  // kJsonObject: a schema the object must follow ("" any object); kRegex: the pattern.
  std::string text;
  std::vector<std::string> choices;  // kChoice
  std::string whitespace_pattern;    // a regex for the whitespace between JSON tokens ("" none)
  std::string field;                 // the request field it came from
  bool operator==(const OutputConstraint&) const = default;
};

// The constraint an OpenAI-style body asks for (kNone: none), from any of the fields above;
// more than one is a 400 naming the second. ordered_body: the same body with its objects'
// members in the order sent (a schema's properties are generated in that order); called only
// when a schema is present.
OutputConstraint read_output_constraint(
    const nlohmann::json& body, const std::function<nlohmann::ordered_json()>& ordered_body);

// The constraint as GBNF; throws HttpError 400 naming c.field when the schema, pattern or
// choices cannot be enforced ("" for kNone).
std::string output_grammar(const OutputConstraint& c);

}  // namespace tf
