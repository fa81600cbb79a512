#include "serving/tfserving/predict_render.h"

#include <algorithm>

namespace tf {

using json = nlohmann::json;

bool PredictOutputs::any_logprobs() const {
  return std::find(has_logprobs.begin(), has_logprobs.end(), true) != has_logprobs.end();
}

PredictOutputs predict_outputs(const std::vector<std::vector<GeneratedSequence>>& results,
                               const std::vector<bool>& logprobs) {
  PredictOutputs o;
  for (size_t i = 0; i < results.size(); ++i) {
    const GeneratedSequence& s = results[i].at(0);
    o.text.push_back(s.text);
    o.output_ids.push_back(s.tokens);
    o.finish_reason.push_back(finish_reason_name(s.finish));
    const bool lp = i < logprobs.size() && logprobs[i];
    o.has_logprobs.push_back(lp);
    std::vector<float> values;
    if (lp)
      for (const auto& r : s.logprobs) values.push_back(r.logprob);
    o.logprobs.push_back(std::move(values));
  }
  return o;
}

json predict_response_json(const PredictOutputs& o, bool rows) {
  if (rows) {
    json preds = json::array();
    for (size_t i = 0; i < o.text.size(); ++i) {
      json p = {{"text", o.text[i]},
                {"output_ids", o.output_ids[i]},
                {"finish_reason", o.finish_reason[i]}};
      if (o.has_logprobs[i]) p["logprobs"] = o.logprobs[i];
      preds.push_back(std::move(p));
    }
    return {{"predictions", preds}};
  }
  json out = {{"text", o.text}, {"output_ids", o.output_ids}, {"finish_reason", o.finish_reason}};
  if (o.any_logprobs()) out["logprobs"] = o.logprobs;
  return {{"outputs", out}};
}

}  // namespace tf
