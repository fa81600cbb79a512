#pragma once
// The OpenAI-compatible routes: POST /v1/completions and /v1/chat/completions (whole responses
// or Server-Sent Events), GET /v1/models and /v1/models/{id}. Shapes follow OpenAI's API as vLLM
// and llama.cpp's server implement it (docs/api.md).

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "serving/api_common.h"
#include "serving/http_server.h"
#include "serving/job_summary.h"
#include "serving/serving_state.h"

namespace tf {

// A generation request checked and ready to run. The OpenAI body is the one form every API's
// generation request takes (the gRPC API converts its messages to it), so that parameters,
// defaults, validation and the server's rules are the same whichever way a request comes.
struct GenerationPlan {
  // The version the request runs on; held until the request ends, so that an unloading version
  // finishes it.
  std::shared_ptr<ServedModel> model;
  std::vector<std::vector<int32_t>> prompts;
  SamplingParams params;
  bool stream = false, include_usage = false, echo = false;
  int32_t choices_per_prompt = 1;  // n (after best_of or beam search pick theirs)
  ReturnRule rule;                 // which sequences of a prompt are returned
  bool max_tokens_given = false;
  std::vector<GenerationRequest> requests;  // one per prompt, limits and deadline applied
  std::shared_ptr<Admission> admission;     // the API key's admission (nullptr: keys are off)
  std::chrono::milliseconds time_limit{0};  // from arrival to the deadline
};

// Resolves the model of an OpenAI completions (chat = false) or chat completions body (header:
// the sticky header lookup of a traffic split), parses and checks every parameter, builds the
// engine requests (ids from id) and applies the server's rules (ServingState::prepare). Fills
// record's model, version, prompt tokens (and prompt, when the access log takes prompts).
// time_limit: the caller's limit (a gRPC deadline) when the body has no "timeout". Throws
// HttpError for what it rejects; nothing has run then.
GenerationPlan plan_generation(ServingState& state, const nlohmann::json& body, bool chat,
                               const ModelRegistry::HeaderFn& header, RequestRecord& record,
                               const std::string& id,
                               std::optional<std::chrono::milliseconds> time_limit = std::nullopt);

// The model-independent part of planning, shared with batch files: every field of an OpenAI
// completions (chat = false) or chat body checked (unknown fields, types, ranges, the beam-search,
// best_of and echo rules) and the prompts tokenized and held against the context; fills p's
// prompts, params and flags (not its model). Throws HttpError 400 naming the field.
void parse_generation_body(const nlohmann::json& body, bool chat, const LoadedTokenizer& tokenizer,
                           const ModelConfig& config, GenerationPlan& p);
// One engine request per prompt of a parsed plan (ids from id), max_tokens fitted to the context
// when the body gave none; HttpError 400 when the prompt and max_tokens exceed it.
std::vector<GenerationRequest> engine_requests(const GenerationPlan& p, const nlohmann::json& body,
                                               const std::string& id, int64_t context,
                                               bool max_tokens_given);

// What the plan's finished job comes to (JobSummary), with the plan's return rule and deadline.
JobSummary summarize(const GenerationPlan& plan, const GenerationJob& job,
                     const RequestRecord& record);

// Answers a completions (chat = false) or chat completions request. Throws HttpError / Error
// for a request it rejects before answering (the caller sends the error); once a stream has
// started, errors travel inside it.
void handle_openai_generation(ServingState& state, const HttpRequest& req,
                              std::shared_ptr<HttpResponder> responder,
                              std::shared_ptr<RequestRecord> record, bool chat);

// {"id", "object": "model", "created", "owned_by", ...} of one model version; id defaults to
// the model's name, parent (for "name:version" and "name@label" entries) to null.
nlohmann::json openai_model_object(const ServedModel& model, const std::string& id = "",
                                   const std::string& parent = "");
// {"object": "list", "data": [...]}: the models key may use (every model when key is nullptr).
nlohmann::json openai_model_list(const ServingState& state, const KeyPolicy* key);

}  // namespace tf
