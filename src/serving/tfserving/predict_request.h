#pragma once
// TF Serving's Predict request (REST's JSON body; gRPC's tensors are read into the same JSON by
// tfserving/grpc_prediction_service.cc) read into typed instances: tokenflow's signature (each
// instance a CompletionRequest) or the generate signature's padded rows.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "serving/core/completion_request.h"
#include "serving/tfserving/generate_signature.h"

namespace tf {

// TF Serving's Predict body: the row format ("instances") or the columnar one ("inputs"),
// written for one of two signatures. The generate signature (generate_signature.h: input_ids and
// attention_mask [batch, len], generate()'s settings) when the request holds an input only it
// has (attention_mask, max_new_tokens, do_sample, ...) or names a signature other than
// serving_default and tokenflow's; otherwise tokenflow's own, as before it: each prompt an
// instance with its parameters (OpenAI's names). An input of each kind in one request is a 400.
// The signature's name is checked against the model by the planner. TF Serving's messages.
struct PredictInput {
  bool rows = false;                         // answered as "predictions" (else "outputs")
  std::string signature_name;                // as the request names it ("" when it does not)
  std::optional<GenerateInput> generate;     // set: the generate signature
  std::vector<CompletionRequest> instances;  // tokenflow's signature
  std::string logged_prompt;
};
PredictInput read_predict_body(const nlohmann::json& body, bool log_prompt = false);
// The parameters a Predict instance may carry, under their OpenAI names.
bool is_predict_param(const std::string& name);

}  // namespace tf
