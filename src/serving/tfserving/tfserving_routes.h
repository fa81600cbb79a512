#pragma once
// TF Serving's REST routes: everything under /v1/models/{name}[/versions/{v} | /labels/{l}]
// (status, metadata, :predict, :classify, :regress), errors in TF Serving's shape. The prefix is
// shared with OpenAI's "retrieve model" (GET /v1/models/{id}), which this route answers too for
// ids that are not TF Serving paths ("name:3", "name@stable", "org/model"), in OpenAI's shape and
// with core/model_list.h's model object.

#include "serving/core/serving_state.h"
#include "serving/http/routes.h"

namespace tf {

void add_tfserving_routes(RouteTable& routes, ServingState& state);

// {"error": "..."} as TF Serving sends it; internal errors say so.
std::string tfserving_error_shape(const std::exception& e, int status);

}  // namespace tf
