#pragma once
// TF Serving's REST API for users moving from it: model status, metadata (the generation
// signature) and predict (row and columnar formats), under /v1/models/{name}[/versions/{v} |
// /labels/{label}]. Errors are {"error": "..."} as TF Serving sends them. GET /v1/models/{name}
// is shared with OpenAI's "retrieve model": its answer carries both shapes.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "serving/api_common.h"
#include "serving/http_server.h"
#include "serving/serving_state.h"

namespace tf {

// A parsed /v1/models/... path.
struct ModelPath {
  std::string name;
  std::optional<int64_t> version;
  std::optional<std::string> label;
  bool metadata = false;
  std::string verb;  // after ':' ("predict"), empty for GET routes
};

// Parses what follows "/v1/models/". nullopt when it is not a TF Serving model path.
std::optional<ModelPath> parse_model_path(const std::string& rest);

// TF Serving's GetModelStatus for both APIs: every version of the model the manager knows, or
// the one a version or label names. Throws HttpError 404 (TF Serving's messages) when there is
// none.
std::vector<VersionStatus> model_version_statuses(ServingState& state, const std::string& name,
                                                  std::optional<int64_t> version,
                                                  const std::optional<std::string>& label);

// Answers one TF Serving route (status, metadata or predict). Throws HttpError / Error when it
// rejects the request before answering (the caller sends {"error": ...}).
void handle_tfserving(ServingState& state, const ModelPath& path, const HttpRequest& req,
                      std::shared_ptr<HttpResponder> responder,
                      std::shared_ptr<RequestRecord> record);

}  // namespace tf
