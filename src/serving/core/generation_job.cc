#include "serving/core/generation_job.h"

#include <algorithm>
#include <numeric>

namespace tf {

void JobRegistry::add(std::shared_ptr<GenerationJob> job) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.insert(std::move(job));
}

void JobRegistry::remove(const GenerationJob* job) {
  std::shared_ptr<GenerationJob> keep;  // destroyed outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    if (it->get() == job) {
      keep = *it;
      jobs_.erase(it);
      break;
    }
  }
}

void JobRegistry::clear() {
  std::unordered_set<std::shared_ptr<GenerationJob>> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs.swap(jobs_);
  }
}

size_t JobRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

std::shared_ptr<GenerationJob> GenerationJob::start(Engine& engine,
                                                    std::vector<GenerationRequest> reqs,
                                                    std::shared_ptr<JobHost> host,
                                                    JobRegistry& registry, EventFn on_event,
                                                    DoneFn on_done, JobObserver observer) {
  auto job = std::make_shared<GenerationJob>(host, registry);
  job->on_event_ = std::move(on_event);
  job->on_done_ = std::move(on_done);
  job->observer_ = std::move(observer);
  // All queued together (or none): the engine's next step sees every prompt of the request.
  job->streams_ = engine.submit_all(std::move(reqs));
  for (size_t i = 0; i < job->streams_.size(); ++i) {
    job->results_.emplace_back();
    job->last_token_.emplace_back();
    job->ended_.push_back(false);
    job->drain_posted_.push_back(std::make_unique<std::atomic<bool>>(false));
  }
  registry.add(job);
  host->on_disconnect([weak = std::weak_ptr<GenerationJob>(job)] {
    if (auto j = weak.lock()) {
      j->cancel();
      // The engine still ends each request (abort); the job leaves the registry then.
    }
  });
  for (size_t i = 0; i < job->streams_.size(); ++i) {
    // The engine's thread only posts a drain to the host (at most one pending).
    job->streams_[i]->set_listener([weak = std::weak_ptr<GenerationJob>(job), i] {
      auto j = weak.lock();
      if (!j || j->drain_posted_[i]->exchange(true)) return;
      j->host_->post([j, i] { j->drain(i); });
    });
  }
  return job;
}

void GenerationJob::cancel() {
  for (auto& s : streams_) s->cancel();
}

void GenerationJob::drain(size_t i) {
  drain_posted_[i]->store(false);
  RequestOutput out;
  while (streams_[i]->try_next(out)) {
    auto& seqs = results_[i];
    if (static_cast<size_t>(out.index) >= seqs.size()) seqs.resize(out.index + 1);
    append_output(seqs[out.index], out);
    if (observer_.metrics && !out.token_ids.empty()) {
      // The gap since this sequence's previous tokens, as the server sends them; the first
      // tokens' latency is the time to first token (observed at the end from the engine).
      auto& last = last_token_[i];
      if (last.size() <= static_cast<size_t>(out.index)) last.resize(out.index + 1);
      const auto now = std::chrono::steady_clock::now();
      if (last[out.index] != std::chrono::steady_clock::time_point{}) {
        observer_.metrics->itl.observe(
            observer_.labels, std::chrono::duration<double>(now - last[out.index]).count());
      }
      last[out.index] = now;
    }
    if (!host_->disconnected() && on_event_) on_event_(i, out);
  }
  if (ended_[i] || !streams_[i]->done()) return;
  ended_[i] = true;
  observe_end(i);
  streams_[i]->set_listener(nullptr);
  if (++num_ended_ < streams_.size()) return;
  if (on_done_) on_done_(*this, host_->disconnected());
  on_event_ = nullptr;
  on_done_ = nullptr;
  registry_.remove(this);
}

double GenerationJob::first_token_ms(std::chrono::steady_clock::time_point since) const {
  Clock::time_point first{};
  for (const auto& s : streams_) {
    const auto t = s->timings().first_token;
    if (t != Clock::time_point{} && (first == Clock::time_point{} || t < first)) first = t;
  }
  if (first == Clock::time_point{}) return -1;
  return std::chrono::duration<double, std::milli>(first - since).count();
}

void GenerationJob::observe_end(size_t i) {
  if (!observer_.metrics) return;
  const RequestTimings t = streams_[i]->timings();
  ServerMetrics& m = *observer_.metrics;
  using Seconds = std::chrono::duration<double>;
  if (t.first_scheduled != Clock::time_point{})
    m.queue_time.observe(observer_.labels, Seconds(t.first_scheduled - t.arrival).count());
  if (t.first_token != Clock::time_point{})
    m.ttft.observe(observer_.labels, Seconds(t.first_token - t.arrival).count());
  m.prompt_tokens.add(observer_.labels, static_cast<double>(t.prompt_tokens));
  m.generation_tokens.add(observer_.labels, static_cast<double>(t.generated_tokens));
}

std::vector<size_t> best_sequences(const std::vector<GeneratedSequence>& seqs, size_t n) {
  std::vector<size_t> order(seqs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return seqs[a].cumulative_logprob > seqs[b].cumulative_logprob;
  });
  order.resize(std::min(n, order.size()));
  return order;
}

}  // namespace tf
