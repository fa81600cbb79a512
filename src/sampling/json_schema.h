#pragma once
// JSON Schema as GBNF (grammar.h): what OpenAI's response_format json_schema, vLLM's guided_json
// and llama.cpp's json_schema hold the output to. The grammar admits only JSON text that is valid
// against the schema; a keyword that cannot be enforced is refused by name (with the schema path
// where it stands), never ignored.
//
// Enforced: `type` (one or a list; inferred from the other keywords when absent), `enum`, `const`,
// `properties` (in the schema's order) / `required` / `additionalProperties` (absent means none
// when `properties` is given, as in OpenAI's strict mode, XGrammar and llama.cpp; an object
// schema with neither takes any members), `items` / `prefixItems` / `additionalItems`,
// `minItems` / `maxItems`, `anyOf`, `oneOf` (when its alternatives cannot overlap: disjoint types,
// or objects told apart by a required property's `const` / `enum`), `allOf` (merged when the
// parts do not conflict), `$ref` to `#`, `#/$defs/...`, `#/definitions/...` or any JSON pointer in
// the document (recursion included), `pattern` (regex_grammar.h; matched against the whole
// string), `format` (date, time, date-time, uuid, email, ipv4), `minLength` / `maxLength`,
// `minimum` / `maximum` / `exclusiveMinimum` / `exclusiveMaximum` for integers (and inclusive
// integer bounds for numbers), OpenAPI's `nullable`. Annotations (title, description, default,
// examples, $schema, $id, $comment, deprecated, readOnly, writeOnly, discriminator) are ignored.
// Whitespace is compact (none) unless JsonSchemaOptions::whitespace allows some.

#include <nlohmann/json.hpp>

#include <string>

namespace tf {

struct JsonSchemaOptions {
  // A GBNF expression for the whitespace allowed between JSON tokens ("" none: compact output).
  std::string whitespace;
};

// Throws Error (kInvalidArgument): "json_schema: at /properties/a: 'not' is not supported".
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                const JsonSchemaOptions& options = {});

}  // namespace tf
