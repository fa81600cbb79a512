#pragma once
// A persistent pool of compute threads for the kernels. parallel_for splits a range into one
// contiguous chunk per thread, and the calling thread runs a chunk itself. Idle workers spin for
// a few microseconds (decode steps call back-to-back) and then sleep on a condition variable, so
// an idle server burns no core.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/function_ref.h"

namespace tf {

class ThreadPool {
 public:
  using RangeFn = FunctionRef<void(int64_t begin, int64_t end)>;

  // n_threads counts the calling thread; 0 means one per available core.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn over [0, n) in at most size() chunks of at least min_chunk items. Blocks until all
  // chunks are done; rethrows the first exception a chunk threw. Called from inside a chunk, it
  // runs inline.
  void parallel_for(int64_t n, RangeFn fn, int64_t min_chunk = 1);

  static int hardware_threads();

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex dispatch_mu_;  // one parallel_for at a time per pool

  std::mutex mu_;
  std::condition_variable cv_;
  // Atomic: the workers' spin after a call checks it too, so that destruction does not wait out
  // the spin (under CPU contention its yields stretch it to most of a second).
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};

  // The job of the current generation; written before generation_ is bumped.
  const RangeFn* fn_ = nullptr;
  int64_t n_ = 0;
  int chunks_ = 0;
  std::mutex error_mu_;
  std::exception_ptr error_;
};

}  // namespace tf
