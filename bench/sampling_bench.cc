// Per-step sampling cost on a 50,257-token vocabulary (GPT-2's): processors + truncation + draw,
// for the parameter sets users actually send.
// Run: build/release/bench/bench_sampling --benchmark_repetitions=5
// --benchmark_report_aggregates_only

#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "sampling/logits_processor.h"
#include "sampling/sampler.h"

namespace {

constexpr int64_t kVocab = 50257;

void run(benchmark::State& state, tf::SamplingParams p) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> base(kVocab);
  for (auto& v : base) v = normal(rng);
  std::vector<int32_t> prompt(200);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % kVocab);
  tf::TokenHistory history(prompt);
  for (int i = 0; i < 100; ++i) history.append(static_cast<int32_t>(rng() % kVocab));
  const std::vector<int32_t> eos = {50256};
  tf::Sampler sampler;
  std::vector<float> logits(kVocab);
  uint64_t step = 0;
  for (auto _ : state) {
    logits = base;
    tf::apply_logits_processors(p, history, eos, logits);
    benchmark::DoNotOptimize(sampler.sample(p, logits, tf::sample_uniform(1, 0, step++)));
  }
}

tf::SamplingParams make(float t, int k, float top_p, float min_p, float rep, bool logprobs) {
  tf::SamplingParams p;
  p.temperature = t;
  p.top_k = k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = rep;
  if (logprobs) p.logprobs = 5;
  return p;
}

}  // namespace

BENCHMARK_CAPTURE(run, greedy, make(0.0f, 0, 1.0f, 0.0f, 1.0f, false))
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(run, temperature_only, make(0.8f, 0, 1.0f, 0.0f, 1.0f, false))
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(run, top_k_50, make(0.8f, 50, 1.0f, 0.0f, 1.0f, false))
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(run, top_p_0_9, make(0.8f, 0, 0.9f, 0.0f, 1.0f, false))
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(run, top_k_40_top_p_0_95, make(0.8f, 40, 0.95f, 0.0f, 1.0f, false))
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(run, min_p_0_05, make(0.8f, 0, 1.0f, 0.05f, 1.0f, false))
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(run, penalties_top_p_logprobs, make(0.8f, 0, 0.9f, 0.0f, 1.2f, true))
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
