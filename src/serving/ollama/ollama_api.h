#pragma once
// Ollama's API (docs/api.md#ollama): POST /api/chat and /api/generate (NDJSON lines as the
// answer grows unless stream is false; the last line done with done_reason "stop" or "length",
// the token counts and durations in nanoseconds), POST /api/embed and /api/embeddings, GET
// /api/tags and /api/ps (the models, as name:tag), POST /api/show (template, parameters,
// details, model_info, capabilities), GET /api/version. Errors are {"error": "..."} with the
// status every other door gives the same input.

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "serving/core/api_common.h"
#include "serving/core/serving_state.h"
#include "serving/http/http_server.h"
#include "serving/models/served_model.h"

namespace tf {

void handle_ollama_chat(ServingState& state, const HttpRequest& req,
                        std::shared_ptr<HttpResponder> responder,
                        std::shared_ptr<RequestRecord> record);
void handle_ollama_generate(ServingState& state, const HttpRequest& req,
                            std::shared_ptr<HttpResponder> responder,
                            std::shared_ptr<RequestRecord> record);
void handle_ollama_embed(ServingState& state, const HttpRequest& req,
                         std::shared_ptr<HttpResponder> responder,
                         std::shared_ptr<RequestRecord> record, bool legacy);
void handle_ollama_tags(ServingState& state, std::shared_ptr<HttpResponder> responder,
                        RequestRecord& record, bool running);
void handle_ollama_show(ServingState& state, const HttpRequest& req,
                        std::shared_ptr<HttpResponder> responder, RequestRecord& record);

// {"error": message}
std::string ollama_error_body(const std::string& message);
// The version of Ollama's API this door follows (clients gate features on it).
inline constexpr const char* kOllamaApiVersion = "0.12.0";

// A model version's "details" as Ollama lists them: format, family, parameter_size ("1.1B"),
// quantization_level ("Q8_0", "F32"). (Pure: tests take it.)
nlohmann::ordered_json ollama_details(const ServedModel& model);
// "260K", "15M", "1.1B", "7B" as Ollama writes parameter counts.
std::string ollama_parameter_size(int64_t parameters);

}  // namespace tf
