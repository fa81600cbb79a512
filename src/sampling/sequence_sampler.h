#pragma once
// Everything that happens to one sequence between two forward passes: run the processors on its
// logits row, draw the next token with its own counter-based randomness, extend its history,
// turn the token into text, and decide whether it is finished (EOS, stop token, stop string,
// max_tokens). The engine keeps one per running sequence; `tokenflow generate` uses it directly.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sampling/grammar.h"
#include "sampling/grammar_worker.h"
#include "sampling/logits_processor.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"
#include "sampling/stop_checker.h"
#include "tokenizer/tokenizer.h"

namespace tf {

enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", ""

struct StepOutput {
  SampleResult sample;  // token, logprob, top alternatives
  std::string text;     // text that became final with this step (may be empty)
  FinishReason finish = FinishReason::kNone;
  // Nothing was drawn: the grammar's mask is being computed by the GrammarWorker; resume()
  // draws from the same row once mask_ready().
  bool deferred = false;
};

class SequenceSampler {
 public:
  // `stream` tells apart the sequences of one request (n > 1): each draws its own numbers from
  // the request's seed. `tokenizer` may be null (no text, no stop strings). eos_ids end the
  // sequence unless params.ignore_eos.
  SequenceSampler(const SamplingParams& params, uint64_t seed, uint64_t stream,
                  std::span<const int32_t> prompt, const Tokenizer* tokenizer,
                  std::vector<int32_t> eos_ids);

  // Processes `logits` in place, samples, and advances. Call only while !finished(). With a
  // worker set, a grammar mask that takes longer than a short inline attempt is handed to it
  // and the result is deferred (out.deferred; the processed row is kept for resume()).
  StepOutput step(std::span<float> logits);
  void set_worker(GrammarWorker* worker) { worker_ = worker; }
  // Whether a deferred step can be resumed now (its mask is computed, or failed).
  bool mask_ready() const;
  // Finishes a deferred step from its kept row: the same token step() would have drawn. Still
  // deferred while !mask_ready(); throws the mask's error (a budget used up).
  StepOutput resume();
  // Ends the sequence from outside (client gone, deadline): releases held-back text.
  StepOutput abort();

  // Speculative decoding with a draft model. draft(): the distribution this sequence draws
  // from (the processors with its history so far, temperature and truncation; no grammar mask)
  // applied to a draft model's logits, written dense into q (vocab entries, zero outside the
  // kept tokens), and a token drawn from it with the draft's own uniforms for the proposal
  // `ahead` positions on. Greedy: a point mass at the processed argmax (q is not written).
  // Changes nothing but the logits row.
  int32_t draft(std::span<float> logits, int64_t ahead, std::span<float> q);
  // Verifies a proposal drawn from q: processes `logits` as step() does (grammar included) into
  // the target distribution p, accepts `proposal` with probability min(1, p/q) and otherwise
  // draws from the residual max(0, p - q) normalized (Leviathan et al., 2023; Chen et al.,
  // 2023), so that the emitted token is distributed exactly as p. Then advances as step().
  StepOutput verify(std::span<float> logits, int32_t proposal, std::span<const float> q);

  bool finished() const { return finish_ != FinishReason::kNone; }
  bool greedy() const { return params_.greedy(); }
  FinishReason finish_reason() const { return finish_; }
  const TokenHistory& history() const { return history_; }
  const std::vector<int32_t>& output() const { return history_.output(); }
  // Sum of the chosen tokens' logprobs (computed when logprobs or best_of > n ask for it).
  double cumulative_logprob() const { return cumulative_logprob_; }
  const std::string& text() const { return text_; }  // all final text so far

 private:
  std::string flush_text();
  // Appends the chosen token and decides whether the sequence finished (out.sample is filled).
  void advance(StepOutput& out);
  // Masks the tokens the grammar refuses now (end-of-sequence ids: allowed where it may end).
  void apply_mask(std::span<float> logits, const std::vector<uint64_t>& allowed);
  // The mask for the grammar's state now: computed inline, taken from the worker's finished
  // job, or (false) handed to the worker or still being computed there.
  bool obtain_mask(std::vector<uint64_t>& mask);
  // Runs fn (the grammar's work) under params_.grammar_budget: throws Error (kResourceExhausted)
  // once this step's or the sequence's budget is used up; the time counts either way.
  // inline_only: GrammarYield after the budget's inline_time instead (the worker takes over).
  template <class Fn>
  void within_budget(Fn fn, bool inline_only = false);
  // When the budgets run out, counted from start, and which one that is.
  std::pair<ThreadCpuClock::time_point, std::string> budget_end(
      ThreadCpuClock::time_point start) const;

  struct PendingMask {  // a mask the worker computes
    std::atomic<bool> done{false};
    std::vector<uint64_t> mask;
    std::exception_ptr error;
    ThreadCpuClock::duration spent{};
  };

  // The think block's budget (params_.thinking): the token forced next, if any; and the state
  // moved on by the token drawn.
  std::optional<int32_t> forced_thinking_token() const;
  void apply_thinking_budget(std::span<float> logits) const;
  void advance_thinking(int32_t token);
  enum class Thinking { kOff, kBefore, kInside, kClosing, kClosed };

  SamplingParams params_;
  Thinking thinking_ = Thinking::kOff;
  int32_t thinking_tokens_ = 0;  // generated inside the block so far
  size_t closing_at_ = 0;        // kClosing: how much of params_.thinking.end is written
  uint64_t seed_, stream_;
  std::vector<int32_t> eos_ids_;
  TokenHistory history_;
  Sampler sampler_;
  std::optional<IncrementalDetokenizer> detok_;
  std::optional<GrammarMatcher> grammar_;
  StopChecker stops_;
  FinishReason finish_ = FinishReason::kNone;
  double cumulative_logprob_ = 0.0;
  std::string text_;
  // The grammar's time this step (the mask and the token's accept) and in all steps so far.
  ThreadCpuClock::duration grammar_step_{}, grammar_total_{};
  bool grammar_stop_ = false;  // the grammar left only an end: the token drawn ends it
  GrammarWorker* worker_ = nullptr;
  std::shared_ptr<PendingMask> pending_;
  std::vector<float> deferred_row_;  // a deferred step's processed logits
  SamplingParams logprob_params_;    // params with logprobs forced on (for best_of ranking)
};

}  // namespace tf
