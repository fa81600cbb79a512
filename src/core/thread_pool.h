#pragma once
// A persistent pool of compute threads for the kernels.
//
// parallel_for splits [0, n) into pieces: up to kPiecesPerThread per thread, never smaller than
// min_chunk items, their boundaries a function of (n, min_chunk, size()) only. The participants
// (the workers and the calling thread) claim pieces one at a time from a shared atomic counter
// until none are left, and the caller returns once every piece has finished. A thread that is
// descheduled (a busy neighbour process, a container's CPU quota) therefore delays a call by at
// most the piece it holds, not by a whole share of the range, and a worker that wakes after the
// others took every piece finds nothing and goes back to waiting.
//
// Between calls workers spin only when that pays: never in a pool with more threads than the
// CPUs the process may use, and otherwise for an adaptive budget (at most 250 us) that shrinks
// whenever a spin runs out or a worker comes too late for a call's pieces, and grows again when
// spinning catches calls. Past it they sleep on a condition variable, so an idle server burns no
// core and a busy machine is not fought over. The caller waiting for other threads' last pieces
// follows the same rule.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "core/function_ref.h"

namespace tf {

class ThreadPool {
 public:
  using RangeFn = FunctionRef<void(int64_t begin, int64_t end)>;

  // At most this many pieces per thread: enough that a late or descheduled thread leaves little
  // behind, few enough that claiming stays cheap next to a piece.
  static constexpr int kPiecesPerThread = 4;

  // n_threads counts the calling thread; 0 means hardware_threads().
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return threads_; }

  // Runs fn over [0, n) in p = num_pieces(n, min_chunk, size()) contiguous pieces of at least
  // min_chunk items (n / p each, the first n % p one more), each exactly once, on whichever
  // participant claims it. Blocks until all pieces are done; then rethrows the first
  // exception a piece threw. Called from inside a piece, it runs inline. One call at a time per
  // pool: concurrent callers take turns.
  void parallel_for(int64_t n, RangeFn fn, int64_t min_chunk = 1);

  // How many pieces parallel_for(n, fn, min_chunk) uses on a pool of `threads`: 0 for n <= 0,
  // else min(n / max(min_chunk, 1), kPiecesPerThread * threads), at least 1.
  static int64_t num_pieces(int64_t n, int64_t min_chunk, int threads);
  // The position (0 = first in the range) of the c-th piece claimed. The pieces form one
  // contiguous region per thread, and claims go round the regions: when the participants claim
  // in turn (nobody descheduled), each runs one region front to back, a single stream of memory
  // that the hardware prefetcher follows across pieces (claiming in range order measured 12 %
  // slower on a bandwidth-bound f32 decode); a late or stalled thread's pieces are taken by the
  // others all the same. A bijection on [0, pieces).
  static int64_t claim_position(int64_t c, int64_t pieces, int threads);

  // The CPUs this process may use: the least of std::thread::hardware_concurrency(), the CPUs in
  // its sched_getaffinity mask and its cgroup's CPU quota (v2 cpu.max, v1 cfs_quota_us), rounded
  // up; at least 1.
  static int hardware_threads();

 private:
  // Claims and runs pieces of the published job until none are left; returns how many it ran.
  // *job_pieces receives the piece count of the job it last looked at.
  int run_pieces(uint32_t* job_pieces);
  void worker_loop();

  int threads_ = 1;  // size(); fixed before the workers start
  std::vector<std::thread> workers_;
  std::mutex dispatch_mu_;  // one parallel_for at a time per pool
  // Whether spinning may pay at all: false for a pool with more threads than usable CPUs.
  bool may_spin_ = false;
  int64_t caller_spin_ns_ = 0;  // the caller's adaptive spin budget (under dispatch_mu_)

  // The job: (piece count << 32) | next unclaimed piece. A new job is stored whole (after its
  // fields below); pieces are claimed with fetch_add, so a participant always learns the job
  // together with its claim and can never run one job's piece with another job's fn.
  alignas(64) std::atomic<uint64_t> job_{0};
  std::atomic<uint32_t> done_{0};  // pieces of the current job that finished
  // Bumped once per job (and on destruction); what waiting workers watch. On its own cache line,
  // away from the claims.
  alignas(64) std::atomic<uint32_t> generation_{0};
  // Atomic: every spin checks it, so that destruction does not wait out a spin.
  std::atomic<bool> stop_{false};
  alignas(64) std::atomic<int> sleepers_{0};  // workers blocked (or about to block) on cv_
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> caller_sleeping_{false};  // the caller blocks on done_cv_ for the last pieces
  std::mutex done_mu_;
  std::condition_variable done_cv_;

  // The job's fields; written before job_ is stored, read by a participant only after its claim
  // succeeded (the job cannot change until that piece is done).
  const RangeFn* fn_ = nullptr;
  int64_t n_ = 0;
  std::mutex error_mu_;
  std::exception_ptr error_;
};

// The CPUs a cgroup v2 `cpu.max` ("$MAX $PERIOD", e.g. "150000 100000") allows, rounded up
// (at least 1); 0 for no limit ("max ...") or text it cannot read.
int cpus_from_cgroup_quota(std::string_view cpu_max);

// The same for cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us (a quota of -1 is no limit).
int cpus_from_cfs_quota(std::string_view quota_us, std::string_view period_us);

}  // namespace tf
