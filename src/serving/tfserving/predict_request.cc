#include "serving/tfserving/predict_request.h"

#include <fmt/format.h>

#include <unordered_set>

#include "serving/core/api_common.h"
#include "serving/core/request_fields.h"

namespace tf {
namespace {

using json = nlohmann::json;

// The sampling parameters a Predict instance may carry.
const std::unordered_set<std::string> kPredictParams = {"max_tokens",
                                                        "min_tokens",
                                                        "temperature",
                                                        "top_p",
                                                        "top_k",
                                                        "min_p",
                                                        "typical_p",
                                                        "repetition_penalty",
                                                        "presence_penalty",
                                                        "frequency_penalty",
                                                        "seed",
                                                        "stop",
                                                        "stop_token_ids",
                                                        "ignore_eos",
                                                        "logprobs",
                                                        "logit_bias",
                                                        "skip_special_tokens",
                                                        "include_stop_str_in_output",
                                                        "no_repeat_ngram_size"};

}  // namespace

bool is_predict_param(const std::string& name) {
  return kPredictParams.count(name) > 0;
}

namespace {

std::vector<int32_t> predict_ids(const json& v) {
  if (!v.is_array() || v.empty())
    throw HttpError(400, "'input_ids' must be a non-empty list of token ids", "", "input_ids");
  std::vector<int32_t> out;
  for (const auto& x : v) {
    try {
      out.push_back(token_id(x, "input_ids"));
    } catch (const Error& e) {
      throw HttpError(400, e.what(), "", "input_ids");
    }
  }
  return out;
}

PromptInput predict_text(const json& v) {
  if (!v.is_string()) throw HttpError(400, "'prompt' must be a string", "", "prompt");
  return {true, v.get<std::string>(), {}};
}

// One instance: a prompt string, a list of ids, or an object with "prompt" or "input_ids" and
// parameters (shared: the columnar format's parameters, for every prompt).
CompletionRequest predict_instance(const json& inst, const json& shared) {
  CompletionRequest r;
  json params = shared.is_object() ? shared : json::object();
  if (inst.is_string()) {
    r.prompts.push_back(predict_text(inst));
  } else if (inst.is_array()) {
    r.prompts.push_back({false, {}, predict_ids(inst)});
  } else if (inst.is_object()) {
    const bool text = inst.contains("prompt"), ids = inst.contains("input_ids");
    if (text == ids)
      throw HttpError(400, "each instance needs exactly one of 'prompt' or 'input_ids'");
    r.prompts.push_back(text ? predict_text(inst["prompt"])
                             : PromptInput{false, {}, predict_ids(inst["input_ids"])});
    for (const auto& [k, v] : inst.items()) {
      if (k == "prompt" || k == "input_ids") continue;
      if (!kPredictParams.count(k)) throw HttpError(400, fmt::format("unknown input '{}'", k));
      params[k] = v;
    }
  } else {
    throw HttpError(400, "an instance must be a prompt string, a list of token ids or an object");
  }
  try {
    r.params = parse_sampling_params(params, false, 16);
    apply_request_rules(r, false);
  } catch (const FieldError& e) {
    throw HttpError(400, e.what(), "", e.field());
  }
  // An instance's default max_tokens is the completions default, not the context: given.
  r.max_tokens_given = true;
  return r;
}

// Which signature a Predict payload is written for (PredictInput's rule): true for the generate
// signature. An input of each kind is a 400 naming both.
bool is_generate_request(const json& payload, bool rows, const std::string& signature) {
  std::string generate_input, tokenflow_input;
  auto look = [&](const json& obj) {
    if (!obj.is_object()) {
      tokenflow_input = "a prompt";  // a string or a list of ids: tokenflow's forms
      return;
    }
    for (const auto& [k, v] : obj.items()) {
      if (is_generate_only_input(k)) {
        if (generate_input.empty()) generate_input = k;
      } else if (k == "prompt" || (kPredictParams.count(k) && !is_generate_setting(k))) {
        if (tokenflow_input.empty()) tokenflow_input = k;
      }
    }
  };
  if (rows) {
    for (const auto& inst : payload) look(inst);
  } else {
    look(payload);
  }
  if (!generate_input.empty() && !tokenflow_input.empty())
    throw HttpError(400, fmt::format("'{}' is an input of the generate signature and '{}' one of "
                                     "tokenflow's: a request is written for one signature",
                                     generate_input, tokenflow_input));
  if (!generate_input.empty()) return true;
  if (!tokenflow_input.empty()) return false;
  return !signature.empty() && signature != "serving_default" && signature != kTokenflowSignature;
}

}  // namespace

PredictInput read_predict_body(const json& body, bool log_prompt) {
  PredictInput out;
  if (!body.is_object()) throw HttpError(400, "the request body must be a JSON object");
  if (body.contains("signature_name")) {
    if (!body["signature_name"].is_string())
      throw HttpError(400, "'signature_name' must be a string", "", "signature_name");
    out.signature_name = body["signature_name"].get<std::string>();
  }
  for (const auto& [k, v] : body.items()) {
    if (k != "instances" && k != "inputs" && k != "signature_name")
      throw HttpError(400, fmt::format("unknown key '{}' (expected 'instances' or 'inputs')", k));
  }
  const bool rows = body.contains("instances"), columns = body.contains("inputs");
  if (rows == columns) {
    throw HttpError(400, rows ? "Request body must have either 'instances' or 'inputs', not both"
                              : "Missing 'instances' or 'inputs' key");
  }
  out.rows = rows;
  if (rows && (!body["instances"].is_array() || body["instances"].empty()))
    throw HttpError(400, "'instances' must be a non-empty list");
  if (is_generate_request(rows ? body["instances"] : body["inputs"], rows, out.signature_name)) {
    out.generate =
        rows ? read_generate_rows(body["instances"]) : read_generate_columns(body["inputs"]);
    if (log_prompt) out.logged_prompt = dump_json(rows ? body["instances"] : body["inputs"]);
    return out;
  }
  if (rows) {
    const json& inst = body["instances"];
    for (const auto& i : inst) out.instances.push_back(predict_instance(i, json()));
  } else {
    const json& in = body["inputs"];
    json shared = json::object();
    json prompts;
    if (in.is_object()) {
      for (const auto& [k, v] : in.items()) {
        if (k == "prompt" || k == "input_ids") continue;
        if (!kPredictParams.count(k)) throw HttpError(400, fmt::format("unknown input '{}'", k));
        shared[k] = v;
      }
      const bool text = in.contains("prompt"), ids = in.contains("input_ids");
      if (text == ids)
        throw HttpError(400, "'inputs' needs exactly one of 'prompt' or 'input_ids'");
      if (text) {
        prompts = in["prompt"].is_array() ? in["prompt"] : json::array({in["prompt"]});
      } else {
        const json& v = in["input_ids"];
        prompts = v.is_array() && !v.empty() && v[0].is_array() ? v : json::array({v});
        for (auto& p : prompts) p = json{{"input_ids", p}};
      }
    } else {
      prompts = in.is_array() ? in : json::array({in});
    }
    if (prompts.empty()) throw HttpError(400, "'inputs' holds no prompt");
    for (const auto& p : prompts) out.instances.push_back(predict_instance(p, shared));
  }
  if (log_prompt) out.logged_prompt = dump_json(rows ? body["instances"] : body["inputs"]);
  return out;
}

}  // namespace tf
