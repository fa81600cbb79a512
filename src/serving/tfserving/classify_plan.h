#pragma once
// TF Serving's Classify and Regress, one plan for the REST doors (:classify, :regress) and the
// gRPC ones (PredictionService.Classify, .Regress): the request as the REST body
// ({"signature_name"?, "context"?: {features}, "examples": [{features}]}; gRPC's tf.Examples
// are read into it), each example's "text" feature (and "text_pair" for a cross-encoder's or a
// reranking generator's pair; an example's features over the context's) scored by the model's
// head; Classify answers each example's labels with their probabilities (softmax; a one-output
// head's sigmoid), Regress the head's one value (a reranking generator's P(yes)).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "serving/core/generation_job.h"
#include "serving/core/planner.h"
#include "serving/core/serving_state.h"

namespace tf {

struct ClassifyPlan {
  std::shared_ptr<GenerationPlan> plan;
  bool regress = false;
  bool relevance = false;  // a reranking generator's scores (no, yes): regressed to P(yes)
  std::vector<std::string> labels;
};

// HttpError 400 for a body that is not that shape, a model without the task (classify for
// Classify, score for Regress), a Regress on a head of several outputs, an example without text.
ClassifyPlan plan_classify(ServingState& state, std::shared_ptr<ServedModel> model,
                           const nlohmann::json& body, RequestRecord& record, bool regress);

// The answer of a finished job, per example in order: its (label, probability) list (Classify)
// or its value (Regress).
struct ClassifyAnswer {
  std::vector<std::vector<std::pair<std::string, float>>> classes;
  std::vector<float> values;
};
ClassifyAnswer classify_answer(const ClassifyPlan& plan, const GenerationJob& job);

}  // namespace tf
