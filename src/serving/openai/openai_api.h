#pragma once
// The OpenAI-compatible routes: POST /v1/completions and /v1/chat/completions (whole responses
// or Server-Sent Events), GET /v1/models and /v1/models/{id}. Shapes follow OpenAI's API as vLLM
// and llama.cpp's server implement it (docs/api.md).

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "serving/core/api_common.h"
#include "serving/core/job_summary.h"
#include "serving/core/planner.h"
#include "serving/core/serving_state.h"
#include "serving/http/http_server.h"
#include "serving/openai/openai_render.h"

namespace tf {

// Answers a completions (chat = false) or chat completions request. Throws HttpError / Error
// for a request it rejects before answering (the caller sends the error); once a stream has
// started, errors travel inside it.
void handle_openai_generation(ServingState& state, const HttpRequest& req,
                              std::shared_ptr<HttpResponder> responder,
                              std::shared_ptr<RequestRecord> record, bool chat);

// A job answered whole (not streamed), in the OpenAI APIs' terms: 500 (or 400 for a request's
// own constraint past its budget) with the engine's error, 504 "timeout", or 200 with
// body(job, summary).
using WholeBody = std::function<std::string(const GenerationJob&, const JobSummary&)>;
std::shared_ptr<JobSink> whole_answer(std::shared_ptr<HttpResponder> responder, WholeBody body);

// How the plan's answer is shaped (OpenAI's completions or chat), under id and the model's name.
OpenAiShape openai_shape(const GenerationPlan& plan, const std::string& id,
                         const std::string& model, bool chat);

}  // namespace tf
