#include "sampling/sequence_sampler.h"

#include <algorithm>

namespace tf {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kNone:
      return "";
  }
  return "";
}

SequenceSampler::SequenceSampler(const SamplingParams& params, uint64_t seed, uint64_t stream,
                                 std::span<const int32_t> prompt, const Tokenizer* tokenizer,
                                 std::vector<int32_t> eos_ids)
    : params_(params),
      seed_(seed),
      stream_(stream),
      eos_ids_(std::move(eos_ids)),
      history_(prompt),
      stops_(params.stop, params.include_stop_str_in_output),
      logprob_params_(params) {
  if (tokenizer) detok_.emplace(*tokenizer, prompt, params.skip_special_tokens);
  // best_of ranks candidates by cumulative logprob, so it needs the chosen token's logprob.
  if (!logprob_params_.logprobs && params.candidates() > params.n) logprob_params_.logprobs = 0;
}

std::string SequenceSampler::flush_text() {
  std::string out;
  if (detok_) out = stops_.push(detok_->flush());
  out += stops_.flush();
  return out;
}

StepOutput SequenceSampler::step(std::span<float> logits) {
  StepOutput out;
  if (finished()) return out;
  apply_logits_processors(params_, history_, eos_ids_, logits);
  const double u = sample_uniform(seed_, stream_, history_.output().size());
  out.sample = sampler_.sample(logprob_params_, logits, u);
  if (!params_.logprobs) out.sample.top.clear();
  const int32_t token = out.sample.token;
  cumulative_logprob_ += out.sample.logprob;
  history_.append(token);

  const bool is_eos =
      !params_.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
  const bool is_stop_token = std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(),
                                       token) != params_.stop_token_ids.end();
  if (is_eos || is_stop_token) {
    // The ending token's own text is not shown (it is usually special anyway).
    finish_ = FinishReason::kStop;
    out.text = flush_text();
  } else {
    if (detok_) out.text = stops_.push(detok_->push(token));
    if (stops_.stopped()) {
      finish_ = FinishReason::kStop;
    } else if (static_cast<int32_t>(history_.output().size()) >= params_.max_tokens) {
      finish_ = FinishReason::kLength;
      out.text += flush_text();
    }
  }
  out.finish = finish_;
  text_ += out.text;
  return out;
}

StepOutput SequenceSampler::abort() {
  StepOutput out;
  if (finished()) return out;
  finish_ = FinishReason::kAbort;
  out.text = flush_text();
  out.finish = finish_;
  text_ += out.text;
  return out;
}

}  // namespace tf
