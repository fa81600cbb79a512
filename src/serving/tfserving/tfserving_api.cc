#include "serving/tfserving/tfserving_api.h"

#include <fmt/format.h>

#include <charconv>

#include "core/random_id.h"
#include "serving/core/model_list.h"
#include "serving/tfserving/classify_plan.h"
#include "serving/tfserving/predict_render.h"

namespace tf {
namespace {

using json = nlohmann::json;

std::string servable(const ModelPath& p) {
  if (p.version) return fmt::format("Specific({}, {})", p.name, *p.version);
  if (p.label) return fmt::format("Label({}, {})", p.name, *p.label);
  return fmt::format("Latest({})", p.name);
}

// The version a predict or metadata request addresses, held for the request's duration.
std::shared_ptr<ServedModel> resolve(ServingState& state, const ModelPath& p,
                                     const HttpRequest& req, const RequestRecord& record,
                                     std::shared_ptr<const LoraAdapter>* lora = nullptr) {
  return resolve_servable(state, record, p.name, p.version, p.label, req.header_lookup(), lora);
}

json version_status(const VersionStatus& v) {
  return {
      {"version", std::to_string(v.version)},
      {"state", version_state_name(v.state)},
      {"status", {{"error_code", v.error.empty() ? "OK" : "UNKNOWN"}, {"error_message", v.error}}}};
}

json model_status(ServingState& state, const ModelPath& p) {
  json list = json::array();
  for (const auto& v : model_version_statuses(state, p.name, p.version, p.label))
    list.push_back(version_status(v));
  return {{"model_version_status", list}};
}

json tensor_info(const char* name, const char* dtype, int rank) {
  return tensor_info_json(fmt::format("{}:0", name), dtype, rank);
}
}  // namespace

json model_metadata(const ServedModel& m) {
  json inputs = {{"prompt", tensor_info("prompt", "DT_STRING", 1)},
                 {"input_ids", tensor_info("input_ids", "DT_INT32", 2)}};
  const std::pair<const char*, const char*> params[] = {{"max_tokens", "DT_INT32"},
                                                        {"min_tokens", "DT_INT32"},
                                                        {"temperature", "DT_FLOAT"},
                                                        {"top_p", "DT_FLOAT"},
                                                        {"top_k", "DT_INT32"},
                                                        {"min_p", "DT_FLOAT"},
                                                        {"typical_p", "DT_FLOAT"},
                                                        {"repetition_penalty", "DT_FLOAT"},
                                                        {"presence_penalty", "DT_FLOAT"},
                                                        {"frequency_penalty", "DT_FLOAT"},
                                                        {"seed", "DT_INT64"},
                                                        {"ignore_eos", "DT_BOOL"},
                                                        {"logprobs", "DT_INT32"},
                                                        {"skip_special_tokens", "DT_BOOL"},
                                                        {"no_repeat_ngram_size", "DT_INT32"},
                                                        {"include_stop_str_in_output", "DT_BOOL"}};
  for (const auto& [name, dtype] : params) inputs[name] = tensor_info(name, dtype, 1);
  inputs["stop"] = tensor_info("stop", "DT_STRING", 2);
  inputs["stop_token_ids"] = tensor_info("stop_token_ids", "DT_INT32", 2);
  json outputs = {{"text", tensor_info("text", "DT_STRING", 1)},
                  {"output_ids", tensor_info("output_ids", "DT_INT32", 2)},
                  {"finish_reason", tensor_info("finish_reason", "DT_STRING", 1)},
                  {"logprobs", tensor_info("logprobs", "DT_FLOAT", 2)}};
  json sig = {
      {"inputs", inputs}, {"outputs", outputs}, {"method_name", "tensorflow/serving/predict"}};
  // The generate signature under its name (serving_default unless configured), tokenflow's own
  // beside it.
  json defs = {{m.generate.name, generate_signature_def(m.generate)}, {kTokenflowSignature, sig}};
  return {{"model_spec",
           {{"name", m.name}, {"signature_name", ""}, {"version", std::to_string(m.version)}}},
          {"metadata", {{"signature_def", {{"signature_def", defs}}}}}};
}

namespace {

// Predict's answer: the outputs (tokenflow's signature) or the padded rows (the generate
// signature), row or columnar; errors in TF Serving's shape.
class PredictSink final : public JobSink {
 public:
  PredictSink(std::shared_ptr<const PredictPlan> plan, std::shared_ptr<HttpResponder> responder)
      : plan_(std::move(plan)), responder_(std::move(responder)) {}
  void end(const JobEnd& end, const GenerationJob& job) override {
    if (end.outcome == JobOutcome::kClientGone) return;
    // A deadline answers 504 as completions do (before, a 200 with "abort").
    if (!end.ok())
      return responder_->send(http_status(end), tfserving_error_body(end.error().what()));
    if (plan_->generate) {
      // One output: TF Serving answers its value alone (no name), row or columnar.
      const json answer = generate_answer(*plan_, job, end.summary);
      responder_->send(200, dump_json(json{{plan_->rows ? "predictions" : "outputs", answer}}));
    } else {
      responder_->send(200, dump_json(predict_response_json(
                                predict_outputs(job.results(), plan_->logprobs), plan_->rows)));
    }
  }

 private:
  std::shared_ptr<const PredictPlan> plan_;
  std::shared_ptr<HttpResponder> responder_;
};

void predict(ServingState& state, std::shared_ptr<ServedModel> model,
             std::shared_ptr<const LoraAdapter> lora, const HttpRequest& req,
             std::shared_ptr<HttpResponder> responder, std::shared_ptr<RequestRecord> record,
             const std::string& name) {
  auto plan = std::make_shared<PredictPlan>(plan_predict(
      state, std::move(model), read_predict_body(parse_json_body(req.body), logs_prompts(*record)),
      *record, std::nullopt, std::move(lora), name));
  // The job holds the version and the key's admission (through the plan) until it ends: an
  // unloading version finishes it.
  run_job(state, plan, responder, record, std::make_shared<PredictSink>(plan, responder));
}

// TF Serving's Classify and Regress answers (classify_plan.h): per example
// [[label, probability], ...], or the head's one value.
class ScoresSink final : public JobSink {
 public:
  ScoresSink(std::shared_ptr<const ClassifyPlan> plan, std::shared_ptr<HttpResponder> responder)
      : plan_(std::move(plan)), responder_(std::move(responder)) {}
  void end(const JobEnd& end, const GenerationJob& job) override {
    if (end.outcome == JobOutcome::kClientGone) return;
    if (!end.ok())
      return responder_->send(http_status(end), tfserving_error_body(end.error().what()));
    const ClassifyAnswer a = classify_answer(*plan_, job);
    json result = json::array();
    if (plan_->regress) {
      result = a.values;
    } else {
      for (const auto& row : a.classes) {
        json r = json::array();
        for (const auto& [label, p] : row) r.push_back({label, p});
        result.push_back(std::move(r));
      }
    }
    responder_->send(200, dump_json(json{{"result", result}}));
  }

 private:
  std::shared_ptr<const ClassifyPlan> plan_;
  std::shared_ptr<HttpResponder> responder_;
};

// :classify and :regress (classify_plan.h).
void classify_or_regress(ServingState& state, std::shared_ptr<ServedModel> model,
                         const HttpRequest& req, std::shared_ptr<HttpResponder> responder,
                         std::shared_ptr<RequestRecord> record, bool regress) {
  auto plan = std::make_shared<const ClassifyPlan>(
      plan_classify(state, std::move(model), parse_json_body(req.body), *record, regress));
  run_job(state, plan->plan, responder, record, std::make_shared<ScoresSink>(plan, responder));
}

}  // namespace

std::vector<VersionStatus> model_version_statuses(ServingState& state, const std::string& name,
                                                  std::optional<int64_t> version,
                                                  const std::optional<std::string>& label) {
  const auto versions = state.registry.status(name);
  if (!versions) {
    throw HttpError(404, fmt::format("Could not find any versions of model {}", name));
  }
  std::optional<int64_t> want = version;
  if (label) {
    const auto labels = state.registry.labels(name);
    auto it = labels.find(*label);
    if (it == labels.end())
      throw HttpError(404, fmt::format("Unrecognized servable version label: {}", *label));
    want = it->second;
  }
  std::vector<VersionStatus> list;
  for (const auto& v : *versions)
    if (!want || v.version == *want) list.push_back(v);
  if (want && list.empty()) {
    throw HttpError(404, fmt::format("Could not find version {} of model {}", *want, name));
  }
  if (!want && list.empty()) {
    // Nothing found to load (no version directories, an unsupported platform): say why.
    const std::string why = state.registry.model_error(name);
    throw HttpError(404, fmt::format("Could not find any versions of model {}{}", name,
                                     why.empty() ? "" : ": " + why));
  }
  return list;
}

std::optional<ModelPath> parse_model_path(const std::string& rest) {
  ModelPath p;
  std::string path = rest;
  if (const size_t colon = path.rfind(':'); colon != std::string::npos) {
    p.verb = path.substr(colon + 1);
    path = path.substr(0, colon);
  }
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = path.find('/', start);
    parts.push_back(
        path.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (parts.empty() || parts[0].empty()) return std::nullopt;
  p.name = parts[0];
  size_t i = 1;
  if (i < parts.size() && (parts[i] == "versions" || parts[i] == "labels")) {
    if (i + 1 >= parts.size() || parts[i + 1].empty()) return std::nullopt;
    if (parts[i] == "versions") {
      int64_t v = 0;
      const auto& s = parts[i + 1];
      auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
      p.version = v;
    } else {
      p.label = parts[i + 1];
    }
    i += 2;
  }
  if (i < parts.size() && parts[i] == "metadata" && p.verb.empty()) {
    p.metadata = true;
    ++i;
  }
  if (i != parts.size()) return std::nullopt;
  return p;
}

std::shared_ptr<ServedModel> resolve_servable(ServingState& state, const RequestRecord& record,
                                              const std::string& name,
                                              std::optional<int64_t> version,
                                              const std::optional<std::string>& label,
                                              const ModelRegistry::HeaderFn& header,
                                              std::shared_ptr<const LoraAdapter>* lora) {
  if (state.registry.loras().find(name)) {  // an adapter: its base's version (the planner's rule)
    return resolve_model(state, record, name, "", header, lora, version, label);
  }
  state.require_model_access(record, name);
  const ModelPath p{name, version, label, false, ""};
  auto m = name.empty() ? nullptr : state.registry.resolve({name, version, label}, {}, header);
  if (!m) {
    if (label && state.registry.status(name))
      throw HttpError(404, fmt::format("Unrecognized servable version label: {}", *label));
    throw HttpError(404, fmt::format("Servable not found for request: {}", servable(p)));
  }
  return m;
}

void handle_tfserving(ServingState& state, const ModelPath& path, const HttpRequest& req,
                      std::shared_ptr<HttpResponder> responder,
                      std::shared_ptr<RequestRecord> record) {
  if (!path.verb.empty()) {
    if (req.method != "POST") throw HttpError(405, fmt::format("use POST for :{}", path.verb));
    if (path.verb != "predict" && path.verb != "classify" && path.verb != "regress") {
      throw HttpError(400, fmt::format("':{}' is not supported: ':predict', and ':classify' and "
                                       "':regress' for classifier heads, are",
                                       path.verb));
    }
    std::shared_ptr<const LoraAdapter> lora;
    auto m = resolve(state, path, req, *record, path.verb == "predict" ? &lora : nullptr);
    record->version = m->version;
    responder->add_header("X-Model-Version", std::to_string(m->version));
    if (path.verb == "predict")
      predict(state, m, std::move(lora), req, std::move(responder), std::move(record), path.name);
    else
      classify_or_regress(state, m, req, std::move(responder), std::move(record),
                          path.verb == "regress");
    return;
  }
  if (req.method != "GET") throw HttpError(405, "use GET for model status and metadata");
  state.require_model_access(*record, path.name);
  record->model = path.name;
  record->model_unknown = !state.registry.status(path.name).has_value();
  json body;
  if (path.metadata) {
    const auto m = resolve(state, path, req, *record);
    body = model_metadata(*m);
  } else {
    body = model_status(state, path);
    if (!path.version && !path.label) {
      // Also OpenAI's "retrieve model" on the same path (the latest available version).
      const auto versions = state.registry.available();
      for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
        if ((*it)->name != path.name) continue;
        const json model_object = model_object_json(**it);
        for (auto f = model_object.begin(); f != model_object.end(); ++f) body[f.key()] = *f;
        break;
      }
    }
  }
  responder->send(200, dump_json(body));
  log_request(*record, 200);
}

}  // namespace tf
