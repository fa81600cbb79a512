#include "serving/core/embedding_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "serving/core/prompt.h"

namespace tf {
namespace {

// A plan of requests that generate nothing (embeddings, scores): its prompts kept for the
// job, the server's time limit, admitted by the server's rules (prepare).
void admit_pooling_plan(ServingState& state, GenerationPlan& plan, RequestRecord& record) {
  plan.prompts.reserve(plan.requests.size());
  for (const auto& r : plan.requests) plan.prompts.push_back(r.prompt);
  plan.time_limit = state.limits.max_request_time;
  plan.admission = state.prepare(record, plan.model->name, plan.requests,
                                 /*max_tokens_given=*/true, plan.time_limit);
}

}  // namespace

std::shared_ptr<GenerationPlan> plan_embeddings(ServingState& state,
                                                std::shared_ptr<ServedModel> model,
                                                const EmbeddingInputs& in, RequestRecord& record,
                                                const std::string& id) {
  auto plan = std::make_shared<GenerationPlan>();
  plan->model = std::move(model);
  const ServedModel& m = *plan->model;
  const int64_t ctx = m.config().max_seq_len;
  const char* field = in.field.c_str();
  // A decoder keeps room for one token past the prompt; an encoder takes its whole context.
  const bool encoder = m.config().encoder_only();
  const int64_t limit = encoder ? ctx : ctx - 1;
  Pooling pooling = Pooling::kLast;
  if (in.pooling) {
    pooling = *in.pooling;
  } else if (encoder) {
    const std::string& p = m.config().embedding_pooling;
    pooling = p == "mean"   ? Pooling::kMean
              : p == "max"  ? Pooling::kMax
              : p == "last" ? Pooling::kLast
                            : Pooling::kCls;
  }
  if (!encoder && (pooling == Pooling::kCls || pooling == Pooling::kMax))
    throw HttpError(400,
                    fmt::format("'pooling' cls and max are for encoder models; '{}' is a "
                                "generator (last or mean)",
                                m.name),
                    "", "pooling");
  for (size_t i = 0; i < in.inputs.size(); ++i) {
    GenerationRequest r;
    r.id = in.inputs.size() == 1 ? id : fmt::format("{}-{}", id, i);
    r.pooling = pooling;
    const PromptInput& input = in.inputs[i];
    if (!input.is_text) {
      r.prompt = input.ids;
    } else {
      if (input.text.empty())
        throw HttpError(400, fmt::format("'{}' must not hold an empty string", field), "", field);
      if (!m.tok())
        throw HttpError(400, fmt::format("model '{}' has no tokenizer", m.name), "", "model");
      try {
        r.prompt = encode_prompt(*m.tok(), input.text, in.add_special_tokens, in.truncate ? 0 : ctx,
                                 field);
      } catch (const HttpError&) {
        throw;
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::kInternal) throw;
        throw HttpError(400, e.what(), "", field);
      }
    }
    if (r.prompt.empty())
      throw HttpError(400, fmt::format("'{}' must not hold an empty list of tokens", field), "",
                      field);
    for (int32_t t : r.prompt)
      if (t < 0 || t >= m.config().vocab_size)
        throw HttpError(400,
                        fmt::format("{} token id {} is outside the vocabulary (0..{})", field, t,
                                    m.config().vocab_size - 1),
                        "", field);
    if (static_cast<int64_t>(r.prompt.size()) > limit) {
      if (!in.truncate)
        throw HttpError(400,
                        fmt::format("This model's maximum context length is {} tokens, {} {} "
                                    "has {} tokens",
                                    ctx, field, i, r.prompt.size()),
                        "context_length_exceeded", field);
      r.prompt.resize(static_cast<size_t>(limit));  // a decoder keeps room for one token
    }
    r.params.max_tokens = 1;  // nothing is generated; the engine checks the room for one
    record.prompt_tokens += static_cast<int64_t>(r.prompt.size());
    plan->requests.push_back(std::move(r));
  }
  admit_pooling_plan(state, *plan, record);
  return plan;
}

std::shared_ptr<GenerationPlan> plan_scores(ServingState& state, std::shared_ptr<ServedModel> model,
                                            std::vector<ScoreInput> inputs, bool truncate,
                                            const char* field, RequestRecord& record,
                                            const std::string& id) {
  auto plan = std::make_shared<GenerationPlan>();
  plan->model = std::move(model);
  const ServedModel& m = *plan->model;
  const ModelConfig& c = m.config();
  if (!c.encoder_only() || c.classifier == ModelConfig::Classifier::kNone)
    throw HttpError(400,
                    fmt::format("model '{}' ({}) has no classifier head: it cannot score or "
                                "classify (a cross-encoder or sequence classifier can)",
                                m.name, c.architecture),
                    "", "model");
  for (size_t i = 0; i < inputs.size(); ++i) {
    ScoreInput& in = inputs[i];
    if (in.ids.empty())
      throw HttpError(400, fmt::format("'{}' must not hold an empty text", field), "", field);
    if (static_cast<int64_t>(in.ids.size()) > c.max_seq_len) {
      if (!truncate)
        throw HttpError(400,
                        fmt::format("This model's maximum context length is {} tokens, {} {} "
                                    "has {} tokens (set \"truncate\": true to cut it)",
                                    c.max_seq_len, field, i, in.ids.size()),
                        "context_length_exceeded", field);
      in.ids.resize(static_cast<size_t>(c.max_seq_len));
      if (!in.types.empty()) in.types.resize(in.ids.size());
    }
    GenerationRequest r;
    r.id = inputs.size() == 1 ? id : fmt::format("{}-{}", id, i);
    r.scores = true;
    r.prompt = std::move(in.ids);
    r.token_types = std::move(in.types);
    r.params.max_tokens = 1;
    record.prompt_tokens += static_cast<int64_t>(r.prompt.size());
    plan->requests.push_back(std::move(r));
  }
  admit_pooling_plan(state, *plan, record);
  return plan;
}

std::vector<float> label_probabilities(const std::vector<float>& scores) {
  if (scores.size() == 1) return {1.0f / (1.0f + std::exp(-scores[0]))};
  std::vector<float> probs(scores.size());
  if (scores.empty()) return probs;
  const float top = *std::max_element(scores.begin(), scores.end());
  double sum = 0.0;
  for (float s : scores) sum += std::exp(static_cast<double>(s - top));
  for (size_t k = 0; k < scores.size(); ++k)
    probs[k] = static_cast<float>(std::exp(static_cast<double>(scores[k] - top)) / sum);
  return probs;
}

float relevance_of(const std::vector<float>& scores) {
  return scores.empty() ? 0.0f : label_probabilities(scores).back();
}

void normalize_embedding(std::vector<float>& e) {
  double norm = 0.0;
  for (float x : e) norm += static_cast<double>(x) * x;
  norm = std::sqrt(norm);
  if (norm > 0)
    for (float& x : e) x = static_cast<float>(x / norm);
}

}  // namespace tf
