#pragma once
// Where requests are understood before they reach an engine: parsing the body, rendering the
// chat template, tokenizing the prompt. That work grows with the request (an 8 MiB prompt), so
// it runs on these threads rather than on an I/O thread, where it would hold up every other
// connection (health checks included). Each piece runs under its request's CancelToken
// (core/cancel.h): a client that leaves, or a deadline that passes, stops it at the next check.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/cancel.h"

namespace tf {

class PreparePool {
 public:
  PreparePool();
  ~PreparePool();  // stop()
  PreparePool(const PreparePool&) = delete;
  PreparePool& operator=(const PreparePool&) = delete;

  // Starts the threads (once). Until then run() runs its work inline, on the caller's thread.
  void start(int threads);
  int threads() const { return threads_; }
  // Runs work on a pool thread with token as its thread's current CancelToken; the work reports
  // its own result (it answers its request) and must not throw.
  void run(std::shared_ptr<CancelToken> token, std::function<void()> work);
  // Work queued or running now (requests being parsed and tokenized).
  int64_t in_progress() const { return in_progress_.load(std::memory_order_relaxed); }
  // Waits for the work already queued, then joins the threads. run() after it runs inline.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int threads_ = 0;
  std::atomic<int64_t> in_progress_{0};
};

}  // namespace tf
