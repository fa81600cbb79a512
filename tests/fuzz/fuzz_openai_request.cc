// Fuzz target: the JSON request readers of the HTTP API (OpenAI completions and chat bodies, TF
// Serving's Predict bodies, tokenflow's signature and the generate signature) and the planner
// behind them (prompts, messages through a chat template, every sampling parameter), and TF
// Serving's model paths; the same bodies as Responses API bodies (read by their own reader,
// then planned) and embeddings bodies. Any input must end in a value or an Error, never a
// crash or a hang.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/json.h"
#include "openai_body_check.h"
#include "serving/core/completion_request.h"
#include "serving/openai/openai_request.h"
#include "serving/openai/responses_request.h"
#include "serving/openai/utility_api.h"
#include "serving/tfserving/tfserving_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)tf::parse_model_path(text);
  } catch (const tf::Error&) {
  }
  nlohmann::json body;
  try {
    body = tf::parse_json(text, "fuzz");  // as the server reads bodies: nesting bounded
  } catch (const tf::Error&) {
    return 0;
  }
  if (body.is_discarded()) return 0;
  for (bool chat : {false, true}) check_openai_body(body, chat);
  try {  // a Responses body, read by its own reader and planned as a chat request
    check_request(tf::read_responses_request(nlohmann::ordered_json(body), true));
  } catch (const tf::Error&) {
  }
  try {
    (void)tf::read_embeddings_request(body);
  } catch (const tf::Error&) {
  }
  // As a TF Serving Predict body: each instance through the same planner.
  try {
    const tf::PredictInput in = tf::read_predict_body(body);
    for (const auto& instance : in.instances) check_request(instance);
    if (in.generate) {  // the generate signature: each row's parameters and the answer
      std::vector<std::vector<std::vector<int32_t>>> tokens;
      for (size_t r = 0; r < in.generate->rows.size(); ++r) {
        const auto p =
            tf::generate_row_params(in.generate->settings, in.generate->rows[r], r, {2}, 256);
        p.params.validate(512);
        tokens.emplace_back(static_cast<size_t>(p.sequences), std::vector<int32_t>{7});
      }
      (void)tf::generate_output(in.generate->rows, tokens,
                                tf::generate_pad_id(in.generate->settings, {2}));
    }
  } catch (const tf::Error&) {
  }
  return 0;
}
