#include "serving/core/job_summary.h"

#include <algorithm>

namespace tf {

std::vector<size_t> ReturnRule::pick(const std::vector<GeneratedSequence>& seqs) const {
  if (!beam_search && best_of && *best_of > n) return best_sequences(seqs, static_cast<size_t>(n));
  std::vector<size_t> all(std::min(seqs.size(), static_cast<size_t>(std::max(n, 0))));
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
}

JobSummary summarize_job(const GenerationJob& job, const ReturnRule& rule,
                         std::chrono::steady_clock::time_point received,
                         std::chrono::steady_clock::time_point deadline) {
  JobSummary s;
  const bool past = std::chrono::steady_clock::now() >= deadline;
  for (size_t i = 0; i < job.num_prompts(); ++i) {
    const auto& seqs = job.results()[i];
    const RequestTimings t = job.timings(i);
    s.prompt_tokens += t.prompt_tokens;
    s.cached_prompt_tokens += t.cached_prompt_tokens;
    s.returned.push_back(rule.pick(seqs));
    for (size_t k : s.returned.back()) {
      s.completion_tokens += static_cast<int64_t>(seqs[k].tokens.size());
      if (s.finish.empty()) s.finish = finish_reason_name(seqs[k].finish);
    }
    for (const auto& seq : seqs) {
      s.timed_out = s.timed_out || (past && seq.finish == FinishReason::kAbort);
      if (s.error.empty()) {
        s.error = seq.error;
        s.error_kind = seq.error_kind;
      }
    }
  }
  s.ttft_ms = job.first_token_ms(received);
  return s;
}

void record_job(const JobSummary& summary, RequestRecord& record, Admission* admission) {
  record.completion_tokens = summary.completion_tokens;
  record.ttft_ms = summary.ttft_ms;
  record.finish = summary.finish;
  if (admission)
    admission->set_used(static_cast<double>(record.prompt_tokens + summary.completion_tokens));
}

}  // namespace tf
