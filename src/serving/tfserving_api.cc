#include "serving/tfserving_api.h"

#include <fmt/format.h>

#include <charconv>
#include <unordered_set>

#include "serving/openai_api.h"
#include "serving/openai_request.h"

namespace tf {
namespace {

using json = nlohmann::json;

// The sampling parameters an instance may carry, under their OpenAI names.
const std::unordered_set<std::string> kParamFields = {"max_tokens",
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

std::string servable(const ModelPath& p) {
  if (p.version) return fmt::format("Specific({}, {})", p.name, *p.version);
  if (p.label) return fmt::format("Label({}, {})", p.name, *p.label);
  return fmt::format("Latest({})", p.name);
}

// The version a predict or metadata request addresses, held for the request's duration.
std::shared_ptr<ServedModel> resolve(ServingState& state, const ModelPath& p,
                                     const HttpRequest& req) {
  return resolve_servable(state, p.name, p.version, p.label, [&](const std::string& h) {
    const std::string* v = req.header(h);
    return v ? *v : std::string();
  });
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
  json dims = json::array();
  for (int i = 0; i < rank; ++i) dims.push_back({{"size", "-1"}, {"name", ""}});
  return {{"dtype", dtype},
          {"tensor_shape", {{"dim", dims}, {"unknown_rank", false}}},
          {"name", fmt::format("{}:0", name)}};
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
  return {{"model_spec",
           {{"name", m.name}, {"signature_name", ""}, {"version", std::to_string(m.version)}}},
          {"metadata", {{"signature_def", {{"signature_def", {{"serving_default", sig}}}}}}}};
}

namespace {

std::vector<int32_t> ids_of(const json& v, const char* what) {
  if (!v.is_array() || v.empty())
    throw HttpError(400, fmt::format("'{}' must be a non-empty list of token ids", what));
  std::vector<int32_t> out;
  for (const auto& x : v) {
    try {
      out.push_back(token_id(x, what));
    } catch (const Error& e) {
      throw HttpError(400, e.what());
    }
  }
  return out;
}

std::vector<int32_t> encode(const ServedModel& m, const json& text) {
  if (!text.is_string()) throw HttpError(400, "'prompt' must be a string");
  if (!m.tok()) throw HttpError(400, "this model has no tokenizer: send 'input_ids'");
  auto ids =
      encode_prompt(*m.tok(), text.get<std::string>(), true, m.config().max_seq_len, "prompt");
  if (ids.empty()) throw HttpError(400, "'prompt' is empty");
  return ids;
}

// One instance of the row format: a prompt string, a list of ids, or an object with "prompt"
// or "input_ids" and sampling parameters.
GenerationRequest instance_request(const ServedModel& m, const json& inst, const json& shared) {
  GenerationRequest r;
  json params = shared.is_object() ? shared : json::object();
  if (inst.is_string()) {
    r.prompt = encode(m, inst);
  } else if (inst.is_array()) {
    r.prompt = ids_of(inst, "input_ids");
  } else if (inst.is_object()) {
    const bool text = inst.contains("prompt"), ids = inst.contains("input_ids");
    if (text == ids)
      throw HttpError(400, "each instance needs exactly one of 'prompt' or 'input_ids'");
    r.prompt = text ? encode(m, inst["prompt"]) : ids_of(inst["input_ids"], "input_ids");
    for (const auto& [k, v] : inst.items()) {
      if (k == "prompt" || k == "input_ids") continue;
      if (!kParamFields.count(k)) throw HttpError(400, fmt::format("unknown input '{}'", k));
      params[k] = v;
    }
  } else {
    throw HttpError(400, "an instance must be a prompt string, a list of token ids or an object");
  }
  r.params = parse_sampling_params(params, false, 16);
  const int64_t room = fit_max_tokens(r.params, r.prompt.size(), m.config().max_seq_len, true);
  if (room < 1 || r.params.max_tokens > room) {
    throw HttpError(400, fmt::format("the prompt ({} tokens) and max_tokens ({}) exceed the "
                                     "model's context of {} tokens",
                                     r.prompt.size(), r.params.max_tokens, m.config().max_seq_len));
  }
  if (r.params.n != 1 || r.params.best_of)
    throw HttpError(400, "predict returns one sequence per instance: 'n' must be 1");
  return r;
}

json prediction(const GeneratedSequence& s, bool logprobs) {
  json p = {
      {"text", s.text}, {"output_ids", s.tokens}, {"finish_reason", finish_reason_name(s.finish)}};
  if (logprobs) {
    json lp = json::array();
    for (const auto& r : s.logprobs) lp.push_back(r.logprob);
    p["logprobs"] = lp;
  }
  return p;
}

void predict(ServingState& state, std::shared_ptr<ServedModel> model, const HttpRequest& req,
             std::shared_ptr<HttpResponder> responder, std::shared_ptr<RequestRecord> record) {
  auto plan = std::make_shared<PredictPlan>(
      plan_predict(state, std::move(model), parse_json_body(req.body), *record));
  // The job holds the version and the key's admission (through the plan) until it ends: an
  // unloading version finishes it.
  auto on_done = [=](const GenerationJob& job, bool client_gone) {
    const JobSummary summary = summarize(*plan, job, *record);
    record_job(summary, *record, plan->admission.get());
    if (client_gone) return log_request(*record, 499);
    if (summary.timed_out) {  // as completions answer it (before, a 200 with "abort")
      responder->send(504, tfserving_error_body(deadline_message(plan->time_limit)));
      return log_request(*record, 504);
    }
    responder->send(200, dump_json(predict_response(*plan, job)));
    log_request(*record, 200);
  };
  const ServedModel& m = *plan->model;
  GenerationJob::start(
      *m.engine, std::move(plan->requests), responder, state.jobs, nullptr, on_done,
      JobObserver{&state.metrics, {{"model", m.name}, {"version", std::to_string(m.version)}}});
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

std::shared_ptr<ServedModel> resolve_servable(ServingState& state, const std::string& name,
                                              std::optional<int64_t> version,
                                              const std::optional<std::string>& label,
                                              const ModelRegistry::HeaderFn& header) {
  const ModelPath p{name, version, label, false, ""};
  auto m = name.empty() ? nullptr : state.registry.resolve({name, version, label}, {}, header);
  if (!m) {
    if (label && state.registry.status(name))
      throw HttpError(404, fmt::format("Unrecognized servable version label: {}", *label));
    throw HttpError(404, fmt::format("Servable not found for request: {}", servable(p)));
  }
  return m;
}

PredictPlan plan_predict(ServingState& state, std::shared_ptr<ServedModel> model, const json& body,
                         RequestRecord& record,
                         std::optional<std::chrono::milliseconds> time_limit) {
  PredictPlan plan;
  plan.model = std::move(model);
  const ServedModel& m = *plan.model;
  record.model = m.name;
  record.version = m.version;
  if (!body.is_object()) throw HttpError(400, "the request body must be a JSON object");
  if (body.contains("signature_name") && body["signature_name"] != "serving_default" &&
      body["signature_name"] != "") {
    throw HttpError(400, fmt::format("Serving signature name: {} not found in signature def",
                                     body["signature_name"].dump()));
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
  plan.rows = rows;
  std::vector<GenerationRequest>& reqs = plan.requests;
  if (rows) {
    const json& inst = body["instances"];
    if (!inst.is_array() || inst.empty())
      throw HttpError(400, "'instances' must be a non-empty list");
    for (const auto& i : inst) reqs.push_back(instance_request(m, i, json()));
  } else {
    const json& in = body["inputs"];
    json shared = json::object();
    json prompts;
    if (in.is_object()) {
      for (const auto& [k, v] : in.items()) {
        if (k == "prompt" || k == "input_ids") continue;
        if (!kParamFields.count(k)) throw HttpError(400, fmt::format("unknown input '{}'", k));
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
    for (const auto& p : prompts) reqs.push_back(instance_request(m, p, shared));
  }
  if (record.access_log && record.access_log->log_prompts())
    record.prompt = dump_json(rows ? body["instances"] : body["inputs"]);
  for (auto& r : reqs) {
    r.id = random_id("predict-");
    record.prompt_tokens += static_cast<int64_t>(r.prompt.size());
  }
  // max_tokens counts as given: an instance's default is the completions default, not the context.
  plan.time_limit =
      std::min(time_limit.value_or(state.limits.max_request_time), state.limits.max_request_time);
  plan.admission = state.prepare(record, m.name, reqs, true, plan.time_limit);
  for (const auto& r : reqs) plan.logprobs.push_back(r.params.logprobs.has_value());
  return plan;
}

JobSummary summarize(const PredictPlan& plan, const GenerationJob& job,
                     const RequestRecord& record) {
  return summarize_job(job, ReturnRule{}, record.received, record.received + plan.time_limit);
}

json predict_response(const PredictPlan& plan, const GenerationJob& job) {
  json out;
  if (plan.rows) {
    json preds = json::array();
    for (size_t i = 0; i < job.num_prompts(); ++i)
      preds.push_back(prediction(job.results()[i].at(0), plan.logprobs[i]));
    out = {{"predictions", preds}};
  } else {
    json text = json::array(), ids = json::array(), finish = json::array(), lps = json::array();
    bool any_lp = false;
    for (size_t i = 0; i < job.num_prompts(); ++i) {
      const json p = prediction(job.results()[i].at(0), plan.logprobs[i]);
      text.push_back(p["text"]);
      ids.push_back(p["output_ids"]);
      finish.push_back(p["finish_reason"]);
      lps.push_back(p.value("logprobs", json::array()));
      any_lp = any_lp || plan.logprobs[i];
    }
    json o = {{"text", text}, {"output_ids", ids}, {"finish_reason", finish}};
    if (any_lp) o["logprobs"] = lps;
    out = {{"outputs", o}};
  }
  return out;
}

void handle_tfserving(ServingState& state, const ModelPath& path, const HttpRequest& req,
                      std::shared_ptr<HttpResponder> responder,
                      std::shared_ptr<RequestRecord> record) {
  if (!path.verb.empty()) {
    if (req.method != "POST") throw HttpError(405, fmt::format("use POST for :{}", path.verb));
    if (path.verb != "predict") {
      throw HttpError(400, fmt::format("':{}' is not supported: generation models serve ':predict'",
                                       path.verb));
    }
    auto m = resolve(state, path, req);
    record->version = m->version;
    responder->add_header("X-Model-Version", std::to_string(m->version));
    predict(state, m, req, std::move(responder), std::move(record));
    return;
  }
  if (req.method != "GET") throw HttpError(405, "use GET for model status and metadata");
  state.require_model_access(*record, path.name);
  record->model = path.name;
  record->model_unknown = !state.registry.status(path.name).has_value();
  json body;
  if (path.metadata) {
    const auto m = resolve(state, path, req);
    body = model_metadata(*m);
  } else {
    body = model_status(state, path);
    if (!path.version && !path.label) {
      // Also OpenAI's "retrieve model" on the same path (the latest available version).
      const auto versions = state.registry.available();
      for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
        if ((*it)->name != path.name) continue;
        const json model_object = openai_model_object(**it);
        for (auto f = model_object.begin(); f != model_object.end(); ++f) body[f.key()] = *f;
        break;
      }
    }
  }
  responder->send(200, dump_json(body));
  log_request(*record, 200);
}

}  // namespace tf
