// `tokenflow bench --roofline`: what this machine can do at most (read bandwidth, multiply-add
// peak) and what tokenflow's matmul reaches in each weight dtype, as a fraction of that limit:
// decode (one row, bound by reading the weights) against bandwidth, prefill (many rows, bound by
// arithmetic) against the peak.

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "cli/commands.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "core/timing.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"

namespace tf::cli {
namespace {

double read_gbs(ThreadPool& pool, const std::vector<float>& buf) {
  const kernels::IsaKernels& isa = kernels::isa();
  const int64_t n = static_cast<int64_t>(buf.size());
  std::vector<float> sink(static_cast<size_t>(pool.size()) * 16);
  const double s = best_seconds(5, [&] {
    pool.parallel_for(pool.size(), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t a = n * t / pool.size(), b = n * (t + 1) / pool.size();
        sink[static_cast<size_t>(t) * 16] = isa.dot(buf.data() + a, buf.data() + a, b - a);
      }
    });
  });
  return static_cast<double>(n) * 4 / s / 1e9;
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

double gemv_gbs(kernels::WeightType t, int64_t n, int64_t k, ThreadPool& pool, std::mt19937& rng) {
  const kernels::LoadedMatrix gemv = pack(t, n, k, rng);
  const int copies = static_cast<int>((int64_t{512} << 20) / gemv.m.bytes()) + 1;
  std::vector<kernels::LoadedMatrix> mats(static_cast<size_t>(copies), gemv);
  for (auto& p : mats) p.rebind();
  std::vector<float> x(static_cast<size_t>(k), 0.5f), y(static_cast<size_t>(n));
  const double s = best_seconds(3, [&] {
    for (const auto& p : mats) kernels::matmul(x.data(), 1, p.m, nullptr, y.data(), pool);
  });
  return static_cast<double>(gemv.m.bytes()) * copies / s / 1e9;
}

int run_roofline(int threads) {
  ThreadPool one(1), all(threads);
  std::printf("cpu              %s\n", cpu_features().to_string().c_str());
  std::printf("kernels          %s, %d threads\n", kernels::isa().name, all.size());
  std::vector<float> buf(static_cast<size_t>(128) << 20, 1.0f);  // 512 MiB, past every cache
  const double bw1 = read_gbs(one, buf), bw = read_gbs(all, buf);
  buf.clear();
  buf.shrink_to_fit();
  const double fl1 = fma_gflops(one), fl = fma_gflops(all);
  std::printf("read bandwidth   %.1f GB/s (1 thread %.1f)\n", bw, bw1);
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
  return 0;
}

}  // namespace

int run_roofline_bench(int threads) {
  return run_roofline(threads);
}

}  // namespace tf::cli
