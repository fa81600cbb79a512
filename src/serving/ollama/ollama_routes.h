#pragma once
// The Ollama door's HTTP routes: /api/chat, /api/generate, /api/embed, /api/embeddings,
// /api/tags, /api/ps, /api/show, /api/version; the model-management calls (/api/pull, push,
// create, copy, delete, blobs) answer 501 naming how tokenflow gets its models. Errors in
// Ollama's shape, {"error": "..."}.

#include "serving/core/serving_state.h"
#include "serving/http/routes.h"

namespace tf {

void add_ollama_routes(RouteTable& routes, ServingState& state);

}  // namespace tf
