#pragma once
// A Predict request (REST or gRPC) planned: the signature it names checked against the model,
// each instance of tokenflow's signature planned as a completions request of one prompt
// (core/planner.h's plan_request), each row of the generate signature turned into engine
// parameters by generate()'s rules; and the finished job summarized and padded back.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "serving/core/planner.h"
#include "serving/tfserving/predict_request.h"

namespace tf {

// A Predict request (REST or gRPC) checked and ready to run: one engine request per instance
// (tokenflow's signature), each planned as a completions request of one prompt, or per row (the
// generate signature).
struct PredictPlan : JobPlan {
  bool rows = false;           // the row format: answered as "predictions"
  std::string signature;       // the signature that answers
  std::string name;            // the model's name, or the LoRA adapter's the request named
  std::vector<bool> logprobs;  // per prompt: asked for logprobs
  // The generate signature: its rows, the answer's pad id and output name.
  bool generate = false;
  std::vector<GenerateRow> generate_rows;
  int32_t pad_id = 0;
  int32_t decoder_start = -1;  // an encoder-decoder's: its answer rows start with it
  std::string output_name;
};
// lora: the adapter the request's model name named (name: that name), or none.
PredictPlan plan_predict(ServingState& state, std::shared_ptr<ServedModel> model,
                         const PredictInput& input, RequestRecord& record,
                         std::optional<std::chrono::milliseconds> time_limit = std::nullopt,
                         std::shared_ptr<const LoraAdapter> lora = nullptr,
                         const std::string& name = "");
// The generate signature's answer: [rows * num_return_sequences, max_len] ids, padded.
std::vector<std::vector<int32_t>> generate_answer(const PredictPlan& plan, const GenerationJob& job,
                                                  const JobSummary& summary);

}  // namespace tf
