#pragma once
// Anthropic's Messages API (docs/api.md#anthropic-messages): POST /v1/messages, whole or as
// Anthropic's server-sent events (message_start, ping, content_block_start / _delta / _stop with
// text_delta, thinking_delta and input_json_delta, message_delta with the stop reason and usage,
// message_stop), and POST /v1/messages/count_tokens. The answer's content blocks come from the
// model's output: thinking (the template's think block), text, and tool_use (the calls parsed in
// the template's tool format); stop_reason end_turn, max_tokens, stop_sequence or tool_use.
// Errors are {"type": "error", "error": {"type", "message"}}.

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serving/core/api_common.h"
#include "serving/core/serving_state.h"
#include "serving/http/http_server.h"

namespace tf {

void handle_messages(ServingState& state, const HttpRequest& req,
                     std::shared_ptr<HttpResponder> responder,
                     std::shared_ptr<RequestRecord> record);
void handle_count_tokens(ServingState& state, const HttpRequest& req,
                         std::shared_ptr<HttpResponder> responder, RequestRecord& record);

// The error body: {"type": "error", "error": {"type": invalid_request_error |
// authentication_error | permission_error | not_found_error | request_too_large |
// rate_limit_error | api_error | overloaded_error | timeout_error, "message"}}.
std::string anthropic_error_body(int status, const std::string& message);
const char* anthropic_error_type(int status);

// One finished sequence as Anthropic's content blocks and stop reason (pure; tests take it).
struct AnthropicAnswer {
  nlohmann::ordered_json content = nlohmann::ordered_json::array();
  std::string stop_reason;               // end_turn, max_tokens, stop_sequence, tool_use
  nlohmann::ordered_json stop_sequence;  // the stop sequence met, or null
};

}  // namespace tf
