#pragma once
// OpenAI's Responses API bodies (POST /v1/responses) read into the typed request
// (core/completion_request.h), the body parsed once: instructions and input items (messages
// with text parts, function_call and function_call_output items; earlier reasoning items
// dropped) become the chat messages; tools (flat function tools), tool_choice,
// parallel_tool_calls; text.format (json_object, json_schema) the output constraint;
// max_output_tokens; reasoning.effort the think block's budget; include /
// top_logprobs the output text's logprobs; the sampling extensions vLLM accepts on its chat
// API under their chat names. Nothing is stored: previous_response_id and background are
// refused. Errors are HttpError 400 naming the Responses field.

#include <nlohmann/json.hpp>

#include "serving/core/completion_request.h"

namespace tf {

CompletionRequest read_responses_request(const nlohmann::ordered_json& body, bool log_prompt);

}  // namespace tf
