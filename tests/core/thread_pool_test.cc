#include "core/thread_pool.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tf {
namespace {

using Chunk = std::pair<int64_t, int64_t>;

struct RunResult {
  std::vector<int> hits;      // how often each index was visited
  std::vector<Chunk> chunks;  // the (begin, end) ranges fn was called with
};

RunResult run(ThreadPool& pool, int64_t n, int64_t min_chunk) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(std::max<int64_t>(n, 0)));
  std::mutex mu;
  RunResult r;
  pool.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        {
          std::lock_guard<std::mutex> lock(mu);
          r.chunks.emplace_back(begin, end);
        }
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
      },
      min_chunk);
  r.hits.reserve(hits.size());
  for (auto& h : hits) r.hits.push_back(h.load());
  std::sort(r.chunks.begin(), r.chunks.end());
  return r;
}

const int64_t kSizes[] = {0, 1, 2, 3, 7, 8, 9, 31, 1000, 100003};
const int64_t kMinChunks[] = {0, 1, 2, 3, 5, 64, 1000, 200000, INT64_MAX};
const int kPoolSizes[] = {1, 2, 3, 4, 8};

// What the header promises for (n, min_chunk, threads): p pieces of n / p items, the first
// n % p of them one longer.
std::vector<Chunk> expected_pieces(int64_t n, int64_t min_chunk, int threads) {
  std::vector<Chunk> out;
  const int64_t p = ThreadPool::num_pieces(n, min_chunk, threads);
  int64_t begin = 0;
  for (int64_t i = 0; i < p; ++i) {
    const int64_t len = n / p + (i < n % p ? 1 : 0);
    out.emplace_back(begin, begin + len);
    begin += len;
  }
  return out;
}

// Waits for pred under mu, at most a generous minute: a condition that never comes is reported
// as a failure (false) instead of hanging the test.
template <typename Pred>
bool wait_for_condition(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                        Pred pred) {
  return cv.wait_for(lock, std::chrono::seconds(60), pred);
}

TEST(ThreadPool, SizeCountsTheCaller) {
  for (int threads : kPoolSizes) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
  }
  ThreadPool automatic(0);
  EXPECT_EQ(automatic.size(), ThreadPool::hardware_threads());
  EXPECT_GE(ThreadPool::hardware_threads(), 1);
}

TEST(ThreadPool, NumPieces) {
  constexpr int64_t k = ThreadPool::kPiecesPerThread;
  EXPECT_EQ(ThreadPool::num_pieces(0, 1, 4), 0);
  EXPECT_EQ(ThreadPool::num_pieces(-3, 1, 4), 0);
  EXPECT_EQ(ThreadPool::num_pieces(1, 1, 4), 1);
  EXPECT_EQ(ThreadPool::num_pieces(1, 0, 4), 1);
  EXPECT_EQ(ThreadPool::num_pieces(7, 1, 8), 7);  // fewer items than threads
  EXPECT_EQ(ThreadPool::num_pieces(1000, 1, 2), 2 * k);
  EXPECT_EQ(ThreadPool::num_pieces(1000, 1, 1), k);
  EXPECT_EQ(ThreadPool::num_pieces(1000, 300, 4), 3);  // min_chunk bounds it
  EXPECT_EQ(ThreadPool::num_pieces(1000, 2000, 4), 1);
  EXPECT_EQ(ThreadPool::num_pieces(1000, INT64_MAX, 4), 1);
  EXPECT_GT(ThreadPool::num_pieces(1000, 1, 2), 2) << "more pieces than threads";
}

TEST(ThreadPool, ClaimsGoRoundContiguousRegions) {
  // A bijection for every shape, and with two threads claiming in turn each runs one contiguous
  // region front to back.
  for (int threads : {1, 2, 3, 4, 8}) {
    for (int64_t pieces = 1; pieces <= 40; ++pieces) {
      std::vector<int> seen(static_cast<size_t>(pieces), 0);
      for (int64_t c = 0; c < pieces; ++c) {
        const int64_t at = ThreadPool::claim_position(c, pieces, threads);
        ASSERT_GE(at, 0);
        ASSERT_LT(at, pieces);
        ++seen[at];
      }
      for (int64_t i = 0; i < pieces; ++i) ASSERT_EQ(seen[i], 1) << threads << " " << pieces;
    }
  }
  EXPECT_EQ(ThreadPool::claim_position(0, 8, 2), 0);
  EXPECT_EQ(ThreadPool::claim_position(1, 8, 2), 4);
  EXPECT_EQ(ThreadPool::claim_position(2, 8, 2), 1);
  EXPECT_EQ(ThreadPool::claim_position(7, 8, 2), 7);
  EXPECT_EQ(ThreadPool::claim_position(6, 7, 2), 3);  // regions of 4 and 3
}

TEST(ThreadPool, VisitsEveryIndexExactlyOnce) {
  for (int threads : kPoolSizes) {
    ThreadPool pool(threads);
    for (int64_t n : kSizes) {
      for (int64_t min_chunk : kMinChunks) {
        SCOPED_TRACE("threads=" + std::to_string(threads) + " n=" + std::to_string(n) +
                     " min_chunk=" + std::to_string(min_chunk));
        const RunResult r = run(pool, n, min_chunk);
        ASSERT_EQ(static_cast<int64_t>(r.hits.size()), std::max<int64_t>(n, 0));
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(r.hits[i], 1) << "index " << i;
        // The pieces are disjoint, non-empty, contiguous, cover [0, n), and are the ones the
        // header describes.
        int64_t next = 0;
        for (const auto& [b, e] : r.chunks) {
          EXPECT_EQ(b, next);
          EXPECT_LT(b, e);
          next = e;
        }
        EXPECT_EQ(next, n);
        EXPECT_EQ(r.chunks, expected_pieces(n, min_chunk, threads));
        EXPECT_LE(static_cast<int64_t>(r.chunks.size()),
                  int64_t{ThreadPool::kPiecesPerThread} * pool.size());
        if (n == 0) {
          EXPECT_TRUE(r.chunks.empty());
        }
      }
    }
  }
}

TEST(ThreadPool, NegativeCountRunsNothing) {
  ThreadPool pool(2);
  int calls = 0;
  pool.parallel_for(-5, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPool, UsesSeveralPiecesWhenThereIsWork) {
  // Otherwise "visits every index" would also pass for a pool that never splits.
  for (int threads : {2, 4}) {
    ThreadPool pool(threads);
    const RunResult r = run(pool, 1000, 1);
    EXPECT_EQ(static_cast<int>(r.chunks.size()), ThreadPool::kPiecesPerThread * threads);
  }
}

// Every thread of the pool, the caller included, runs a piece: each thread's first piece waits
// until all of them have started one, so no thread can take a second piece before then.
TEST(ThreadPool, RunsPiecesOnEveryThread) {
  for (int threads : {2, 4, 8}) {
    SCOPED_TRACE("threads=" + std::to_string(threads));
    ThreadPool pool(threads);
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::thread::id> ids;
    bool timed_out = false;
    pool.parallel_for(64, [&](int64_t, int64_t) {
      std::unique_lock<std::mutex> lock(mu);
      const auto self = std::this_thread::get_id();
      if (std::find(ids.begin(), ids.end(), self) == ids.end()) ids.push_back(self);
      cv.notify_all();
      if (!wait_for_condition(lock, cv, [&] { return static_cast<int>(ids.size()) >= threads; }))
        timed_out = true;
    });
    EXPECT_FALSE(timed_out) << "only " << ids.size() << " threads ran pieces";
    EXPECT_EQ(static_cast<int>(ids.size()), threads);
    EXPECT_NE(std::find(ids.begin(), ids.end(), std::this_thread::get_id()), ids.end())
        << "the calling thread runs pieces itself";
  }
}

// Dynamic claiming: while one piece is stuck (as a descheduled thread would be), the other
// threads take every other piece. The piece of index 0 waits until every other index has run.
// With one static chunk per thread, index 1 would sit behind index 0 in the same chunk and
// this would time out.
TEST(ThreadPool, OtherThreadsTakeTheRestWhileOnePieceIsStuck) {
  for (int threads : {2, 3, 4}) {
    SCOPED_TRACE("threads=" + std::to_string(threads));
    ThreadPool pool(threads);
    const int64_t n = int64_t{ThreadPool::kPiecesPerThread} * threads;
    ASSERT_EQ(ThreadPool::num_pieces(n, 1, threads), n) << "one item per piece";
    for (int round = 0; round < 20; ++round) {
      std::mutex mu;
      std::condition_variable cv;
      int64_t others_done = 0;
      bool timed_out = false;
      std::vector<int> hits(static_cast<size_t>(n), 0);
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          std::unique_lock<std::mutex> lock(mu);
          ++hits[i];
          if (i == 0) {
            if (!wait_for_condition(lock, cv, [&] { return others_done == n - 1; }))
              timed_out = true;
          } else {
            ++others_done;
            cv.notify_all();
          }
        }
      });
      ASSERT_FALSE(timed_out) << "round " << round << ": " << others_done << " of " << n - 1
                              << " other pieces ran while index 0 waited";
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "index " << i;
    }
  }
}

// The header promises pieces "of at least min_chunk items".
TEST(ThreadPool, ChunksHonourMinChunk) {
  for (int threads : kPoolSizes) {
    ThreadPool pool(threads);
    for (int64_t n : kSizes) {
      for (int64_t min_chunk : kMinChunks) {
        if (n == 0) continue;
        SCOPED_TRACE("threads=" + std::to_string(threads) + " n=" + std::to_string(n) +
                     " min_chunk=" + std::to_string(min_chunk));
        const RunResult r = run(pool, n, min_chunk);
        const int64_t want = std::min<int64_t>(std::max<int64_t>(min_chunk, 1), n);
        for (const auto& [b, e] : r.chunks) {
          EXPECT_GE(e - b, want) << "chunk [" << b << ", " << e << ")";
        }
      }
    }
  }
}

struct ChunkError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// parallel_for rethrows only after every other piece has finished (they use its caller's
// locals): the pieces that do not throw wait until the one that does has thrown.
TEST(ThreadPool, ExceptionPropagatesAfterTheOtherPiecesFinish) {
  ThreadPool pool(4);
  std::mutex mu;
  std::condition_variable cv;
  bool thrown = false, timed_out = false;
  int64_t done = 0;
  try {
    pool.parallel_for(400, [&](int64_t b, int64_t e) {
      std::unique_lock<std::mutex> lock(mu);
      if (b == 0) {
        thrown = true;
        cv.notify_all();
        throw ChunkError("first piece");
      }
      if (!wait_for_condition(lock, cv, [&] { return thrown; })) timed_out = true;
      done += e - b;
    });
    FAIL() << "no exception";
  } catch (const ChunkError& e) {
    EXPECT_STREQ(e.what(), "first piece");
  }
  EXPECT_FALSE(timed_out);
  const int64_t first = expected_pieces(400, 1, 4)[0].second;
  EXPECT_EQ(done, 400 - first);

  const RunResult r = run(pool, 1000, 1);
  for (int h : r.hits) ASSERT_EQ(h, 1);
  EXPECT_EQ(r.chunks, expected_pieces(1000, 1, 4));
}

TEST(ThreadPool, ExceptionFromTheCallersPiecePropagates) {
  ThreadPool pool(4);
  const auto caller = std::this_thread::get_id();
  std::mutex mu;
  std::condition_variable cv;
  bool caller_ran = false, timed_out = false;
  int64_t done = 0, by_caller = 0;
  // The workers' pieces wait until the caller has run one: with more pieces than workers, the
  // caller gets one.
  try {
    pool.parallel_for(400, [&](int64_t b, int64_t e) {
      std::unique_lock<std::mutex> lock(mu);
      if (std::this_thread::get_id() == caller) {
        caller_ran = true;
        by_caller += e - b;
        cv.notify_all();
        throw ChunkError("caller piece");
      }
      if (!wait_for_condition(lock, cv, [&] { return caller_ran; })) timed_out = true;
      done += e - b;
    });
    FAIL() << "no exception";
  } catch (const ChunkError& e) {
    EXPECT_STREQ(e.what(), "caller piece");
  }
  EXPECT_FALSE(timed_out);
  EXPECT_GT(by_caller, 0);
  EXPECT_EQ(done + by_caller, 400);
}

TEST(ThreadPool, ExceptionFromWorkersChunkPropagates) {
  for (int threads : {2, 4}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 3; ++round) {
      try {
        pool.parallel_for(1000, [&](int64_t b, int64_t) {
          if (b != 0) throw ChunkError("worker chunk " + std::to_string(b));
        });
        FAIL() << "no exception";
      } catch (const ChunkError& e) {
        EXPECT_EQ(std::string(e.what()).rfind("worker chunk ", 0), 0u) << e.what();
      }
      // The pool is still usable, and a stale error is not rethrown by a clean call.
      const RunResult r = run(pool, 1000, 1);
      for (int h : r.hits) ASSERT_EQ(h, 1);
      EXPECT_EQ(r.chunks, expected_pieces(1000, 1, threads));
    }
  }
}

TEST(ThreadPool, ExceptionFromOnlyChunkPropagates) {
  ThreadPool pool(1);
  EXPECT_THROW(pool.parallel_for(10, [](int64_t, int64_t) { throw ChunkError("x"); }), ChunkError);
  ThreadPool pool4(4);
  // One chunk only (min_chunk covers everything): runs inline, still propagates.
  EXPECT_THROW(pool4.parallel_for(
                   10, [](int64_t, int64_t) { throw ChunkError("x"); }, 100),
               ChunkError);
}

// Bodies that could deadlock run in a child process with an alarm, so a hang becomes a failure
// instead of a stuck test binary. The body returns true on success.
template <typename Body>
void run_with_deadline(unsigned seconds, Body body) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        alarm(seconds);
        const bool ok = body();
        std::fflush(nullptr);
        std::_Exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "")
      << "killed by a signal means it hung for " << seconds << " s (SIGALRM is 14)";
}

TEST(ThreadPoolDeathTest, NestedParallelForRunsInlineAndCompletes) {
  for (int threads : kPoolSizes) {
    SCOPED_TRACE("threads=" + std::to_string(threads));
    run_with_deadline(10, [threads] {
      ThreadPool pool(threads);
      constexpr int64_t kOuter = 8, kInner = 1000;
      std::vector<std::atomic<int>> hits(kOuter * kInner);
      pool.parallel_for(kOuter, [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) {
          const auto self = std::this_thread::get_id();
          pool.parallel_for(kInner, [&](int64_t ib, int64_t ie) {
            if (std::this_thread::get_id() != self) {
              std::fprintf(stderr, "nested chunk ran on another thread\n");
              std::_Exit(2);
            }
            for (int64_t i = ib; i < ie; ++i) hits[o * kInner + i]++;
          });
        }
      });
      for (size_t i = 0; i < hits.size(); ++i) {
        if (hits[i].load() != 1) {
          std::fprintf(stderr, "index %zu visited %d times\n", i, hits[i].load());
          return false;
        }
      }
      return true;
    });
  }
}

TEST(ThreadPoolDeathTest, ManyBackToBackSmallCallsComplete) {
  for (int threads : kPoolSizes) {
    SCOPED_TRACE("threads=" + std::to_string(threads));
    run_with_deadline(60, [threads] {
      ThreadPool pool(threads);
      int64_t total = 0;
      std::atomic<int64_t> sum{0};
      for (int call = 0; call < 10000; ++call) {
        const int64_t n = 1 + call % 7;
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) sum.fetch_add(i + 1, std::memory_order_relaxed);
        });
        total += n * (n + 1) / 2;
        if (sum.load() != total) {
          std::fprintf(stderr, "call %d: sum %lld, want %lld\n", call,
                       static_cast<long long>(sum.load()), static_cast<long long>(total));
          return false;
        }
      }
      return true;
    });
  }
}

TEST(ThreadPoolDeathTest, SeveralCallersShareOnePool) {
  run_with_deadline(60, [] {
    ThreadPool pool(3);
    std::atomic<int64_t> sum{0};
    std::vector<std::thread> callers;
    for (int t = 0; t < 3; ++t) {
      callers.emplace_back([&] {
        for (int call = 0; call < 500; ++call) {
          pool.parallel_for(10, [&](int64_t b, int64_t e) { sum += e - b; });
        }
      });
    }
    for (auto& c : callers) c.join();
    return sum.load() == 3 * 500 * 10;
  });
}

// Destruction wakes the workers itself (stop flag + notify) whether they never ran, still spin
// after a call, or sleep: a lost wake-up hangs and the alarm fails the test. A pool that instead
// polled for the flag would take rounds x its polling period: 60 destructions stay far inside
// the alarm on a loaded machine (milliseconds each) and far outside it for a period of a second. No
// wall-clock bound per destruction: on two busy cores one can take most of a second.
TEST(ThreadPoolDeathTest, DestroyingAPoolJoinsPromptly) {
  run_with_deadline(30, [] {
    for (int threads : {1, 2, 4}) {  // 4: more threads than CPUs on a small machine (no spin)
      for (int round = 0; round < 30; ++round) {
        { ThreadPool pool(threads); }  // never used
        auto pool = std::make_unique<ThreadPool>(threads);
        pool->parallel_for(100, [](int64_t, int64_t) {});
        pool.reset();  // right after a call, while workers may still spin
      }
      for (int round = 0; round < 3; ++round) {
        auto pool = std::make_unique<ThreadPool>(threads);
        pool->parallel_for(100, [](int64_t, int64_t) {});
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // long enough to sleep
        pool.reset();
      }
    }
    return true;
  });
}

double process_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

TEST(ThreadPool, IdlePoolBurnsNoCpu) {
  // 4 threads: more than CPUs on a small machine (never spins); 0: one per CPU (may spin).
  for (int threads : {4, 0}) {
    ThreadPool pool(threads);
    std::atomic<int64_t> sum{0};
    for (int call = 0; call < 100; ++call) {
      pool.parallel_for(1000, [&](int64_t b, int64_t e) { sum += e - b; });
    }
    ASSERT_EQ(sum.load(), 100 * 1000);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const double cpu0 = process_cpu_seconds();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const double cpu_ms = (process_cpu_seconds() - cpu0) * 1000.0;
    EXPECT_LT(cpu_ms, 50.0) << "an idle pool of " << pool.size() << " used " << cpu_ms
                            << " ms of CPU in 300 ms";
  }
}

// More threads than this machine's CPUs (8 > 2 on the CI machine): the pool never spins, so
// workers are often asleep or descheduled when a call comes; every call still finishes with each
// index run once.
TEST(ThreadPoolDeathTest, OversubscribedPoolRunsManySmallCalls) {
  run_with_deadline(120, [] {
    ThreadPool pool(8);
    std::vector<std::atomic<int>> hits(64);
    for (int call = 0; call < 10000; ++call) {
      const int64_t n = 1 + call % 64;
      const int64_t min_chunk = 1 + call % 3;
      pool.parallel_for(
          n,
          [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
          },
          min_chunk);
      for (int64_t i = 0; i < 64; ++i) {
        const int want = i < n ? 1 : 0;
        if (hits[i].exchange(0) != want) {
          std::fprintf(stderr, "call %d (n=%lld): index %lld not run exactly once\n", call,
                       static_cast<long long>(n), static_cast<long long>(i));
          return false;
        }
      }
    }
    return true;
  });
}

TEST(CgroupQuota, CpuMax) {
  EXPECT_EQ(cpus_from_cgroup_quota("max 100000"), 0);
  EXPECT_EQ(cpus_from_cgroup_quota("max 100000\n"), 0);
  EXPECT_EQ(cpus_from_cgroup_quota("150000 100000"), 2);
  EXPECT_EQ(cpus_from_cgroup_quota("150000 100000\n"), 2);
  EXPECT_EQ(cpus_from_cgroup_quota("100000 100000"), 1);
  EXPECT_EQ(cpus_from_cgroup_quota("50000 100000"), 1);
  EXPECT_EQ(cpus_from_cgroup_quota("1000 100000"), 1);
  EXPECT_EQ(cpus_from_cgroup_quota("400000 100000"), 4);
  EXPECT_EQ(cpus_from_cgroup_quota("400001 100000"), 5);
  EXPECT_EQ(cpus_from_cgroup_quota("300000 50000"), 6);
  // Garbage, or no limit that can be read: 0.
  EXPECT_EQ(cpus_from_cgroup_quota(""), 0);
  EXPECT_EQ(cpus_from_cgroup_quota("max"), 0);
  EXPECT_EQ(cpus_from_cgroup_quota("150000"), 0);
  EXPECT_EQ(cpus_from_cgroup_quota("garbage"), 0);
  EXPECT_EQ(cpus_from_cgroup_quota("abc 100000"), 0);
  EXPECT_EQ(cpus_from_cgroup_quota("150000 abc"), 0);
  EXPECT_EQ(cpus_from_cgroup_quota("150000 100000 7"), 0);
  EXPECT_EQ(cpus_from_cgroup_quota("-1 100000"), 0);
  EXPECT_EQ(cpus_from_cgroup_quota("150000 0"), 0);
  EXPECT_EQ(cpus_from_cgroup_quota("99999999999999999999999 100000"), 0);
}

TEST(CgroupQuota, CfsQuota) {
  EXPECT_EQ(cpus_from_cfs_quota("-1\n", "100000\n"), 0);
  EXPECT_EQ(cpus_from_cfs_quota("150000\n", "100000\n"), 2);
  EXPECT_EQ(cpus_from_cfs_quota("50000", "100000"), 1);
  EXPECT_EQ(cpus_from_cfs_quota("200000", "100000"), 2);
  EXPECT_EQ(cpus_from_cfs_quota("", "100000"), 0);
  EXPECT_EQ(cpus_from_cfs_quota("150000", "x"), 0);
}

TEST(ThreadPool, HardwareThreadsFitTheAffinityMask) {
  const int n = ThreadPool::hardware_threads();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    EXPECT_LE(n, CPU_COUNT(&set));
  }
}

}  // namespace
}  // namespace tf
