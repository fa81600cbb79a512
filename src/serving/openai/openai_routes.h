#pragma once
// The OpenAI door's HTTP routes: POST /v1/completions, /v1/chat/completions, /v1/responses,
// /v1/embeddings, vLLM's /tokenize and /detokenize (also under /v1/), GET /v1/models. Errors
// answer in OpenAI's shape. (GET /v1/models/{id} is TF Serving's path too: tfserving_routes.h.)

#include "serving/core/serving_state.h"
#include "serving/http/routes.h"

namespace tf {

void add_openai_routes(RouteTable& routes, ServingState& state);

}  // namespace tf
