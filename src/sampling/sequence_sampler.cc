#include "sampling/sequence_sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/error.h"
#include "core/memory.h"

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
  if (params.grammar && params.grammar_vocab) grammar_.emplace(params.grammar->grammar());
  if (params.thinking.tokens >= 0 && !grammar_)
    thinking_ = params.thinking.start.empty() ? Thinking::kInside : Thinking::kBefore;
  // best_of ranks candidates by cumulative logprob, so it needs the chosen token's logprob.
  if (!logprob_params_.logprobs && params.candidates() > params.n) logprob_params_.logprobs = 0;
}

std::optional<int32_t> SequenceSampler::forced_thinking_token() const {
  const auto& t = params_.thinking;
  if (thinking_ == Thinking::kClosing) return t.end[closing_at_];
  if (thinking_ == Thinking::kInside && thinking_tokens_ >= t.tokens) return t.end.front();
  return std::nullopt;
}

void SequenceSampler::apply_thinking_budget(std::span<float> logits) const {
  const std::optional<int32_t> forced = forced_thinking_token();
  if (!forced || static_cast<size_t>(*forced) >= logits.size()) return;
  const float keep = logits[static_cast<size_t>(*forced)];
  std::fill(logits.begin(), logits.end(), -std::numeric_limits<float>::infinity());
  // The forced token keeps its own logit (its logprob is reported as the model gave it, before
  // the others were masked away) unless the processors had masked it too.
  logits[static_cast<size_t>(*forced)] = std::isfinite(keep) ? keep : 0.0f;
}

void SequenceSampler::advance_thinking(int32_t token) {
  if (thinking_ == Thinking::kOff || thinking_ == Thinking::kClosed) return;
  const auto& t = params_.thinking;
  const auto ends_with = [&](const std::vector<int32_t>& ids) {
    const auto& out = history_.output();
    return !ids.empty() && out.size() >= ids.size() &&
           std::equal(ids.begin(), ids.end(), out.end() - static_cast<std::ptrdiff_t>(ids.size()));
  };
  const std::optional<int32_t> forced = forced_thinking_token();
  if (forced && token == *forced) {
    thinking_ = Thinking::kClosing;
    if (++closing_at_ == t.end.size()) thinking_ = Thinking::kClosed;
    return;
  }
  if (thinking_ == Thinking::kBefore) {
    if (ends_with(t.start)) thinking_ = Thinking::kInside;
    return;
  }
  ++thinking_tokens_;
  if (ends_with(t.close)) thinking_ = Thinking::kClosed;
}

std::string SequenceSampler::flush_text() {
  std::string out;
  if (detok_) out = stops_.push(detok_->flush());
  out += stops_.flush();
  return out;
}

namespace {
// The streams of a sequence's other draws: a draft model's proposals and the residual draw of a
// rejected proposal (stream ids of a request's sequences are small).
constexpr uint64_t kDraftStream = 1ull << 62, kResidualStream = 1ull << 63;
}  // namespace

std::pair<ThreadCpuClock::time_point, std::string> SequenceSampler::budget_end(
    ThreadCpuClock::time_point start) const {
  const GrammarBudget& b = params_.grammar_budget;
  auto end = ThreadCpuClock::time_point::max();
  std::string what;
  if (b.step.count() > 0) {
    end = start - grammar_step_ + b.step;
    what = fmt::format("the budget of {} ms a token", b.step.count());
  }
  if (b.total.count() > 0 && start - grammar_total_ + b.total < end) {
    end = start - grammar_total_ + b.total;
    what = fmt::format("the budget of {} ms a request", b.total.count());
  }
  return {end, std::move(what)};
}

template <class Fn>
void SequenceSampler::within_budget(Fn fn, bool inline_only) {
  const auto start = ThreadCpuClock::now();
  std::optional<GrammarDeadline> deadline;
  auto [end, what] = budget_end(start);
  const auto inline_end = start + params_.grammar_budget.inline_time;
  if (inline_only && inline_end < end) {
    deadline.emplace(inline_end, "", /*yield=*/true);
    GrammarDeadline::check();  // an inline time of 0: straight to the worker
  } else if (end != ThreadCpuClock::time_point::max()) {
    deadline.emplace(end, std::move(what));
    GrammarDeadline::check();  // already spent
  }
  struct Count {  // the time counts even when fn throws
    SequenceSampler& s;
    ThreadCpuClock::time_point start;
    ~Count() {
      const auto spent = ThreadCpuClock::now() - start;
      s.grammar_step_ += spent;
      s.grammar_total_ += spent;
    }
  } count{*this, start};
  fn();
}

StepOutput SequenceSampler::step(std::span<float> logits) {
  StepOutput out;
  if (finished()) return out;
  deferred_row_.clear();  // a row computed again (after a preemption) replaces a saved one
  grammar_step_ = {};
  apply_logits_processors(params_, history_, eos_ids_, logits);
  apply_thinking_budget(logits);
  if (grammar_) {
    std::vector<uint64_t> mask;
    if (!obtain_mask(mask)) {
      // Computed off the engine's thread: the processed row waits for it (resume()).
      deferred_row_.assign(logits.begin(), logits.end());
      out.deferred = true;
      return out;
    }
    apply_mask(logits, mask);
  }
  const double u = sample_uniform(seed_, stream_, history_.output().size());
  out.sample = sampler_.sample(logprob_params_, logits, u);
  advance(out);
  return out;
}

bool SequenceSampler::mask_ready() const {
  return pending_ == nullptr || pending_->done.load(std::memory_order_acquire);
}

StepOutput SequenceSampler::resume() {
  StepOutput out;
  if (finished() || deferred_row_.empty()) return out;
  std::vector<uint64_t> mask;
  if (!obtain_mask(mask)) {
    out.deferred = true;
    return out;
  }
  std::vector<float> row = std::move(deferred_row_);
  deferred_row_.clear();
  apply_mask(row, mask);
  const double u = sample_uniform(seed_, stream_, history_.output().size());
  out.sample = sampler_.sample(logprob_params_, row, u);
  advance(out);
  return out;
}

bool SequenceSampler::obtain_mask(std::vector<uint64_t>& mask) {
  if (pending_) {
    if (!pending_->done.load(std::memory_order_acquire)) return false;
    const std::shared_ptr<PendingMask> p = std::exchange(pending_, nullptr);
    grammar_step_ += p->spent;
    grammar_total_ += p->spent;
    if (p->error) std::rethrow_exception(p->error);
    mask = std::move(p->mask);
    return true;
  }
  if (worker_ == nullptr) {
    within_budget([&] { mask = params_.grammar->mask(*grammar_); });
    return true;
  }
  try {
    within_budget([&] { mask = params_.grammar->mask(*grammar_); }, /*inline_only=*/true);
    return true;
  } catch (const GrammarYield&) {
  }
  // Too slow to wait for on the engine's thread: the worker computes it under what is left of
  // the budgets, counted from when it starts (not while it queues behind others).
  auto p = std::make_shared<PendingMask>();
  const GrammarBudget& b = params_.grammar_budget;
  auto left = [&](std::chrono::milliseconds budget, ThreadCpuClock::duration spent) {
    return budget.count() > 0 ? std::optional(budget - spent) : std::nullopt;
  };
  const auto step_left = left(b.step, grammar_step_), total_left = left(b.total, grammar_total_);
  std::string what = step_left && (!total_left || *step_left <= *total_left)
                         ? fmt::format("the budget of {} ms a token", b.step.count())
                         : fmt::format("the budget of {} ms a request", b.total.count());
  std::optional<ThreadCpuClock::duration> room;
  if (step_left) room = *step_left;
  if (total_left && (!room || *total_left < *room)) room = *total_left;
  worker_->submit([p, grammar = params_.grammar, matcher = *grammar_, room, what]() {
    const auto start = ThreadCpuClock::now();
    try {
      std::optional<GrammarDeadline> deadline;
      if (room) {
        deadline.emplace(start + *room, what);
        GrammarDeadline::check();
      }
      p->mask = grammar->mask(matcher);
    } catch (...) {
      p->error = std::current_exception();
    }
    // A matcher this wide (or one that blew up) left tens of MB free in this thread's malloc
    // arena: give the pages back, or the process keeps them.
    if (p->error || matcher.ways() > 4096) release_free_memory();
    p->spent = ThreadCpuClock::now() - start;
    p->done.store(true, std::memory_order_release);
  });
  pending_ = std::move(p);
  return false;
}

int32_t SequenceSampler::draft(std::span<float> logits, int64_t ahead, std::span<float> q) {
  apply_logits_processors(params_, history_, eos_ids_, logits);
  if (ahead == 0) apply_thinking_budget(logits);  // later positions: verify() forces them
  if (params_.greedy()) return argmax(logits);
  const auto dist = sampler_.distribution(params_, logits);
  std::fill(q.begin(), q.end(), 0.0f);
  if (dist.empty()) return argmax(logits);
  const double u = sample_uniform(seed_, stream_ | kDraftStream,
                                  history_.output().size() + static_cast<uint64_t>(ahead));
  int32_t token = dist.back().first;
  double acc = 0.0;
  bool drawn = false;
  for (const auto& [t, prob] : dist) {
    q[static_cast<size_t>(t)] = static_cast<float>(prob);
    acc += prob;
    if (!drawn && u < acc) {
      token = t;
      drawn = true;
    }
  }
  return token;
}

StepOutput SequenceSampler::verify(std::span<float> logits, int32_t proposal,
                                   std::span<const float> q) {
  StepOutput out;
  if (finished()) return out;
  grammar_step_ = {};
  apply_logits_processors(params_, history_, eos_ids_, logits);
  apply_thinking_budget(logits);
  if (grammar_) {
    std::vector<uint64_t> mask;
    within_budget([&] { mask = params_.grammar->mask(*grammar_); });  // inline: no deferral
    apply_mask(logits, mask);
  }
  const uint64_t n = history_.output().size();
  const auto p = sampler_.distribution(logprob_params_, logits);
  if (p.empty())
    fail(ErrorKind::kInvalidArgument,
         "no token is left to generate: the request's bad_words_ids, logit_bias or other "
         "constraints exclude every token");
  auto q_of = [&](int32_t t) {
    return t >= 0 && static_cast<size_t>(t) < q.size()
               ? static_cast<double>(q[static_cast<size_t>(t)])
               : 0.0;
  };
  const double qx = q_of(proposal);
  double px = 0.0;
  for (const auto& [t, prob] : p)
    if (t == proposal) px = prob;
  int32_t token = -1;
  // Accepted with probability min(1, p(x) / q(x)).
  if (qx > 0.0 && sample_uniform(seed_, stream_, n) * qx < px) {
    token = proposal;
  } else {
    // The residual max(0, p - q), normalized; where it is empty (p == q up to rounding), p.
    double total = 0.0;
    for (const auto& [t, prob] : p) total += std::max(0.0, prob - q_of(t));
    const bool residual = total > 1e-12;
    if (!residual) total = 1.0;
    const double target = sample_uniform(seed_, stream_ | kResidualStream, n) * total;
    double acc = 0.0;
    for (const auto& [t, prob] : p) {
      const double w = residual ? std::max(0.0, prob - q_of(t)) : prob;
      if (w <= 0.0) continue;
      token = t;  // the last with weight, should rounding leave target past the sum
      acc += w;
      if (target < acc) break;
    }
  }
  out.sample.token = token;
  if (logprob_params_.logprobs) {
    SampleResult lp = logprobs_of(logits, token, *logprob_params_.logprobs);
    out.sample.logprob = lp.logprob;
    out.sample.top = std::move(lp.top);
  }
  advance(out);
  return out;
}

void SequenceSampler::advance(StepOutput& out) {
  if (!params_.logprobs) out.sample.top.clear();
  const int32_t token = out.sample.token;
  cumulative_logprob_ += out.sample.logprob;
  history_.append(token);
  advance_thinking(token);

  const bool is_eos =
      std::exchange(grammar_stop_, false) ||
      (!params_.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end());
  const bool is_stop_token = std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(),
                                       token) != params_.stop_token_ids.end();
  if (grammar_ && !is_eos && !is_stop_token &&
      static_cast<size_t>(token) < params_.grammar_vocab->bytes.size()) {
    // The mask let only tokens the grammar takes through (as text, or as a token element).
    within_budget([&] {
      grammar_->accept_token(static_cast<uint32_t>(token),
                             params_.grammar_vocab->bytes[static_cast<size_t>(token)]);
    });
  }
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
}

void SequenceSampler::apply_mask(std::span<float> logits, const std::vector<uint64_t>& allowed) {
  // The ends: end-of-sequence ids (unless ignored) and stop tokens, where the grammar may end.
  std::vector<int32_t> ends = params_.stop_token_ids;
  if (!params_.ignore_eos) ends.insert(ends.end(), eos_ids_.begin(), eos_ids_.end());
  const bool can_end = grammar_->can_end();
  std::vector<std::pair<int32_t, float>> kept;
  for (int32_t e : ends)
    if (e >= 0 && static_cast<size_t>(e) < logits.size()) kept.emplace_back(e, logits[e]);
  const bool any = apply_token_mask(logits, allowed);
  // Ending is allowed where the grammar may end (as the other processors left it: min_tokens
  // holds), and where nothing else is left (a dead end: the sequence stops rather than leave
  // the grammar).
  bool end_possible = false;
  if (can_end) {
    for (const auto& [e, v] : kept) {
      logits[static_cast<size_t>(e)] = v;
      end_possible = end_possible || v > -INFINITY;
    }
  }
  if (!any && !end_possible) {
    for (const auto& [e, v] : kept) logits[static_cast<size_t>(e)] = 0.0f;
    if (kept.empty()) {
      // No end token may be drawn (ignore_eos and no stop tokens), yet nothing else is left:
      // the grammar's sentence is over, so the sequence stops (with an end-of-sequence id, or
      // token 0 for a model without one; its text is not shown) rather than leave it.
      const int32_t end = eos_ids_.empty() ? 0 : eos_ids_.front();
      if (end >= 0 && static_cast<size_t>(end) < logits.size()) {
        logits[static_cast<size_t>(end)] = 0.0f;
        grammar_stop_ = true;
      }
    }
  }
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
