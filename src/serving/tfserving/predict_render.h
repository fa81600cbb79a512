#pragma once
// TF Serving Predict's answer as typed outputs of a finished job, and its REST shapes as pure
// functions: the row format {"predictions": [{"text", "output_ids", "finish_reason",
// "logprobs"?}, ...]} and the columnar one {"outputs": {"text": [...], "output_ids": [...],
// "finish_reason": [...], "logprobs"?: [...]}}. gRPC's tensors are made from the same outputs
// (grpc_prediction_service.h: predict_response_proto).

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "serving/core/generation_job.h"

namespace tf {

struct PredictOutputs {  // one entry per instance
  std::vector<std::string> text;
  std::vector<std::vector<int32_t>> output_ids;
  std::vector<std::string> finish_reason;
  std::vector<std::vector<float>> logprobs;  // empty where the instance did not ask for them
  std::vector<bool> has_logprobs;
  bool any_logprobs() const;
};

// The first sequence of each prompt's results; logprobs: per prompt, whether it asked for them.
PredictOutputs predict_outputs(const std::vector<std::vector<GeneratedSequence>>& results,
                               const std::vector<bool>& logprobs);

nlohmann::json predict_response_json(const PredictOutputs& outputs, bool rows);

}  // namespace tf
