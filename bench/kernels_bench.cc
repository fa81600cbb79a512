// Micro-benchmarks of the f32 matmul per ISA table, at decode (GEMV) and prefill (GEMM) shapes.
// Run: build/release/bench/bench_kernels --benchmark_repetitions=5
// --benchmark_report_aggregates_only

#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/isa.h"

namespace {

using tf::kernels::IsaKernels;

void run_matmul(benchmark::State& state, const IsaKernels* isa) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> x(m * k), w(n * k), y(m * n);
  for (auto& v : x) v = dist(rng);
  for (auto& v : w) v = dist(rng);
  const tf::kernels::WeightMatrix wm{tf::kernels::WeightType::kF32, w.data(), nullptr, n, k};
  for (auto _ : state) {
    isa->matmul_cols(x.data(), m, k, wm, 0, n, nullptr, y.data(), n, false);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["GB/s(w)"] = benchmark::Counter(
      4.0 * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void register_all() {
  std::vector<const IsaKernels*> tables = {&tf::kernels::kPortableKernels};
  const auto& f = tf::cpu_features();
  if (f.has_avx2_kernels()) tables.push_back(&tf::kernels::kAvx2Kernels);
  if (f.has_avx512_kernels()) tables.push_back(&tf::kernels::kAvx512Kernels);
  for (const IsaKernels* t : tables) {
    auto* b =
        benchmark::RegisterBenchmark((std::string("matmul/") + t->name).c_str(), run_matmul, t);
    b->Args({1, 2048, 768})->Args({1, 768, 768})->Args({16, 2048, 768})->Args({128, 768, 768});
    b->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
