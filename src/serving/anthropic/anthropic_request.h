#pragma once
// Anthropic's Messages API bodies (POST /v1/messages and /v1/messages/count_tokens) read into
// the typed request (core/completion_request.h), as the Anthropic SDKs and Claude Code send
// them: `system` as a string or text blocks; user and assistant turns whose content is a string
// or blocks (text; tool_use in assistant turns becomes the template's tool calls; tool_result in
// user turns becomes tool messages; earlier thinking blocks are dropped, as Anthropic drops them
// from the context; images and documents are refused by name); `max_tokens` required;
// `stop_sequences`, `temperature`, `top_p`, `top_k`, `metadata.user_id`, `stream`; `tools`
// ({name, description, input_schema}) and `tool_choice` (auto, any, tool, none, with
// disable_parallel_tool_use); `thinking` ({type: enabled, budget_tokens} or {type: disabled}:
// the template's enable_thinking). An unknown field or a wrong type is HttpError 400 naming it.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>

#include "serving/core/completion_request.h"

namespace tf {

struct AnthropicRequest {
  CompletionRequest request;  // chat
  // thinking: {type: "enabled"}: its budget_tokens (the most tokens of reasoning asked for).
  std::optional<int32_t> thinking_budget;
};

// count_only: the count_tokens body (no max_tokens, no sampling fields).
AnthropicRequest read_anthropic_request(const nlohmann::json& body,
                                        const nlohmann::ordered_json& ordered, bool log_prompt,
                                        bool count_only = false);

}  // namespace tf
