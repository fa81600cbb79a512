#pragma once
// The best of several timed runs: what the benchmarks report (the least disturbed run on a noisy
// machine).

#include <algorithm>
#include <chrono>

namespace tf {

template <class Fn>
double best_seconds(int reps, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace tf
