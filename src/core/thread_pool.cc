#include "core/thread_pool.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#if defined(__linux__)
#include <sched.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TF_CPU_RELAX() _mm_pause()
#else
#define TF_CPU_RELAX() std::this_thread::yield()
#endif

namespace tf {
namespace {

// Set while a thread runs a piece (workers always, the caller during its pieces), so that a
// nested parallel_for runs inline instead of deadlocking on dispatch_mu_.
thread_local bool t_in_chunk = false;

struct ChunkScope {
  bool saved = t_in_chunk;
  ChunkScope() { t_in_chunk = true; }
  ~ChunkScope() { t_in_chunk = saved; }
};

// The spin rule. Spinning between calls saves a sleep and a wake-up (several microseconds each)
// per call when the threads have CPUs of their own, and costs the machine a core per spinning
// thread otherwise: when a neighbour process or a CPU quota leaves fewer CPUs than runnable
// threads, a spinning thread takes time from the thread that would publish the next call or
// finish the last piece. So:
//  - a pool with more threads than hardware_threads() never spins (may_spin_);
//  - otherwise each waiter has a budget of at most kMaxSpinNs, which adapts:
//    a worker halves it when a spin runs out, and when it comes late for a call that had a
//    piece for every thread (descheduled, or its spin did not pay) and got none; it doubles it
//    (from kMinSpinNs) when a spin caught a call and it got a piece, and takes at least
//    kMinSpinNs again when it was woken from sleep and still got a piece. The caller, waiting
//    for other threads' last pieces, doubles its budget when the wait was shorter than a full
//    spin and halves it when it was longer (a holder descheduled).
// Under contention the budgets fall to 0 within a few calls and the pool just sleeps and wakes;
// on an idle machine back-to-back calls keep them at the maximum.
constexpr int64_t kMaxSpinNs = 250'000;
constexpr int64_t kMinSpinNs = 2'000;

int64_t grown(int64_t budget) {
  return std::min(kMaxSpinNs, std::max(kMinSpinNs, budget * 2));
}
int64_t shrunk(int64_t budget) {
  return budget / 2 < kMinSpinNs ? 0 : budget / 2;
}

// Spins until done() or the budget runs out (false). Reads the clock every 32 pauses only.
template <typename Done>
bool spin_until(int64_t budget_ns, Done done) {
  if (budget_ns <= 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(budget_ns);
  for (unsigned i = 1;; ++i) {
    if (done()) return true;
    TF_CPU_RELAX();
    if (i % 32 == 0 && std::chrono::steady_clock::now() >= deadline) return done();
  }
}

uint64_t pack_job(uint32_t pieces, uint32_t next) {
  return (uint64_t{pieces} << 32) | next;
}

// An integer with surrounding white space, or nothing.
bool parse_int(std::string_view s, int64_t* out) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

int cpus_for(int64_t quota, int64_t period) {
  if (quota <= 0 || period <= 0) return 0;
  const int64_t cpus = quota / period + (quota % period != 0 ? 1 : 0);
  return static_cast<int>(std::clamp<int64_t>(cpus, 1, INT_MAX));
}

#if defined(__linux__)
bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

// The least positive result of limit(dir) over `mount` + `path` and each of its parents up to
// `mount` itself; 0 if none. Walking up covers both a process deep in the host's hierarchy (a
// limit may sit on any ancestor) and a container whose own cgroup is mounted at `mount` while
// /proc/self/cgroup still names the host's path (which then does not exist below `mount`).
template <typename Limit>
int least_limit(const std::string& mount, std::string path, Limit limit) {
  int best = 0;
  for (;;) {
    while (!path.empty() && path.back() == '/') path.pop_back();
    const int cpus = limit(mount + path);
    if (cpus > 0 && (best == 0 || cpus < best)) best = cpus;
    if (path.empty()) return best;
    path.erase(path.rfind('/') == std::string::npos ? 0 : path.rfind('/'));
  }
}

// The CPUs the process's cgroup quota allows; 0 for none found.
int cgroup_cpus() {
  std::string self, v1_path, v2_path;
  bool v1 = false, v2 = false;
  if (read_file("/proc/self/cgroup", &self)) {
    std::istringstream lines(self);
    for (std::string line; std::getline(lines, line);) {
      // "hierarchy-id:controller,controller:/path"; v2's is "0::/path".
      const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
      if (b == std::string::npos) continue;
      const std::string controllers = line.substr(a + 1, b - a - 1);
      if (line.compare(0, a, "0") == 0 && controllers.empty()) {
        v2 = true;
        v2_path = line.substr(b + 1);
      }
      std::istringstream names(controllers);
      for (std::string name; std::getline(names, name, ',');) {
        if (name == "cpu") {
          v1 = true;
          v1_path = line.substr(b + 1);
        }
      }
    }
  }
  int best = 0;
  const auto take = [&best](int cpus) {
    if (cpus > 0 && (best == 0 || cpus < best)) best = cpus;
  };
  take(least_limit("/sys/fs/cgroup", v2 ? v2_path : "", [](const std::string& dir) {
    std::string text;
    return read_file(dir + "/cpu.max", &text) ? cpus_from_cgroup_quota(text) : 0;
  }));
  take(least_limit("/sys/fs/cgroup/cpu", v1 ? v1_path : "", [](const std::string& dir) {
    std::string quota, period;
    if (!read_file(dir + "/cpu.cfs_quota_us", &quota)) return 0;
    if (!read_file(dir + "/cpu.cfs_period_us", &period)) return 0;
    return cpus_from_cfs_quota(quota, period);
  }));
  return best;
}

// The CPUs in the process's affinity mask; 0 if it cannot be read.
int affinity_cpus() {
  for (int cpus = CPU_SETSIZE; cpus <= (1 << 16); cpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(cpus);
    if (set == nullptr) return 0;
    const size_t bytes = CPU_ALLOC_SIZE(cpus);
    CPU_ZERO_S(bytes, set);
    const bool ok = sched_getaffinity(0, bytes, set) == 0;
    const int count = ok ? CPU_COUNT_S(bytes, set) : 0;
    CPU_FREE(set);
    if (ok) return count;
    if (errno != EINVAL) return 0;  // EINVAL: the kernel's mask is larger than ours
  }
  return 0;
}
#endif

}  // namespace

int cpus_from_cgroup_quota(std::string_view cpu_max) {
  // "$MAX $PERIOD" where $MAX is "max" or a number of microseconds.
  size_t i = 0;
  while (i < cpu_max.size() && (cpu_max[i] == ' ' || cpu_max[i] == '\t')) ++i;
  const size_t space = cpu_max.find_first_of(" \t", i);
  if (space == std::string_view::npos) return 0;
  int64_t quota = 0, period = 0;
  if (!parse_int(cpu_max.substr(i, space - i), &quota)) return 0;  // "max" or garbage
  if (!parse_int(cpu_max.substr(space), &period)) return 0;
  return cpus_for(quota, period);
}

int cpus_from_cfs_quota(std::string_view quota_us, std::string_view period_us) {
  int64_t quota = 0, period = 0;
  if (!parse_int(quota_us, &quota) || !parse_int(period_us, &period)) return 0;
  return cpus_for(quota, period);  // -1: no limit
}

int ThreadPool::hardware_threads() {
  int n = static_cast<int>(std::thread::hardware_concurrency());  // 0: unknown
  const auto cap = [&n](int limit) {
    if (limit > 0 && (n <= 0 || limit < n)) n = limit;
  };
#if defined(__linux__)
  cap(affinity_cpus());
  cap(cgroup_cpus());
#endif
  return std::max(n, 1);
}

int64_t ThreadPool::claim_position(int64_t c, int64_t pieces, int threads) {
  const int64_t lanes = std::max<int64_t>(1, std::min<int64_t>(threads, pieces));
  const int64_t s = pieces / lanes, e = pieces % lanes;  // the first e regions hold s + 1
  const auto start = [&](int64_t t) { return t < e ? t * (s + 1) : e * (s + 1) + (t - e) * s; };
  if (c < s * lanes) return start(c % lanes) + c / lanes;
  return start(c - s * lanes) + s;
}

int64_t ThreadPool::num_pieces(int64_t n, int64_t min_chunk, int threads) {
  if (n <= 0) return 0;
  const int64_t by_size = std::max<int64_t>(1, n / std::max<int64_t>(1, min_chunk));
  return std::min<int64_t>(by_size, int64_t{kPiecesPerThread} * std::max(threads, 1));
}

ThreadPool::ThreadPool(int n_threads) {
  const int cpus = hardware_threads();
  if (n_threads <= 0) n_threads = cpus;
  threads_ = n_threads;
  may_spin_ = n_threads <= cpus;
  caller_spin_ns_ = may_spin_ ? kMaxSpinNs : 0;
  workers_.reserve(n_threads - 1);
  for (int i = 0; i < n_threads - 1; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  { std::lock_guard<std::mutex> lock(mu_); }  // a worker between its check and its wait
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

int ThreadPool::run_pieces(uint32_t* job_pieces) {
  int ran = 0;
  for (;;) {
    // acq_rel: the claim reads from the store that published the job (or from a claim after
    // it), so the job's fields below are that job's; they stay so until this piece is done.
    const uint64_t job = job_.fetch_add(1, std::memory_order_acq_rel);
    const uint32_t pieces = static_cast<uint32_t>(job >> 32);
    const uint32_t piece = static_cast<uint32_t>(job);
    *job_pieces = pieces;
    // Nothing left. A participant stops at its first failed claim and looks at a job at most
    // twice, so the counter passes the piece count by at most 2 * size() and never carries
    // into it.
    if (piece >= pieces) return ran;
    const int64_t at = claim_position(piece, pieces, threads_);
    const int64_t q = n_ / pieces, r = n_ % pieces;
    const int64_t begin = at * q + std::min<int64_t>(at, r);
    const int64_t end = begin + q + (at < r ? 1 : 0);
    try {
      ChunkScope scope;
      (*fn_)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    ++ran;
    // seq_cst, and caller_sleeping_ read after it: either the caller sees this piece counted
    // before it sleeps, or this thread sees it sleeping and wakes it.
    if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == pieces &&
        caller_sleeping_.load(std::memory_order_seq_cst)) {
      { std::lock_guard<std::mutex> lock(done_mu_); }
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::worker_loop() {
  t_in_chunk = true;
  uint32_t seen = 0;
  int64_t spin_ns = may_spin_ ? kMaxSpinNs : 0;
  for (;;) {
    uint32_t gen = generation_.load(std::memory_order_acquire);
    bool spun = false;  // the spin caught this job
    if (gen == seen && spin_ns > 0) {
      spun = spin_until(spin_ns, [&] {
        gen = generation_.load(std::memory_order_acquire);
        return gen != seen || stop_.load(std::memory_order_relaxed);
      });
      if (!spun) spin_ns = shrunk(spin_ns);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      // seq_cst, like the caller's bump of generation_ and its read of sleepers_: either the
      // caller sees this thread counted (and takes mu_ to notify, so after this thread waits),
      // or the predicate sees the new generation.
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      cv_.wait(lock, [&] {
        gen = generation_.load(std::memory_order_seq_cst);
        return gen != seen || stop_.load(std::memory_order_relaxed);
      });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = gen;
    uint32_t pieces = 0;
    const int ran = run_pieces(&pieces);
    if (!may_spin_) continue;
    if (ran > 0) {
      spin_ns = spun ? grown(spin_ns) : std::max(spin_ns, kMinSpinNs);
    } else if (spun && pieces >= static_cast<uint32_t>(size())) {
      spin_ns = shrunk(spin_ns);  // late for a job that had a piece for everyone
    }
  }
}

void ThreadPool::parallel_for(int64_t n, RangeFn fn, int64_t min_chunk) {
  const int64_t pieces = num_pieces(n, min_chunk, size());
  if (pieces <= 0) return;
  if (pieces == 1 || t_in_chunk) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> dispatch(dispatch_mu_);
  fn_ = &fn;
  n_ = n;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    error_ = nullptr;
  }
  done_.store(0, std::memory_order_relaxed);
  // Publish: the fields above, then the job (release: a claim that reads it sees them), then the
  // generation that wakes the workers.
  job_.store(pack_job(static_cast<uint32_t>(pieces), 0), std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  const int sleepers = sleepers_.load(std::memory_order_seq_cst);
  if (sleepers > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }  // a worker between its check and its wait
    // Wake no more workers than there are pieces besides the one this thread takes.
    if (pieces - 1 >= sleepers) {
      cv_.notify_all();
    } else {
      for (int64_t i = 0; i < pieces - 1; ++i) cv_.notify_one();
    }
  }

  uint32_t unused = 0;
  run_pieces(&unused);

  // The pieces other threads still run. Spin only as the budget allows (see above), then sleep.
  // The budget follows how long these waits take: one that a full spin would have covered
  // grows it, a longer one shrinks it.
  const auto all_done = [&] { return done_.load(std::memory_order_acquire) == pieces; };
  if (!all_done()) {
    const auto start = std::chrono::steady_clock::now();
    if (spin_until(caller_spin_ns_, all_done)) {
      caller_spin_ns_ = grown(caller_spin_ns_);
    } else {
      {
        std::unique_lock<std::mutex> lock(done_mu_);
        caller_sleeping_.store(true, std::memory_order_seq_cst);
        done_cv_.wait(lock, [&] { return done_.load(std::memory_order_seq_cst) == pieces; });
        caller_sleeping_.store(false, std::memory_order_relaxed);
      }
      if (may_spin_) {
        const auto waited = std::chrono::steady_clock::now() - start;
        caller_spin_ns_ = waited < std::chrono::nanoseconds(kMaxSpinNs) ? grown(caller_spin_ns_)
                                                                        : shrunk(caller_spin_ns_);
      }
    }
  }
  fn_ = nullptr;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    std::swap(error, error_);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace tf
