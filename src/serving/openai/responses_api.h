#pragma once
// OpenAI's Responses API (POST /v1/responses), stateless: a request's input items and
// instructions become a chat request (the same planner, template, tools, structured output and
// reasoning as /v1/chat/completions), and the chat answer becomes a Response: output items
// (reasoning, message with output_text, function_call), usage in input/output tokens, status
// completed or incomplete. Streaming sends the semantic events (response.created, ...,
// output_text.delta, ..., response.completed) with their sequence numbers. Nothing is stored:
// previous_response_id and the retrieve/delete routes answer that.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serving/core/api_common.h"
#include "serving/core/serving_state.h"
#include "serving/http/http_server.h"

namespace tf {

using ojson = nlohmann::ordered_json;

// The chat completions body a Responses body asks for (HttpError 400 naming the Responses
// field for what it cannot take).
ojson responses_to_chat_body(const ojson& body);

// What a Response object echoes of its request, and its identity.
struct ResponseHead {
  std::string id;  // "resp_..."
  int64_t created_at = 0;
  std::string model;
  nlohmann::json request;  // the Responses body (instructions, tools, text, ... echoed)
};

// The Response for a finished chat completion (openai_response's object, one choice).
ojson response_from_chat(const ResponseHead& head, const ojson& chat_completion);
// The Response object before any output (status in_progress), for response.created.
ojson response_in_progress(const ResponseHead& head);

// Turns a chat stream's chunks (one choice) into the Responses API's events, in order.
class ResponseEventStream {
 public:
  explicit ResponseEventStream(ResponseHead head) : head_(std::move(head)) {}
  // response.created and response.in_progress.
  std::vector<ojson> start();
  // The events of one chat chunk (content, reasoning_content and tool_calls deltas).
  std::vector<ojson> chunk(const ojson& chat_chunk);
  // Closes what is open and ends with response.completed (or response.incomplete when the
  // output hit max_output_tokens); usage from the chat usage object.
  std::vector<ojson> finish(const ojson& usage);
  // response.failed with the error.
  std::vector<ojson> fail(const std::string& message);

 private:
  ojson event(const char* type, ojson fields);
  void close_text(std::vector<ojson>& out);
  void close_reasoning(std::vector<ojson>& out);
  void close_call(std::vector<ojson>& out);

  ResponseHead head_;
  int64_t seq_ = 0;
  ojson output_ = ojson::array();  // the finished items, in order
  // The item open now: -1 none; its index in output_ once added.
  int64_t text_item_ = -1, reasoning_item_ = -1, call_item_ = -1;
  std::string text_, reasoning_, call_args_;
  std::string finish_reason_;
};

// Answers POST /v1/responses. Throws HttpError for a request it rejects before answering.
void handle_responses(ServingState& state, const HttpRequest& req,
                      std::shared_ptr<HttpResponder> responder,
                      std::shared_ptr<RequestRecord> record);

}  // namespace tf
