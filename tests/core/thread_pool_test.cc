#include "core/thread_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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

const int64_t kSizes[] = {0, 1, 2, 3, 7, 1000, 100003};
const int64_t kMinChunks[] = {0, 1, 2, 3, 5, 64, 1000, 200000};
const int kPoolSizes[] = {1, 2, 4};

TEST(ThreadPool, SizeCountsTheCaller) {
  for (int threads : kPoolSizes) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
  }
  ThreadPool automatic(0);
  EXPECT_EQ(automatic.size(), ThreadPool::hardware_threads());
  EXPECT_GE(ThreadPool::hardware_threads(), 1);
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
        // The chunks are disjoint, non-empty, contiguous and cover [0, n).
        int64_t next = 0;
        for (const auto& [b, e] : r.chunks) {
          EXPECT_EQ(b, next);
          EXPECT_LT(b, e);
          next = e;
        }
        EXPECT_EQ(next, n);
        EXPECT_LE(static_cast<int>(r.chunks.size()), pool.size());
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

TEST(ThreadPool, UsesSeveralChunksWhenThereIsWork) {
  // Otherwise "visits every index" would also pass for a pool that never splits.
  for (int threads : {2, 4}) {
    ThreadPool pool(threads);
    const RunResult r = run(pool, 1000, 1);
    EXPECT_EQ(static_cast<int>(r.chunks.size()), threads);
  }
}

TEST(ThreadPool, RunsChunksOnOtherThreads) {
  ThreadPool pool(4);
  std::mutex mu;
  std::vector<std::thread::id> ids;
  pool.parallel_for(4, [&](int64_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> lock(mu);
    ids.push_back(std::this_thread::get_id());
  });
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::unique(ids.begin(), ids.end()) - ids.begin(), 4);
  EXPECT_NE(std::find(ids.begin(), ids.end(), std::this_thread::get_id()), ids.end())
      << "the calling thread runs a chunk itself";
}

// The header promises chunks "of at least min_chunk items".
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

TEST(ThreadPool, ExceptionFromCallersChunkPropagates) {
  ThreadPool pool(4);
  // The calling thread runs the chunk that starts at 0.
  std::atomic<int64_t> done{0};
  try {
    pool.parallel_for(400, [&](int64_t b, int64_t e) {
      if (b == 0) throw ChunkError("caller chunk");
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      done += e - b;
    });
    FAIL() << "no exception";
  } catch (const ChunkError& e) {
    EXPECT_STREQ(e.what(), "caller chunk");
  }
  // parallel_for must not return while workers still run fn (it captures our locals).
  EXPECT_EQ(done.load(), 300);

  const RunResult r = run(pool, 1000, 1);
  for (int h : r.hits) ASSERT_EQ(h, 1);
  EXPECT_EQ(static_cast<int>(r.chunks.size()), 4);
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
      EXPECT_EQ(static_cast<int>(r.chunks.size()), threads);
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
    for (int threads : kPoolSizes) {
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
  ThreadPool pool(4);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(1000, [&](int64_t b, int64_t e) { sum += e - b; });
  ASSERT_EQ(sum.load(), 1000);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double cpu0 = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double cpu_ms = (process_cpu_seconds() - cpu0) * 1000.0;
  EXPECT_LT(cpu_ms, 50.0) << "an idle pool of 4 used " << cpu_ms << " ms of CPU in 300 ms";
}

}  // namespace
}  // namespace tf
