#pragma once
// What a finished generation job comes to, computed once whatever the protocol: which sequences
// each prompt returns, the usage, the first finish reason, the time to first token and whether
// the deadline cut it short. Every API (OpenAI, TF Serving REST, gRPC) only formats it, and
// record_job() books it the same way for all (access log, metrics, the key's token budget).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "serving/core/api_common.h"
#include "serving/core/auth.h"
#include "serving/core/generation_job.h"

namespace tf {

// Which of a prompt's sequences are returned: the first n, or with best_of > n (not beam
// search) the n with the highest cumulative logprob, best first.
struct ReturnRule {
  int32_t n = 1;
  std::optional<int32_t> best_of;
  bool beam_search = false;
  std::vector<size_t> pick(const std::vector<GeneratedSequence>& seqs) const;
};

struct JobSummary {
  std::vector<std::vector<size_t>> returned;  // per prompt: its returned sequences, in order
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_prompt_tokens = 0;
  std::string finish;  // the first returned sequence's finish reason ("stop", "length", ...)
  double ttft_ms = -1;
  // The deadline passed and at least one sequence was stopped for it: the request timed out
  // (504 / DEADLINE_EXCEEDED where nothing was sent yet).
  bool timed_out = false;
  // The engine failed on a sequence of the job: what the client is told, and whether it was
  // the engine (kInternal: 500 / INTERNAL) or the request's own input (a grammar past its
  // budget: 400 / RESOURCE_EXHAUSTED).
  std::string error;
  ErrorKind error_kind = ErrorKind::kInternal;
  Error failure() const { return Error(error_kind, error); }
  int error_status() const { return http_status_of(failure()); }
};

JobSummary summarize_job(const GenerationJob& job, const ReturnRule& rule,
                         std::chrono::steady_clock::time_point received,
                         std::chrono::steady_clock::time_point deadline);

// Books a finished job on its request: completion tokens, TTFT and finish reason on the record
// (prompt tokens were counted when it was planned), the tokens really used on the key's
// admission (nullptr: keys are off).
void record_job(const JobSummary& summary, RequestRecord& record, Admission* admission);

}  // namespace tf
