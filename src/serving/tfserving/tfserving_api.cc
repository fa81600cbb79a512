#include "serving/tfserving/tfserving_api.h"

#include <fmt/format.h>

#include <charconv>

#include "core/random_id.h"
#include "serving/core/embedding_plan.h"
#include "serving/core/model_list.h"
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
                                     const HttpRequest& req, const RequestRecord& record) {
  return resolve_servable(state, record, p.name, p.version, p.label, req.header_lookup());
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

void predict(ServingState& state, std::shared_ptr<ServedModel> model, const HttpRequest& req,
             std::shared_ptr<HttpResponder> responder, std::shared_ptr<RequestRecord> record) {
  auto plan = std::make_shared<PredictPlan>(
      plan_predict(state, std::move(model),
                   read_predict_body(parse_json_body(req.body), logs_prompts(*record)), *record));
  // The job holds the version and the key's admission (through the plan) until it ends: an
  // unloading version finishes it.
  run_job(state, plan, responder, record, std::make_shared<PredictSink>(plan, responder));
}

// TF Serving's Classify and Regress answers from an encoder's classifier scores: per example
// [[label, probability], ...] (softmax; a one-output head's sigmoid), or the head's one value.
class ScoresSink final : public JobSink {
 public:
  // relevance: a reranking generator's scores (no, yes), regressed to P(yes).
  ScoresSink(bool regress, bool relevance, std::vector<std::string> labels,
             std::shared_ptr<HttpResponder> responder)
      : regress_(regress),
        relevance_(relevance),
        labels_(std::move(labels)),
        responder_(std::move(responder)) {}
  void end(const JobEnd& end, const GenerationJob& job) override {
    if (end.outcome == JobOutcome::kClientGone) return;
    if (!end.ok())
      return responder_->send(http_status(end), tfserving_error_body(end.error().what()));
    json result = json::array();
    for (const auto& r : job.results()) {
      const std::vector<float>& scores = r.at(0).embedding;
      if (regress_) {
        result.push_back(relevance_ ? relevance_of(scores) : scores.at(0));
        continue;
      }
      const std::vector<float> p = label_probabilities(scores);
      json row = json::array();
      for (size_t k = 0; k < p.size(); ++k)
        row.push_back({k < labels_.size() ? labels_[k] : fmt::format("LABEL_{}", k), p[k]});
      result.push_back(std::move(row));
    }
    responder_->send(200, dump_json(json{{"result", result}}));
  }

 private:
  bool regress_, relevance_;
  std::vector<std::string> labels_;
  std::shared_ptr<HttpResponder> responder_;
};

// A feature's text: a string, or TF's one-string list.
std::optional<std::string> feature_text(const json& features, const char* name) {
  auto it = features.find(name);
  if (it == features.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) return (*it)[0].get<std::string>();
  throw HttpError(400, fmt::format("feature '{}' must be a string (or a list of one)", name));
}

// :classify and :regress: {"signature_name"?, "context"?: {features}, "examples": [{features}]},
// the features "text" and, for a cross-encoder's pair, "text_pair" (an example's override the
// context's).
void classify_or_regress(ServingState& state, std::shared_ptr<ServedModel> model,
                         const HttpRequest& req, std::shared_ptr<HttpResponder> responder,
                         std::shared_ptr<RequestRecord> record, bool regress) {
  const json body = parse_json_body(req.body);
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
  auto plan = plan_scores(state, model, task, std::move(inputs), {}, "examples", *record,
                          random_id(regress ? "regress-" : "classify-"));
  run_job(state, plan, responder, record,
          std::make_shared<ScoresSink>(regress, !model->score_tokens.empty(),
                                       model->config().labels, responder));
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
                                              const ModelRegistry::HeaderFn& header) {
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
    auto m = resolve(state, path, req, *record);
    record->version = m->version;
    responder->add_header("X-Model-Version", std::to_string(m->version));
    if (path.verb == "predict")
      predict(state, m, req, std::move(responder), std::move(record));
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
