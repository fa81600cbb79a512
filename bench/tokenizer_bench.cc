// Encode throughput of a tokenizer, single thread: MB/s over a text file, median of N runs.
// Usage: bench_tokenizer TOKENIZER_PATH TEXT_FILE [RUNS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer_loader.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER TEXT_FILE [RUNS]\n", argv[0]);
    return 2;
  }
  auto tok = tf::load_tokenizer_for(argv[1], 0);
  std::ifstream in(argv[2], std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const int runs = argc > 3 ? std::atoi(argv[3]) : 5;
  std::vector<double> secs;
  size_t n_ids = 0;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    n_ids = tok->encode(text, false).size();
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  const double med = secs[secs.size() / 2];
  std::printf("%.2f MB/s  (%zu bytes, %zu tokens, median %.3f s of %d runs)\n",
              static_cast<double>(text.size()) / 1e6 / med, text.size(), n_ids, med, runs);
  return 0;
}
