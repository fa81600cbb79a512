#pragma once
// The scoring doors of an encoder with a classifier head (vLLM's pooling runner, llama.cpp's
// server, Jina's and Cohere's rerank): /v1/rerank (and /rerank, /v2/rerank) orders documents by
// their relevance to a query (a cross-encoder over each query + document pair); /score scores
// text_1 x text_2 pairs; /classify gives each input's label and probabilities (id2label).

#include <memory>
#include <vector>

#include "serving/core/api_common.h"
#include "serving/core/serving_state.h"
#include "serving/http/http_server.h"

namespace tf {

void handle_rerank(ServingState& state, const HttpRequest& req,
                   std::shared_ptr<HttpResponder> responder, std::shared_ptr<RequestRecord> record);
void handle_score(ServingState& state, const HttpRequest& req,
                  std::shared_ptr<HttpResponder> responder, std::shared_ptr<RequestRecord> record);
void handle_classify(ServingState& state, const HttpRequest& req,
                     std::shared_ptr<HttpResponder> responder,
                     std::shared_ptr<RequestRecord> record);

}  // namespace tf
