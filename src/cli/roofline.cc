// `tokenflow bench --roofline`: what this machine can do at most (read bandwidth, multiply-add
// peak) and what tokenflow's matmul reaches in each weight dtype, as a fraction of that limit:
// decode (one row, bound by reading the weights) against bandwidth, prefill (many rows, bound by
// arithmetic) against the peak.

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "core/timing.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"

namespace tf::cli {
namespace {

// One way of reading a buffer past every cache: `threads` threads (each pinned to its own CPU of
// the process's mask, or left to the scheduler), each over its contiguous share or over 1 MiB
// chunks taken in turn, with software prefetching `ahead` bytes in advance or none.
struct ReadPattern {
  const char* name;
  bool pinned;
  bool interleaved;
  int64_t ahead;
};

// The CPUs the process may run on, in order.
std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// GB/s of the best of 5 passes over buf with pattern p.
double read_gbs(int threads, const ReadPattern& p, const std::vector<float>& buf) {
  const kernels::IsaKernels& isa = kernels::isa();
  const int64_t n = static_cast<int64_t>(buf.size());
  constexpr int64_t kChunk = (int64_t{1} << 20) / 4;  // floats in 1 MiB
  constexpr int kPasses = 5;
  const std::vector<int> cpus = allowed_cpus();
  std::vector<float> sink(static_cast<size_t>(threads) * 16);
  std::barrier start(threads + 1), done(threads + 1);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      if (p.pinned && !cpus.empty()) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[static_cast<size_t>(t) % cpus.size()], &one);
        pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
      }
      for (int pass = 0; pass < kPasses; ++pass) {
        start.arrive_and_wait();
        float s = 0;
        if (p.interleaved) {
          for (int64_t c = t * kChunk; c < n; c += threads * kChunk)
            s += isa.read_peak(buf.data() + c, std::min(kChunk, n - c), p.ahead);
        } else {
          const int64_t a = n * t / threads, b = n * (t + 1) / threads;
          s = isa.read_peak(buf.data() + a, b - a, p.ahead);
        }
        sink[static_cast<size_t>(t) * 16] += s;
        done.arrive_and_wait();
      }
    });
  }
  double best = 1e30;
  for (int pass = 0; pass < kPasses; ++pass) {
    start.arrive_and_wait();
    const auto t0 = std::chrono::steady_clock::now();
    done.arrive_and_wait();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  for (auto& th : pool) th.join();
  return static_cast<double>(n) * 4 / best / 1e9;
}

// Read bandwidth as the best of several loops reaches it: the maximum over the patterns, each
// printed when `print`.
double best_read_gbs(int threads, const std::vector<float>& buf, bool print) {
  static constexpr ReadPattern kPatterns[] = {
      {"pinned, contiguous", true, false, 0},
      {"pinned, contiguous, prefetch 1 KiB", true, false, 1024},
      {"pinned, contiguous, prefetch 4 KiB", true, false, 4096},
      {"pinned, 1 MiB chunks in turn", true, true, 0},
      {"unpinned, contiguous", false, false, 0},
  };
  double best = 0;
  for (const ReadPattern& p : kPatterns) {
    const double gbs = read_gbs(threads, p, buf);
    if (print) std::printf("  %-36s %6.1f GB/s\n", p.name, gbs);
    best = std::max(best, gbs);
  }
  return best;
}

double fma_gflops(ThreadPool& pool) {
  const kernels::IsaKernels& isa = kernels::isa();
  const int64_t iters = 20'000'000;
  std::vector<float> sink(static_cast<size_t>(pool.size()) * 16);
  const double s = best_seconds(3, [&] {
    pool.parallel_for(pool.size(), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) sink[static_cast<size_t>(t) * 16] = isa.fma_peak(iters);
    });
  });
  return 2.0 * 8 * isa.vec_width * static_cast<double>(iters) * pool.size() / s / 1e9;
}

kernels::LoadedMatrix pack(kernels::WeightType t, int64_t n, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (auto& v : w) v = dist(rng);
  return kernels::load_like_the_loader(t, w.data(), n, k);
}

// Copies of one n x k matrix of type t, together past every cache (512 MiB).
std::vector<kernels::LoadedMatrix> weight_copies(kernels::WeightType t, int64_t n, int64_t k,
                                                 std::mt19937& rng) {
  const kernels::LoadedMatrix one = pack(t, n, k, rng);
  const int copies = static_cast<int>((int64_t{512} << 20) / one.m.bytes()) + 1;
  std::vector<kernels::LoadedMatrix> mats(static_cast<size_t>(copies), one);
  for (auto& p : mats) p.rebind();
  return mats;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds for m activation rows times every copy in turn (the best of reps).
double pass_seconds(const std::vector<kernels::LoadedMatrix>& mats, int64_t m, ThreadPool& pool,
                    int reps = 3) {
  const int64_t n = mats[0].m.n, k = mats[0].m.k;
  std::vector<float> x(static_cast<size_t>(m * k), 0.5f), y(static_cast<size_t>(m * n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f - 0.001f * static_cast<float>(i % 997);
  return best_seconds(reps, [&] {
    for (const auto& p : mats) kernels::matmul(x.data(), m, p.m, nullptr, y.data(), pool);
  });
}

double gemv_gbs(kernels::WeightType t, int64_t n, int64_t k, ThreadPool& pool, std::mt19937& rng) {
  const auto mats = weight_copies(t, n, k, rng);
  return static_cast<double>(mats[0].m.bytes()) * static_cast<double>(mats.size()) /
         pass_seconds(mats, 1, pool) / 1e9;
}

int run_roofline(int threads) {
  ThreadPool one(1), all(threads);
  std::printf("cpu              %s\n", cpu_features().to_string().c_str());
  std::printf("kernels          %s, %d threads\n", kernels::isa().name, all.size());
  std::vector<float> buf(static_cast<size_t>(256) << 20, 1.0f);  // 1 GiB, past every cache
  std::printf("read patterns, %d threads:\n", all.size());
  const double bw = best_read_gbs(all.size(), buf, true);
  const double bw1 = best_read_gbs(1, buf, false);
  buf.clear();
  buf.shrink_to_fit();
  const double fl1 = fma_gflops(one), fl = fma_gflops(all);
  std::printf("read bandwidth   %.1f GB/s, the best of those (1 thread %.1f)\n", bw, bw1);
  std::printf("f32 FMA peak     %.0f GFLOP/s (1 thread %.0f)\n\n", fl, fl1);
  std::printf(
      "| dtype | decode GEMV 4096x4096 GB/s | of bandwidth | GEMV 2048x768 GB/s | of bandwidth | "
      "prefill GEMM 512x2048x2048 GFLOP/s | of f32 FMA peak |\n|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(7);
  for (kernels::WeightType t :
       {kernels::WeightType::kF32, kernels::WeightType::kBF16, kernels::WeightType::kF16,
        kernels::WeightType::kI8, kernels::WeightType::kQ4}) {
    // Decode: copies of one matrix, together 512 MiB (past every cache), multiplied in turn;
    // square rows of 4096 and the short rows of a small model (768 wide).
    const double gbs = gemv_gbs(t, 4096, 4096, all, rng);
    const double gbs_short = gemv_gbs(t, 2048, 768, all, rng);
    const kernels::LoadedMatrix gemm = pack(t, 2048, 2048, rng);
    std::vector<float> xm(512 * 2048, 0.25f), ym(512 * 2048);
    const double sm =
        best_seconds(3, [&] { kernels::matmul(xm.data(), 512, gemm.m, nullptr, ym.data(), all); });
    const double gflops = 2.0 * 512 * 2048 * 2048 / sm / 1e9;
    std::printf("| %s | %.1f | %.0f %% | %.1f | %.0f %% | %.0f | %.0f %% |\n",
                std::string(kernels::weight_type_name(t)).c_str(), gbs, 100 * gbs / bw, gbs_short,
                100 * gbs_short / bw, gflops, 100 * gflops / fl);
  }
  // A few rows at once (a decode batch, a speculative verification): each should cost about what
  // one row does, the weights read once for all of them.
  std::printf(
      "\nA few rows at once, each round's ratios to one row (medians of 15 rounds):\n\n"
      "| dtype | 1 row 4096x4096 ms (512 MiB) | 2 rows / 1 | 4 rows / 1 | 8 rows / 1 |\n"
      "|---|---|---|---|---|\n");
  for (kernels::WeightType t :
       {kernels::WeightType::kF32, kernels::WeightType::kBF16, kernels::WeightType::kF16,
        kernels::WeightType::kI8, kernels::WeightType::kQ4}) {
    // Rounds of 1, 2, 4 and 8 rows one after another, the ratios per round and their median:
    // this machine's bandwidth moves with its neighbours' load by up to 1.7x within a minute.
    const auto mats = weight_copies(t, 4096, 4096, rng);
    constexpr int kRounds = 15;
    std::vector<double> one, ratio[3];
    for (int r = 0; r < kRounds; ++r) {
      const double s1 = pass_seconds(mats, 1, all, 1);
      one.push_back(s1);
      for (int e = 0; e < 3; ++e) ratio[e].push_back(pass_seconds(mats, 2 << e, all, 1) / s1);
    }
    std::printf("| %s | %.1f | %.2f | %.2f | %.2f |\n",
                std::string(kernels::weight_type_name(t)).c_str(), 1e3 * median(one),
                median(ratio[0]), median(ratio[1]), median(ratio[2]));
  }
  return 0;
}

}  // namespace

int run_roofline_bench(int threads) {
  return run_roofline(threads);
}

}  // namespace tf::cli
