#pragma once
// OpenAI's Responses API (POST /v1/responses), stateless: the body is read into the typed
// request by its own reader (responses_request.h: the same planner, template, tools,
// structured output and reasoning as /v1/chat/completions), and the answer is rendered as a
// Response: output items (reasoning, message with output_text, function_call), usage in
// input/output tokens, status completed or incomplete. Streaming sends the semantic events
// (response.created, ..., output_text.delta, ..., response.completed) with their sequence numbers.
// Nothing is stored: previous_response_id and the retrieve/delete routes answer that.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_calls.h"
#include "serving/core/api_common.h"
#include "serving/core/job_summary.h"
#include "serving/core/serving_state.h"
#include "serving/http/http_server.h"

namespace tf {

using ojson = nlohmann::ordered_json;

// What a Response object echoes of its request, and its identity.
struct ResponseHead {
  std::string id;  // "resp_..."
  int64_t created_at = 0;
  std::string model;
  nlohmann::json request;  // the Responses body (instructions, tools, text, ... echoed)
};

// A finished answer's parts, as the output items show them.
struct ResponseParts {
  std::optional<std::string> reasoning;  // a reasoning item
  std::optional<std::string> text;       // a message item with one output_text
  ojson logprobs = ojson::array();       // the output text's, when asked for
  std::vector<ToolCall> calls;           // function_call items
  bool incomplete = false;               // cut by max_output_tokens
};

// The whole Response (status completed, or incomplete when cut by max_output_tokens).
ojson response_object_of(const ResponseHead& head, const ResponseParts& parts,
                         const JobSummary& summary);
// The Response object before any output (status in_progress), for response.created.
ojson response_in_progress(const ResponseHead& head);

// The Responses API's events as an answer streams, in order, with their sequence numbers.
class ResponseEventStream {
 public:
  explicit ResponseEventStream(ResponseHead head) : head_(std::move(head)) {}
  // response.created and response.in_progress.
  std::vector<ojson> start();
  // Settled reasoning text (a reasoning item opened on the first).
  std::vector<ojson> reasoning(const std::string& delta);
  // Settled output text and the logprobs of the tokens that made it (a message item opened on
  // the first).
  std::vector<ojson> text(const std::string& delta, const ojson& logprobs);
  // The answer's tool calls, each a function_call item with its arguments as one delta.
  std::vector<ojson> calls(const std::vector<ToolCall>& calls);
  // Closes what is open and ends with response.completed (or response.incomplete).
  std::vector<ojson> finish(const JobSummary& summary, bool incomplete);
  // response.failed with the error.
  std::vector<ojson> fail(const std::string& message);

 private:
  ojson event(const char* type, ojson fields);
  void close_text(std::vector<ojson>& out);
  void close_reasoning(std::vector<ojson>& out);

  ResponseHead head_;
  int64_t seq_ = 0;
  ojson output_ = ojson::array();  // the finished items, in order
  // The item open now: -1 none; its index in output_ once added.
  int64_t text_item_ = -1, reasoning_item_ = -1;
  std::string text_, reasoning_;
};

// Answers POST /v1/responses. Throws HttpError for a request it rejects before answering.
void handle_responses(ServingState& state, const HttpRequest& req,
                      std::shared_ptr<HttpResponder> responder,
                      std::shared_ptr<RequestRecord> record);

}  // namespace tf
