// Fuzz target: TF Serving's gRPC PredictRequest, the tensors a client sends (dtype, shape,
// typed values, packed tensor_content, the one-value shorthand that fills a shape) read into
// the typed Predict input and planned like any request. Any bytes must end in a value or an
// Error, never a crash, a hang or an allocation beyond the request's own size (the shape is
// bounded and checked for overflow before a value is expanded: issue 49's [2^62, 4] and
// [1, 20000000] requests). The same bytes as a ClassificationRequest (Classify and Regress share
// its Input): its tf.Examples read into the REST body, a list of examples or an Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "core/error.h"
#include "openai_body_check.h"
#include "serving/tfserving/grpc_prediction_service.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  tensorflow::serving::ClassificationRequest creq;
  if (creq.ParseFromArray(data, static_cast<int>(size))) {
    try {
      const nlohmann::json body =
          tf::classify_body_of(creq.input(), creq.model_spec().signature_name());
      if (!body["examples"].is_array() || body["examples"].empty()) __builtin_trap();
    } catch (const tf::Error&) {
    }
  }
  tensorflow::serving::PredictRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  for (const auto& [name, tensor] : req.inputs()) {
    try {
      const nlohmann::json v = tf::tensor_to_json(tensor, name);
      // What a tensor becomes is bounded by the element limit, whatever its shape says.
      const size_t n = v.is_array() ? v.size() : 1;
      if (n > static_cast<size_t>(tf::kMaxTensorElements)) __builtin_trap();
      if (v.is_array() && !v.empty() && v[0].is_array()) {
        size_t total = 0;
        for (const auto& row : v) total += row.size();
        if (total > static_cast<size_t>(tf::kMaxTensorElements)) __builtin_trap();
      }
    } catch (const tf::Error&) {
    }
  }
  try {
    const tf::PredictInput input = tf::read_predict_request(req, true);
    for (const auto& instance : input.instances) check_request(instance);
  } catch (const tf::Error&) {
  }
  return 0;
}
