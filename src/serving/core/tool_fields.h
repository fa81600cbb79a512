#pragma once
// The tool fields of a chat body in the shape OpenAI set and vLLM and Ollama share, read into
// the protocol-neutral ToolRequest (chat/tool_calls.h): `tools` (function tools with
// JSON-schema parameters), `tool_choice` ("none", "auto", "required" or a named function) and
// `parallel_tool_calls` (Ollama's bodies carry only `tools`).

#include <nlohmann/json.hpp>

#include "chat/tool_calls.h"

namespace tf {

// `tools`, `tool_choice` and `parallel_tool_calls` of a chat body (ordered: the same body with
// members in the order sent, for the parameter schemas' property order). Errors: HttpError 400
// naming the field.
ToolRequest read_tool_request(const nlohmann::json& body, const nlohmann::ordered_json& ordered);

}  // namespace tf
