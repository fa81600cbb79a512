#pragma once
// The Anthropic door's HTTP routes: POST /v1/messages and /v1/messages/count_tokens, errors in
// Anthropic's shape. (The key may come as x-api-key, as Anthropic's clients send it.)

#include "serving/core/serving_state.h"
#include "serving/http/routes.h"

namespace tf {

void add_anthropic_routes(RouteTable& routes, ServingState& state);

}  // namespace tf
