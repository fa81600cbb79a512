#pragma once
// The routes around generation that clients of vLLM and OpenAI expect: POST /tokenize and
// /detokenize (vLLM's shapes: a prompt, or chat messages rendered by the model's template) and
// POST /v1/embeddings (OpenAI's shape: the prompt's final hidden states pooled, last token or
// mean, normalized unless asked not to). docs/api.md describes them.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine_request.h"
#include "serving/core/api_common.h"
#include "serving/core/completion_request.h"
#include "serving/core/serving_state.h"
#include "serving/http/http_server.h"

namespace tf {

// Throws HttpError for a request it rejects (nothing has run then).
void handle_tokenize(ServingState& state, const HttpRequest& req,
                     std::shared_ptr<HttpResponder> responder, RequestRecord& record);
void handle_detokenize(ServingState& state, const HttpRequest& req,
                       std::shared_ptr<HttpResponder> responder, RequestRecord& record);
void handle_embeddings(ServingState& state, const HttpRequest& req,
                       std::shared_ptr<HttpResponder> responder,
                       std::shared_ptr<RequestRecord> record);

// The embeddings body, read and checked (pure: tests/serving take it without a server).
struct EmbeddingsRequest {
  std::string model, user;
  std::vector<PromptInput> inputs;
  bool base64 = false;                // encoding_format "base64": little-endian float32
  std::optional<int64_t> dimensions;  // the hidden size, or a Matryoshka model's declared one
  std::optional<int64_t> truncate_prompt_tokens;  // vLLM's: keep the last k tokens (-1: limit)
  // tokenflow's "pooling": "last" (vLLM's default for a generator) or "mean"; an encoder's also
  // "cls" or "max". Unset: the model's.
  std::optional<Pooling> pooling;
  bool normalize = true;  // to unit length, as OpenAI's embeddings are
  bool add_special_tokens = true;
};
EmbeddingsRequest read_embeddings_request(const nlohmann::json& body);

// A float vector as OpenAI's base64 encoding_format sends it (little-endian float32).
std::string base64_floats(const std::vector<float>& v);

}  // namespace tf
