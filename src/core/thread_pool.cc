#include "core/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TF_CPU_RELAX() _mm_pause()
#else
#define TF_CPU_RELAX() std::this_thread::yield()
#endif

namespace tf {
namespace {

// Set while a thread runs a chunk (workers always, the caller during its own chunk), so that a
// nested parallel_for runs inline instead of deadlocking on dispatch_mu_.
thread_local bool t_in_chunk = false;

struct ChunkScope {
  bool saved = t_in_chunk;
  ChunkScope() { t_in_chunk = true; }
  ~ChunkScope() { t_in_chunk = saved; }
};

// About 20-50 microseconds of pause instructions: long enough to catch the next call of a decode
// step, short enough not to matter when the pool goes idle.
constexpr int kSpinIterations = 20000;

}  // namespace

int ThreadPool::hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = hardware_threads();
  workers_.reserve(n_threads - 1);
  for (int i = 0; i < n_threads - 1; ++i) workers_.emplace_back([this, i] { worker_loop(i + 1); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int index) {
  t_in_chunk = true;
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 0; i < kSpinIterations && gen == seen; ++i) {
      if (stop_.load(std::memory_order_acquire)) return;
      // Yield now and then: with more threads than cores a pure spin starves the thread that
      // would publish the next job.
      if (i % 64 == 63) {
        std::this_thread::yield();
      } else {
        TF_CPU_RELAX();
      }
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_.load(std::memory_order_acquire) ||
               generation_.load(std::memory_order_acquire) != seen;
      });
      if (stop_.load(std::memory_order_acquire)) return;
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (index < chunks_) {
      const int64_t begin = n_ * index / chunks_;
      const int64_t end = n_ * (index + 1) / chunks_;
      try {
        if (begin < end) (*fn_)(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu_);
        if (!error_) error_ = std::current_exception();
      }
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int64_t n, RangeFn fn, int64_t min_chunk) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t max_chunks = std::max<int64_t>(1, n / min_chunk);
  const int chunks = static_cast<int>(std::min<int64_t>(size(), max_chunks));
  if (chunks <= 1 || t_in_chunk) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> dispatch(dispatch_mu_);
  fn_ = &fn;
  n_ = n;
  chunks_ = chunks;
  error_ = nullptr;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();

  std::exception_ptr caller_error;
  try {
    ChunkScope scope;
    fn(0, n / chunks);
  } catch (...) {
    caller_error = std::current_exception();
  }
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins % 64 == 63) {
      std::this_thread::yield();
    } else {
      TF_CPU_RELAX();
    }
  }
  fn_ = nullptr;
  if (caller_error) std::rethrow_exception(caller_error);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace tf
