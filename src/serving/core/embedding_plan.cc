#include "serving/core/embedding_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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

// ids cut to limit as truncation says, or a 400 naming field and the limit.
void fit_input(std::vector<int32_t>& ids, std::vector<int32_t>* types, int64_t limit, int64_t ctx,
               const InputTruncation& t, const char* field, size_t index) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (t.keep_last) {
    const int64_t keep = *t.keep_last < 0 ? limit : std::min(*t.keep_last, limit);
    if (n > keep) {
      ids.erase(ids.begin(), ids.end() - keep);
      if (types && !types->empty()) types->erase(types->begin(), types->end() - keep);
    }
    return;
  }
  if (n <= limit) return;
  if (!t.first)
    throw HttpError(400,
                    fmt::format("This model's maximum context length is {} tokens, {} {} has {} "
                                "tokens (set \"truncate\": true or \"truncate_prompt_tokens\" to "
                                "cut it)",
                                ctx, field, index, n),
                    "context_length_exceeded", field);
  ids.resize(static_cast<size_t>(limit));
  if (types && !types->empty()) types->resize(ids.size());
}

}  // namespace

std::optional<int64_t> truncate_prompt_tokens_of(const nlohmann::json& body) {
  auto it = body.find("truncate_prompt_tokens");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() || (it->get<int64_t>() < 1 && it->get<int64_t>() != -1))
    throw HttpError(400, "'truncate_prompt_tokens' must be a positive integer or -1", "",
                    "truncate_prompt_tokens");
  return it->get<int64_t>();
}

std::shared_ptr<GenerationPlan> plan_embeddings(ServingState& state,
                                                std::shared_ptr<ServedModel> model,
                                                const EmbeddingInputs& in, RequestRecord& record,
                                                const std::string& id) {
  auto plan = std::make_shared<GenerationPlan>();
  plan->model = std::move(model);
  const ServedModel& m = *plan->model;
  require_task(m, ModelTask::kEmbed);
  (void)checked_dimensions(m, in.dimensions);
  const int64_t ctx = m.config().max_seq_len;
  const char* field = in.field.c_str();
  // A decoder keeps room for one token past the prompt; an encoder takes its whole context.
  const bool encoder = m.config().encoder_only();
  const int64_t limit = encoder ? ctx : ctx - 1;
  Pooling pooling = Pooling::kLast;
  if (in.pooling || m.pooling) {
    pooling = in.pooling ? *in.pooling : *m.pooling;
  } else if (encoder || !m.config().embedding_pooling.empty()) {
    // The model's files' (CLS where an encoder's say nothing).
    pooling = pooling_named(m.config().embedding_pooling).value_or(Pooling::kCls);
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
        r.prompt = encode_prompt(*m.tok(), input.text, in.add_special_tokens,
                                 in.truncate || in.truncate_prompt_tokens ? 0 : ctx, field);
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
    fit_input(r.prompt, nullptr, limit, ctx, {in.truncate, in.truncate_prompt_tokens}, field, i);
    r.params.max_tokens = 1;  // nothing is generated; the engine checks the room for one
    record.prompt_tokens += static_cast<int64_t>(r.prompt.size());
    plan->requests.push_back(std::move(r));
  }
  admit_pooling_plan(state, *plan, record);
  return plan;
}

ScoreInput score_pair_input(const ServedModel& m, const std::string& a, const std::string& b,
                            const std::string& instruction) {
  ScoreInput in;
  if (m.score_tokens.empty()) {
    m.tok()->encode_pair(a, b, in.ids, in.types);
    return in;
  }
  if (a.starts_with("<|im_start|>")) {
    in.ids = m.tok()->encode(a + b, true);
    return in;
  }
  static constexpr const char* kDefaultInstruction =
      "Given a web search query, retrieve relevant passages that answer the query";
  const std::string text = fmt::format(
      "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
      "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\"."
      "<|im_end|>\n<|im_start|>user\n<Instruct>: {}\n<Query>: {}\n<Document>: {}<|im_end|>\n"
      "<|im_start|>assistant\n<think>\n\n</think>\n\n",
      instruction.empty() ? kDefaultInstruction : instruction, a, b);
  in.ids = m.tok()->encode(text, true);
  return in;
}

std::shared_ptr<GenerationPlan> plan_scores(ServingState& state, std::shared_ptr<ServedModel> model,
                                            ModelTask task, std::vector<ScoreInput> inputs,
                                            const InputTruncation& truncation, const char* field,
                                            RequestRecord& record, const std::string& id) {
  auto plan = std::make_shared<GenerationPlan>();
  plan->model = std::move(model);
  const ServedModel& m = *plan->model;
  const ModelConfig& c = m.config();
  require_task(m, task);
  const bool generator = !m.score_tokens.empty();
  // A generator keeps room for the token its engine checks for; an encoder takes its context.
  const int64_t limit = generator ? c.max_seq_len - 1 : c.max_seq_len;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ScoreInput& in = inputs[i];
    if (in.ids.empty())
      throw HttpError(400, fmt::format("'{}' must not hold an empty text", field), "", field);
    fit_input(in.ids, &in.types, limit, c.max_seq_len, truncation, field, i);
    GenerationRequest r;
    r.id = inputs.size() == 1 ? id : fmt::format("{}-{}", id, i);
    r.prompt = std::move(in.ids);
    if (generator) {
      r.score_tokens = m.score_tokens;
    } else {
      r.scores = true;
      r.token_types = std::move(in.types);
    }
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

std::optional<int64_t> checked_dimensions(const ServedModel& m, std::optional<int64_t> d,
                                          const char* field) {
  const ModelConfig& c = m.config();
  if (!d || *d == c.dim) return std::nullopt;
  const auto& listed = c.matryoshka_dims;
  const bool declared = !listed.empty() || c.matryoshka;
  const bool fits = *d >= 1 && *d < c.dim &&
                    (listed.empty() || std::find(listed.begin(), listed.end(), *d) != listed.end());
  if (declared && fits) return d;
  if (!declared)
    throw HttpError(400,
                    fmt::format("'{}' {} is not supported: model '{}' embeds in {} dimensions and "
                                "its config declares no Matryoshka dimensions to cut them to",
                                field, *d, m.name, c.dim),
                    "unsupported_parameter", field);
  throw HttpError(
      400,
      fmt::format(
          "'{}' {} is not one of model '{}''s Matryoshka dimensions ({}{})", field, *d, m.name,
          listed.empty() ? fmt::format("1..{}", c.dim) : fmt::format("{}", fmt::join(listed, ", ")),
          listed.empty() ? "" : fmt::format(", {}", c.dim)),
      "unsupported_parameter", field);
}

void shape_embedding(std::vector<float>& e, std::optional<int64_t> dims, bool normalize) {
  if (dims && *dims < static_cast<int64_t>(e.size())) e.resize(static_cast<size_t>(*dims));
  if (normalize) normalize_embedding(e);
}

void normalize_embedding(std::vector<float>& e) {
  double norm = 0.0;
  for (float x : e) norm += static_cast<double>(x) * x;
  norm = std::sqrt(norm);
  if (norm > 0)
    for (float& x : e) x = static_cast<float>(x / norm);
}

}  // namespace tf
