#include "serving/tfserving/predict_plan.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "serving/models/model_tasks.h"

namespace tf {

PredictPlan plan_predict(ServingState& state, std::shared_ptr<ServedModel> model,
                         const PredictInput& input, RequestRecord& record,
                         std::optional<std::chrono::milliseconds> time_limit,
                         std::shared_ptr<const LoraAdapter> lora, const std::string& name) {
  PredictPlan plan;
  plan.model = std::move(model);
  const ServedModel& m = *plan.model;
  plan.name = lora ? name : m.name;
  record.model = plan.name;
  record.version = m.version;
  require_task(m, ModelTask::kGenerate);  // an encoder answers :classify and :regress
  plan.rows = input.rows;
  // The signature it names: ours, the generate signature's name, or TF Serving's default.
  const std::string& sig = input.signature_name;
  const bool named_ours = sig == kTokenflowSignature;
  if (!(sig.empty() || sig == "serving_default" || sig == m.generate.name ||
        (named_ours && !input.generate)))
    throw HttpError(400, fmt::format("Serving signature name: {} not found in signature def",
                                     nlohmann::json(sig).dump()));
  plan.signature = input.generate ? m.generate.name : kTokenflowSignature;
  if (input.generate) {
    const GenerateInput& g = *input.generate;
    GenerateSettings settings = m.generate.settings;
    settings.merge(g.settings);
    plan.generate = true;
    plan.generate_rows = g.rows;
    plan.pad_id = generate_pad_id(settings, m.eos_ids);
    if (m.config().encoder_decoder()) plan.decoder_start = m.config().decoder_start_id;
    plan.output_name = m.generate.output;
    const ModelConfig& cfg = m.config();
    for (size_t r = 0; r < g.rows.size(); ++r) {
      for (int32_t t : g.rows[r].ids) {
        if (t >= cfg.vocab_size)
          throw HttpError(400,
                          fmt::format("'input_ids' row {} holds {}, outside the vocabulary (0..{})",
                                      r, t, cfg.vocab_size - 1),
                          "", "input_ids");
      }
      GenerateRowParams rp = generate_row_params(settings, g.rows[r], r, m.eos_ids, cfg.max_seq_len,
                                                 cfg.encoder_decoder() ? cfg.decoder_start_id : -1);
      if (r == 0) plan.rule = {rp.sequences, std::nullopt, rp.params.beam_search()};
      CompletionRequest one;
      one.prompts.push_back({false, {}, g.rows[r].ids});
      one.params = rp.params;
      one.max_tokens_given = true;
      GenerationPlan planned = plan_request(one, m.tokenizer, cfg, random_id("predict-"));
      plan.requests.push_back(std::move(planned.requests[0]));
    }
  }
  for (const CompletionRequest& inst : input.instances) {
    GenerationPlan one = plan_request(inst, m.tokenizer, m.config(), random_id("predict-"));
    if (one.params.n != 1 || one.params.best_of || one.requests.size() != 1)
      throw HttpError(400, "predict returns one sequence per instance: 'n' must be 1");
    plan.requests.push_back(std::move(one.requests[0]));
  }
  for (auto& r : plan.requests) r.lora = lora;
  if (logs_prompts(record)) record.prompt = input.logged_prompt;
  for (const auto& r : plan.requests) record.prompt_tokens += static_cast<int64_t>(r.prompt.size());
  plan.time_limit =
      std::min(time_limit.value_or(state.limits.max_request_time), state.limits.max_request_time);
  // max_tokens counts as given: an instance's default is the completions default, not the context.
  plan.admission = state.prepare(record, plan.name, plan.requests, true, plan.time_limit);
  for (const auto& r : plan.requests) plan.logprobs.push_back(r.params.logprobs.has_value());
  return plan;
}

std::vector<std::vector<int32_t>> generate_answer(const PredictPlan& plan, const GenerationJob& job,
                                                  const JobSummary& summary) {
  std::vector<std::vector<std::vector<int32_t>>> tokens(plan.generate_rows.size());
  for (size_t r = 0; r < tokens.size(); ++r) {
    for (size_t k : summary.returned[r]) tokens[r].push_back(job.results()[r][k].tokens);
    // A row that ended without every sequence (aborted) still fills its rows of the answer.
    tokens[r].resize(static_cast<size_t>(plan.rule.n));
  }
  return generate_output(plan.generate_rows, tokens, plan.pad_id, plan.decoder_start);
}

}  // namespace tf
