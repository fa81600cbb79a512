#pragma once
// The models a request may name, as the listings of every door show them: each model by name
// (the version a request naming only it gets), then, where a model has several versions or
// labels, "name:version" and "name@label" with the name as parent. The JSON is OpenAI's model
// object, which tokenflow.v1's ListModels and TF Serving's combined model status carry too.

#include <nlohmann/json.hpp>

#include <string>

#include "serving/core/auth.h"
#include "serving/core/serving_state.h"
#include "serving/models/served_model.h"

namespace tf {

// {"id", "object": "model", "created", "owned_by", ...} of one model version; id defaults to
// the model's name, parent (for "name:version" and "name@label" entries) to null.
nlohmann::json model_object_json(const ServedModel& model, const std::string& id = "",
                                 const std::string& parent = "");
// {"object": "list", "data": [...]}: the models key may use (every model when key is nullptr).
nlohmann::json model_list_json(const ServingState& state, const KeyPolicy* key);

}  // namespace tf
