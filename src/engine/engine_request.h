#pragma once
// A request inside the engine: what the client asked for, its sequences (a SequenceGroup), and
// the stream its results go to.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "engine/sequence.h"
#include "engine/sequence_group.h"
#include "model/lora.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"

namespace tf {

using Clock = std::chrono::steady_clock;

// How an embedding request pools the prompt's final hidden states (after the final norm): a
// decoder's last token or mean; an encoder's also its first ([CLS]) or the elementwise max.
enum class Pooling { kNone, kLast, kMean, kCls, kMax };
// "last", "mean", "cls", "max" as a Pooling; nullopt for anything else.
inline std::optional<Pooling> pooling_named(std::string_view name) {
  if (name == "last") return Pooling::kLast;
  if (name == "mean") return Pooling::kMean;
  if (name == "cls") return Pooling::kCls;
  if (name == "max") return Pooling::kMax;
  return std::nullopt;
}

// A prompt token's log-probability given the tokens before it (vLLM's prompt_logprobs).
struct PromptLogprob {
  SampleResult sample;  // token: the prompt's token; top: the most likely there
  int32_t rank = 0;     // 1: the model's most likely token at that position
};

// What submit() takes.
struct GenerationRequest {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
  int32_t priority = 0;     // lower runs first; FCFS within a priority
  uint64_t cache_salt = 0;  // prefix-cache blocks are shared only within one salt
  // Waiting sequences are admitted in fair turns between tenants (an API key) within a
  // priority, and a tenant's turns go round between its groups (the API requests: every
  // prompt of one HTTP or gRPC request shares a group). Tenant 0: the group is the tenant; both
  // 0: the request is a tenant of its own.
  uint64_t tenant = 0;
  uint64_t group = 0;
  // Past this moment the request ends as if cancelled (finish reason abort, blocks freed),
  // waiting or running; the epoch (default) means none.
  std::chrono::steady_clock::time_point deadline{};
  // Set: the log-probability of every prompt token after the first, with this many top
  // alternatives, in the request's first output. The prompt is then computed in full (no prefix
  // cache hits: a cached position has no logits).
  std::optional<int32_t> prompt_logprobs;
  // Not kNone: an embedding request. The prompt is computed, its hidden states pooled into the
  // last output's embedding, and nothing is generated (sampling parameters are ignored).
  Pooling pooling = Pooling::kNone;
  // An encoder's input may carry token type ids (a text pair: the second text's are 1), as
  // many as the prompt's tokens; empty: all 0.
  std::vector<int32_t> token_types;
  // An encoder with a classifier head: its scores (logits, one per label) instead of an
  // embedding, in the output's embedding field.
  bool scores = false;
  // A generator scoring its prompt (a reranker such as Qwen3-Reranker: "no" and "yes"): the
  // logits of these tokens after the prompt's last position, in the output's embedding field;
  // nothing is generated.
  std::vector<int32_t> score_tokens;
  // Speculative decoding, when the engine has it on: false turns it off for this request.
  bool speculate = true;
  // The LoRA adapter the request runs with (loaded for the engine's model), or none: its
  // sequences' rows get the adapter's corrections, and their prefix-cache blocks are keyed by it
  // (blocks of one adapter never serve another, nor the base).
  std::shared_ptr<const LoraAdapter> lora;

  // Every prompt position needs its row of the forward pass, not only the last.
  bool all_prompt_rows() const { return prompt_logprobs.has_value() || pooling == Pooling::kMean; }
};

// Fits max_tokens to the context, the one rule of every door: lowered to the room the prompt
// leaves when the caller gave none, and min_tokens kept at most max_tokens. Returns the room
// (context - prompt tokens); the caller refuses room < 1 or max_tokens > room in its own words.
inline int64_t fit_max_tokens(SamplingParams& params, size_t prompt_tokens, int64_t context,
                              bool max_tokens_given) {
  const int64_t room = context - static_cast<int64_t>(prompt_tokens);
  if (!max_tokens_given && room >= 0)
    params.max_tokens = static_cast<int32_t>(std::min<int64_t>(params.max_tokens, room));
  params.min_tokens = std::min(params.min_tokens, params.max_tokens);
  return room;
}

// One event of a request's stream.
struct RequestOutput {
  int32_t index = 0;                   // which of the request's sequences
  std::vector<int32_t> token_ids;      // new tokens
  std::string text;                    // new final text
  std::vector<SampleResult> logprobs;  // per new token, when asked for
  FinishReason finish = FinishReason::kNone;
  double cumulative_logprob = 0.0;  // set with finish (when logprobs or best_of ask for it)
  bool request_done = false;        // the last event of the request
  // The prompt's logprobs (positions 1..), in the request's first output when asked for.
  std::vector<PromptLogprob> prompt_logprobs;
  // An embedding request's pooled hidden state (its last output); an encoder's classifier
  // scores when the request asked for scores.
  std::vector<float> embedding;
  // Set (with finish kAbort) when the engine failed while running the request, not a
  // cancellation: what clients may be told. error_kind kInternal: a server error (500 /
  // INTERNAL; the log has the cause); another kind: the request's own input failed (a grammar
  // past its budget: 400 / RESOURCE_EXHAUSTED), and error says why.
  std::string error;
  ErrorKind error_kind = ErrorKind::kInternal;
};

struct RequestTimings {
  Clock::time_point arrival, first_scheduled, first_token, finished;
  int64_t prompt_tokens = 0, cached_prompt_tokens = 0, generated_tokens = 0;
};

// The client's side: a thread-safe queue of outputs, and cancellation.
class RequestStream {
 public:
  // Blocks until an output is available; false once the request is done and drained.
  bool next(RequestOutput& out);
  // As next(), but gives up after the timeout (returns false with timed_out set).
  bool next_for(RequestOutput& out, std::chrono::milliseconds timeout, bool& timed_out);
  // Never blocks: false when nothing is queued now (then done() says whether more will come).
  bool try_next(RequestOutput& out);
  bool done() const;
  // Called after every push, on the engine's thread (so it must be quick: post work elsewhere),
  // and once at once if outputs are already queued. For readers that do not block on next().
  void set_listener(std::function<void()> listener);
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  RequestTimings timings() const;

  // Engine side.
  void push(RequestOutput out);
  void set_timings(const RequestTimings& t);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  bool done_ = false;
  std::function<void()> listener_;
  std::atomic<bool> cancelled_{false};
  RequestTimings timings_;
};

struct EngineRequest {
  GenerationRequest spec;
  uint64_t seed = 0;
  uint64_t arrival_order = 0;
  SequenceGroup group;
  std::shared_ptr<RequestStream> stream;
  RequestTimings timings;
  bool queued = true;  // counted in the engine's queue until first scheduled
  // Gathered while the prompt is computed (positions in order; a recompute after preemption
  // adds nothing already gathered): prompt logprobs, and the hidden states' sum for mean pooling.
  std::vector<PromptLogprob> prompt_logprobs;
  bool prompt_logprobs_sent = false;
  std::vector<double> pooled_sum;
  int64_t pooled_positions = 0;
};

// The last event of a request that ended without a result (cancelled, engine stopped or failed).
inline RequestOutput aborted_output() {
  RequestOutput out;
  out.finish = FinishReason::kAbort;
  out.request_done = true;
  return out;
}
// The last event of a request the engine failed on.
inline RequestOutput failed_output() {
  RequestOutput out = aborted_output();
  out.error = "internal error: the model failed while generating (the server log has the cause)";
  return out;
}

}  // namespace tf
