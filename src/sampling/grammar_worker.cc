#include "sampling/grammar_worker.h"

#include <utility>

namespace tf {

GrammarWorker::GrammarWorker(std::function<void()> done)
    : done_(std::move(done)), thread_([this] { run(); }) {}

GrammarWorker::~GrammarWorker() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    jobs_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

void GrammarWorker::submit(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
    ++pending_;
  }
  cv_.notify_one();
}

void GrammarWorker::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();          // a job catches its own errors (they belong to its sequence)
    job = nullptr;  // what it held (a matcher's stacks) goes before it counts as over
    --pending_;
    if (done_) done_();
  }
}

}  // namespace tf
