#pragma once
// Where expensive grammar masks are computed off the engine thread (issue 49): a sequence whose
// mask takes longer than a short inline attempt hands it to this thread and sits out the engine's
// steps until it is ready (SequenceSampler::step returns deferred), so that a slow constraint
// slows only its own sequence. One thread: cheap masks never come here (they finish inline), so
// what queues here is only what would have stalled every sequence of the step.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace tf {

class GrammarWorker {
 public:
  // done: called on the worker's thread after each job (the engine wakes up to resume the
  // sequence that waited for it).
  explicit GrammarWorker(std::function<void()> done);
  ~GrammarWorker();  // finishes the job in hand, drops the queued ones, joins
  GrammarWorker(const GrammarWorker&) = delete;
  GrammarWorker& operator=(const GrammarWorker&) = delete;

  void submit(std::function<void()> job);
  // Jobs submitted and not yet over (queued, or in hand until its captured state is freed).
  int64_t pending() const { return pending_.load(); }

 private:
  void run();

  std::function<void()> done_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::atomic<int64_t> pending_{0};
  std::thread thread_;
};

}  // namespace tf
