#include "serving/tfserving/classify_plan.h"

#include <fmt/format.h>

#include <optional>

#include "core/random_id.h"
#include "serving/core/api_common.h"
#include "serving/core/embedding_plan.h"
#include "serving/models/model_tasks.h"

namespace tf {
namespace {

using json = nlohmann::json;

// A feature's text: a string, or TF's one-string list.
std::optional<std::string> feature_text(const json& features, const char* name) {
  auto it = features.find(name);
  if (it == features.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) return (*it)[0].get<std::string>();
  throw HttpError(400, fmt::format("feature '{}' must be a string (or a list of one)", name));
}

}  // namespace

ClassifyPlan plan_classify(ServingState& state, std::shared_ptr<ServedModel> model,
                           const json& body, RequestRecord& record, bool regress) {
  if (!body.is_object()) throw HttpError(400, "the request body must be a JSON object");
  for (const auto& [key, v] : body.items())
    if (key != "signature_name" && key != "context" && key != "examples")
      throw HttpError(400,
                      fmt::format("unknown field '{}' (signature_name, context, examples)", key));
  const json context = body.value("context", json::object());
  if (!context.is_object()) throw HttpError(400, "'context' must be an object of features");
  const json& examples = body.value("examples", json());
  if (!examples.is_array() || examples.empty() || examples.size() > 1024)
    throw HttpError(400, "'examples' must be a list of 1 to 1024 objects of features");
  const ModelConfig& c = model->config();
  const ModelTask task = regress ? ModelTask::kScore : ModelTask::kClassify;
  require_task(*model, task);
  if (regress && c.encoder_only() && c.num_labels != 1)
    throw HttpError(400, fmt::format("':regress' needs a head with one output; model '{}' has {} "
                                     "labels (use ':classify')",
                                     model->name, c.num_labels));
  if (!model->tok()) throw HttpError(400, fmt::format("model '{}' has no tokenizer", model->name));
  std::vector<ScoreInput> inputs;
  for (const json& e : examples) {
    if (!e.is_object()) throw HttpError(400, "each example must be an object of features");
    json features = context;
    for (const auto& [k, v] : e.items()) features[k] = v;
    const std::optional<std::string> text = feature_text(features, "text");
    if (!text || text->empty())
      throw HttpError(400, "each example needs a non-empty 'text' feature");
    const std::optional<std::string> pair = feature_text(features, "text_pair");
    if (!model->score_tokens.empty() && !pair)
      throw HttpError(400, fmt::format("model '{}' scores pairs: each example needs 'text' and "
                                       "'text_pair' features",
                                       model->name));
    inputs.push_back(pair ? score_pair_input(*model, *text, *pair, "")
                          : ScoreInput{model->tok()->encode(*text, true), {}});
  }
  ClassifyPlan out;
  out.regress = regress;
  out.relevance = !model->score_tokens.empty();
  out.labels = c.labels;
  out.plan = plan_scores(state, model, task, std::move(inputs), {}, "examples", record,
                         random_id(regress ? "regress-" : "classify-"));
  return out;
}

ClassifyAnswer classify_answer(const ClassifyPlan& plan, const GenerationJob& job) {
  ClassifyAnswer a;
  for (const auto& r : job.results()) {
    const std::vector<float>& scores = r.at(0).embedding;
    if (plan.regress) {
      a.values.push_back(plan.relevance ? relevance_of(scores) : scores.at(0));
      continue;
    }
    const std::vector<float> p = label_probabilities(scores);
    auto& row = a.classes.emplace_back();
    for (size_t k = 0; k < p.size(); ++k)
      row.emplace_back(k < plan.labels.size() ? plan.labels[k] : fmt::format("LABEL_{}", k), p[k]);
  }
  return a;
}

}  // namespace tf
