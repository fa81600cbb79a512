#include "serving/core/embedding_plan.h"

#include <fmt/format.h>

#include <cmath>

#include "serving/core/prompt.h"

namespace tf {

std::shared_ptr<GenerationPlan> plan_embeddings(ServingState& state,
                                                std::shared_ptr<ServedModel> model,
                                                const EmbeddingInputs& in, RequestRecord& record,
                                                const std::string& id) {
  auto plan = std::make_shared<GenerationPlan>();
  plan->model = std::move(model);
  const ServedModel& m = *plan->model;
  const int64_t ctx = m.config().max_seq_len;
  const char* field = in.field.c_str();
  for (size_t i = 0; i < in.inputs.size(); ++i) {
    GenerationRequest r;
    r.id = in.inputs.size() == 1 ? id : fmt::format("{}-{}", id, i);
    r.pooling = in.pooling;
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
    if (static_cast<int64_t>(r.prompt.size()) >= ctx) {
      if (!in.truncate)
        throw HttpError(400,
                        fmt::format("This model's maximum context length is {} tokens, {} {} "
                                    "has {} tokens",
                                    ctx, field, i, r.prompt.size()),
                        "context_length_exceeded", field);
      r.prompt.resize(static_cast<size_t>(ctx - 1));  // the engine keeps room for one token
    }
    r.params.max_tokens = 1;  // nothing is generated; the engine checks the room for one
    record.prompt_tokens += static_cast<int64_t>(r.prompt.size());
    plan->requests.push_back(std::move(r));
  }
  plan->prompts.reserve(plan->requests.size());
  for (const auto& r : plan->requests) plan->prompts.push_back(r.prompt);
  plan->time_limit = state.limits.max_request_time;
  plan->admission =
      state.prepare(record, m.name, plan->requests, /*max_tokens_given=*/true, plan->time_limit);
  return plan;
}

void normalize_embedding(std::vector<float>& e) {
  double norm = 0.0;
  for (float x : e) norm += static_cast<double>(x) * x;
  norm = std::sqrt(norm);
  if (norm > 0)
    for (float& x : e) x = static_cast<float>(x / norm);
}

}  // namespace tf
