#pragma once
// TF Serving's REST API for users moving from it: model status, metadata (the generation
// signature) and predict (row and columnar formats), under /v1/models/{name}[/versions/{v} |
// /labels/{label}]. Errors are {"error": "..."} as TF Serving sends them. GET /v1/models/{name}
// is shared with OpenAI's "retrieve model": its answer carries both shapes.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "serving/core/api_common.h"
#include "serving/core/job_summary.h"
#include "serving/core/planner.h"
#include "serving/core/serving_state.h"
#include "serving/http/http_server.h"
#include "serving/tfserving/predict_plan.h"

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

// The version a TF Serving request addresses (name, and a version or a label), with TF
// Serving's 404 messages when there is none; the API key is checked first, as resolve_model
// does (403 whether or not the model exists).
// A LoRA adapter's name resolves to its base's version (with the adapter in *lora; a route
// that does not generate passes nullptr and gets a 400).
std::shared_ptr<ServedModel> resolve_servable(ServingState& state, const RequestRecord& record,
                                              const std::string& name,
                                              std::optional<int64_t> version,
                                              const std::optional<std::string>& label,
                                              const ModelRegistry::HeaderFn& header = nullptr,
                                              std::shared_ptr<const LoraAdapter>* lora = nullptr);

// TF Serving's model metadata of the generation signature: {"model_spec", "metadata":
// {"signature_def": {"signature_def": {"serving_default": {inputs, outputs, method_name}}}}} (the
// JSON of GetModelMetadataResponse, as the REST route answers it).
nlohmann::json model_metadata(const ServedModel& model);

// Answers one TF Serving route (status, metadata or predict). Throws HttpError / Error when it
// rejects the request before answering (the caller sends {"error": ...}).
void handle_tfserving(ServingState& state, const ModelPath& path, const HttpRequest& req,
                      std::shared_ptr<HttpResponder> responder,
                      std::shared_ptr<RequestRecord> record);

}  // namespace tf
