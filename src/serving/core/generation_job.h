#pragma once
// The generation behind one HTTP request or gRPC call: one engine request per prompt, each with
// its output stream. The engine's thread only signals; the outputs are drained on the job's host
// (the HTTP connection's strand, the gRPC call's), where the API turns them into SSE events or
// stream messages or gathers them for one response. A client that disconnects (or cancels)
// cancels every request of the job in the engine (their KV blocks are freed at the next step).

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "engine/engine.h"
#include "serving/core/job_host.h"
#include "serving/core/metrics.h"

namespace tf {

// What one sequence (an OpenAI "choice") produced, gathered from its events.
using GeneratedSequence = CompletedSequence;

class GenerationJob;

// Where a job reports its sequences' latencies and tokens (nullptr metrics: nowhere).
struct JobObserver {
  ServerMetrics* metrics = nullptr;
  Labels labels;  // model, version
};

// Owns the jobs in flight (their streams call back into them), so that none outlives the server
// and none leaks when the engine or the connection goes away first.
class JobRegistry {
 public:
  void add(std::shared_ptr<GenerationJob> job);
  void remove(const GenerationJob* job);
  void clear();
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::unordered_set<std::shared_ptr<GenerationJob>> jobs_;
};

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  // Called on the host: each output as it is drained (prompt = which request).
  using EventFn = std::function<void(size_t prompt, const RequestOutput& out)>;
  // Called once, on the host, when every request has ended, with the job (its results);
  // client_gone after a disconnect (then nothing can be sent). It may run before start()
  // returns to a caller on another thread than the host's: it gets the job for that reason.
  using DoneFn = std::function<void(const GenerationJob& job, bool client_gone)>;

  // Submits every request and registers the job until it ends. Throws (with the already
  // submitted ones cancelled) if the engine rejects one.
  static std::shared_ptr<GenerationJob> start(Engine& engine, std::vector<GenerationRequest> reqs,
                                              std::shared_ptr<JobHost> host, JobRegistry& registry,
                                              EventFn on_event, DoneFn on_done,
                                              JobObserver observer = {});

  // Per prompt, per sequence index: everything gathered so far.
  const std::vector<std::vector<GeneratedSequence>>& results() const { return results_; }
  RequestTimings timings(size_t prompt) const { return streams_[prompt]->timings(); }
  size_t num_prompts() const { return streams_.size(); }
  // Milliseconds from since to the job's first generated token; -1 before there is one.
  double first_token_ms(std::chrono::steady_clock::time_point since) const;
  void cancel();

  GenerationJob(std::shared_ptr<JobHost> host, JobRegistry& registry)
      : host_(std::move(host)), registry_(registry) {}

 private:
  void drain(size_t i);
  void observe_end(size_t i);

  std::shared_ptr<JobHost> host_;
  JobRegistry& registry_;
  std::vector<std::shared_ptr<RequestStream>> streams_;
  std::vector<std::unique_ptr<std::atomic<bool>>> drain_posted_;
  std::vector<std::vector<GeneratedSequence>> results_;
  std::vector<bool> ended_;
  size_t num_ended_ = 0;
  EventFn on_event_;
  DoneFn on_done_;
  JobObserver observer_;
  // Per prompt, per sequence: when its last tokens were drained (for inter-token latency).
  std::vector<std::vector<std::chrono::steady_clock::time_point>> last_token_;
};

// best_of > n: the n sequences with the highest cumulative logprob, best first (stable).
std::vector<size_t> best_sequences(const std::vector<GeneratedSequence>& seqs, size_t n);

}  // namespace tf
