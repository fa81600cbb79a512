#include "serving/openai/rerank_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

#include "core/random_id.h"
#include "serving/core/embedding_plan.h"
#include "serving/core/job_summary.h"
#include "serving/core/planner.h"
#include "serving/core/request_fields.h"
#include "serving/openai/openai_api.h"

namespace tf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr size_t kMaxRerankInputs = 1024;  // documents, pairs or inputs of one request

std::shared_ptr<ServedModel> rerank_model_of(ServingState& state, const HttpRequest& req,
                                             const json& body, RequestRecord& record) {
  auto m = resolve_model(state, record, string_field(body, "model"), string_field(body, "user"),
                         req.header_lookup());
  record.model = m->name;
  record.version = m->version;
  if (!m->tok())
    throw HttpError(400, fmt::format("model '{}' has no tokenizer", m->name), "", "model");
  return m;
}

void rerank_check_fields(const json& body, std::initializer_list<const char*> allowed) {
  const std::unordered_set<std::string> ok(allowed.begin(), allowed.end());
  check_known_fields(body, [&](const std::string& key) { return ok.count(key) > 0; });
}

// A string, or a list of strings, from field (documents may be {"text": ...} objects).
std::vector<std::string> rerank_texts_of(const json& body, const char* field, bool objects) {
  if (!present(body, field))
    throw HttpError(400, fmt::format("'{}' is required", field), "", field);
  const json& v = body[field];
  std::vector<std::string> out;
  auto one = [&](const json& x) {
    if (x.is_string()) return x.get<std::string>();
    if (objects && x.is_object() && x.contains("text") && x["text"].is_string())
      return x["text"].get<std::string>();
    throw HttpError(400,
                    fmt::format("'{}' must be a string or a list of strings{}", field,
                                objects ? " (or of {\"text\": ...} objects)" : ""),
                    "", field);
  };
  if (v.is_array()) {
    for (const auto& x : v) out.push_back(one(x));
  } else {
    out.push_back(one(v));
  }
  if (out.empty()) throw HttpError(400, fmt::format("'{}' must not be empty", field), "", field);
  if (out.size() > kMaxRerankInputs)
    throw HttpError(400,
                    fmt::format("'{}' holds {} texts; at most {} are allowed", field, out.size(),
                                kMaxRerankInputs),
                    "", field);
  for (const std::string& t : out)
    if (t.empty())
      throw HttpError(400, fmt::format("'{}' must not hold an empty text", field), "", field);
  return out;
}

// The request's truncation: "truncate" (cut to the first tokens), vLLM's
// "truncate_prompt_tokens" (keep the last k).
InputTruncation rerank_truncation_of(const json& body) {
  return {bool_field(body, "truncate", false), truncate_prompt_tokens_of(body)};
}

const std::vector<float>& rerank_scores_of(const GenerationJob& job, size_t i) {
  return job.results()[i].at(0).embedding;
}

ojson rerank_usage(const JobSummary& summary) {
  return {{"prompt_tokens", summary.prompt_tokens}, {"total_tokens", summary.prompt_tokens}};
}

// vLLM's list answer of /score and /classify.
std::string rerank_list_answer(const std::string& id, const std::string& name, ojson data,
                               const JobSummary& summary) {
  return dump_json(ojson{{"id", id},
                         {"object", "list"},
                         {"model", name},
                         {"data", std::move(data)},
                         {"usage", rerank_usage(summary)}});
}

}  // namespace

void handle_rerank(ServingState& state, const HttpRequest& req,
                   std::shared_ptr<HttpResponder> responder,
                   std::shared_ptr<RequestRecord> record) {
  const json body = parse_json_body(req.body);
  rerank_check_fields(body, {"model", "query", "documents", "top_n", "return_documents", "truncate",
                             "truncate_prompt_tokens", "instruction", "user"});
  auto model = rerank_model_of(state, req, body, *record);
  if (!present(body, "query") || !body["query"].is_string() ||
      body["query"].get<std::string>().empty())
    throw HttpError(400, "'query' must be a non-empty string", "", "query");
  const std::string query = body["query"].get<std::string>();
  const std::vector<std::string> docs = rerank_texts_of(body, "documents", true);
  int64_t top_n = static_cast<int64_t>(docs.size());
  if (present(body, "top_n")) {
    const json& t = body["top_n"];
    if (!t.is_number_integer() || t.get<int64_t>() < 1)
      throw HttpError(400, "'top_n' must be a positive integer", "", "top_n");
    top_n = std::min<int64_t>(t.get<int64_t>(), top_n);
  }
  const bool return_documents = bool_field(body, "return_documents", true);
  require_task(*model, ModelTask::kScore);
  const std::string instruction = string_field(body, "instruction");
  std::vector<ScoreInput> inputs;
  for (const std::string& d : docs)
    inputs.push_back(score_pair_input(*model, query, d, instruction));
  auto plan = plan_scores(state, model, ModelTask::kScore, std::move(inputs),
                          rerank_truncation_of(body), "documents", *record, random_id("rerank-"));
  responder->add_header("X-Model-Version", std::to_string(model->version));
  const std::string name = model->name, id = plan->requests.front().id;
  WholeBody answer = [docs, top_n, return_documents, name, id](const GenerationJob& job,
                                                               const JobSummary& summary) {
    std::vector<float> rel(docs.size());
    for (size_t i = 0; i < docs.size(); ++i) rel[i] = relevance_of(rerank_scores_of(job, i));
    std::vector<size_t> order(docs.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return rel[a] > rel[b]; });
    ojson results = ojson::array();
    for (int64_t k = 0; k < top_n; ++k) {
      const size_t i = order[static_cast<size_t>(k)];
      ojson r = {{"index", i}, {"relevance_score", rel[i]}};
      if (return_documents) r["document"] = {{"text", docs[i]}};
      results.push_back(std::move(r));
    }
    return dump_json(
        ojson{{"id", id}, {"model", name}, {"results", results}, {"usage", rerank_usage(summary)}});
  };
  run_job(state, plan, responder, record, whole_answer(responder, std::move(answer)));
}

void handle_score(ServingState& state, const HttpRequest& req,
                  std::shared_ptr<HttpResponder> responder, std::shared_ptr<RequestRecord> record) {
  const json body = parse_json_body(req.body);
  rerank_check_fields(body, {"model", "text_1", "text_2", "truncate", "truncate_prompt_tokens",
                             "instruction", "user"});
  auto model = rerank_model_of(state, req, body, *record);
  const std::vector<std::string> a = rerank_texts_of(body, "text_1", false);
  const std::vector<std::string> b = rerank_texts_of(body, "text_2", false);
  // vLLM's pairing: one text_1 against every text_2, or two lists of one length, pair by pair.
  if (a.size() != 1 && a.size() != b.size())
    throw HttpError(400,
                    fmt::format("'text_1' holds {} texts and 'text_2' {}: give one text_1, or "
                                "lists of the same length",
                                a.size(), b.size()),
                    "", "text_1");
  require_task(*model, ModelTask::kScore);
  const std::string instruction = string_field(body, "instruction");
  std::vector<ScoreInput> inputs;
  for (size_t i = 0; i < b.size(); ++i)
    inputs.push_back(score_pair_input(*model, a.size() == 1 ? a[0] : a[i], b[i], instruction));
  auto plan = plan_scores(state, model, ModelTask::kScore, std::move(inputs),
                          rerank_truncation_of(body), "text_2", *record, random_id("score-"));
  responder->add_header("X-Model-Version", std::to_string(model->version));
  const std::string name = model->name, id = plan->requests.front().id;
  const size_t n = b.size();
  WholeBody answer = [n, name, id](const GenerationJob& job, const JobSummary& summary) {
    ojson data = ojson::array();
    for (size_t i = 0; i < n; ++i)
      data.push_back(
          {{"index", i}, {"object", "score"}, {"score", relevance_of(rerank_scores_of(job, i))}});
    return rerank_list_answer(id, name, std::move(data), summary);
  };
  run_job(state, plan, responder, record, whole_answer(responder, std::move(answer)));
}

void handle_classify(ServingState& state, const HttpRequest& req,
                     std::shared_ptr<HttpResponder> responder,
                     std::shared_ptr<RequestRecord> record) {
  const json body = parse_json_body(req.body);
  rerank_check_fields(body, {"model", "input", "truncate", "truncate_prompt_tokens", "user"});
  auto model = rerank_model_of(state, req, body, *record);
  require_task(*model, ModelTask::kClassify);
  const std::vector<std::string> texts = rerank_texts_of(body, "input", false);
  std::vector<ScoreInput> inputs;
  for (const std::string& t : texts) inputs.push_back({model->tok()->encode(t, true), {}});
  auto plan = plan_scores(state, model, ModelTask::kClassify, std::move(inputs),
                          rerank_truncation_of(body), "input", *record, random_id("classify-"));
  responder->add_header("X-Model-Version", std::to_string(model->version));
  const std::string name = model->name, id = plan->requests.front().id;
  const std::vector<std::string> labels = model->config().labels;
  const size_t n = texts.size();
  WholeBody answer = [n, name, id, labels](const GenerationJob& job, const JobSummary& summary) {
    ojson data = ojson::array();
    for (size_t i = 0; i < n; ++i) {
      const std::vector<float> probs = label_probabilities(rerank_scores_of(job, i));
      const size_t best =
          static_cast<size_t>(std::max_element(probs.begin(), probs.end()) - probs.begin());
      data.push_back(
          {{"index", i},
           {"label", best < labels.size() ? labels[best] : fmt::format("LABEL_{}", best)},
           {"probs", probs},
           {"num_classes", probs.size()}});
    }
    return rerank_list_answer(id, name, std::move(data), summary);
  };
  run_job(state, plan, responder, record, whole_answer(responder, std::move(answer)));
}

}  // namespace tf
