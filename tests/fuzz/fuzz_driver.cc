// A libFuzzer-compatible driver for compilers without libFuzzer (g++): runs the target on every
// seed (files, or folders of files: the committed corpus) and then on N mutated inputs (bit
// flips, byte overwrites, truncations, insertions, duplicated chunks, boundary integers, deep
// nesting). Mutations stack: each input is a mutation of a seed or of an earlier mutated input,
// so one run reaches several edits away from the corpus. The mutation seed is random unless
// given (-seed=S or TF_FUZZ_SEED) and is printed first, so a failing CI run is reproduced with
// the same seed. CTest runs it in every tree; the asan tree makes it a sanitizer-checked fuzz
// test. Usage: DRIVER [-runs=N] [-seed=S] SEED_FILE_OR_DIR...
// (Coverage-guided fuzzing is the libFuzzer build: scripts/fuzz.sh, docs/fuzzing.md.)

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

uint64_t next(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

void mutate(std::vector<uint8_t>& b, uint64_t& rng) {
  const int ops = 1 + static_cast<int>(next(rng) % 4);
  for (int o = 0; o < ops; ++o) {
    const size_t n = b.size();
    switch (next(rng) % 8) {
      case 0:
        if (n) b[next(rng) % n] ^= static_cast<uint8_t>(1u << (next(rng) % 8));
        break;
      case 1: {
        static const uint8_t interesting[] = {0, 1, 0x7f, 0x80, 0xff, '"', '[', '{', ',', '-', '9'};
        if (n) b[next(rng) % n] = interesting[next(rng) % sizeof(interesting)];
        break;
      }
      case 2:
        if (n) b.resize(next(rng) % n);
        break;
      case 3: {
        const size_t at = n ? next(rng) % (n + 1) : 0;
        const size_t len = 1 + next(rng) % 16;
        std::vector<uint8_t> ins(len);
        for (auto& c : ins) c = static_cast<uint8_t>(next(rng));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), ins.begin(), ins.end());
        break;
      }
      case 4:
        if (n >= 8) {
          const size_t at = next(rng) % (n - 7);
          const uint64_t v = (next(rng) % 2) ? next(rng) : (uint64_t{1} << (next(rng) % 64)) - 1;
          std::memcpy(&b[at], &v, 8);
        }
        break;
      case 5:
        if (n > 1) {
          const size_t from = next(rng) % n, len = 1 + next(rng) % std::min<size_t>(n - from, 32);
          const size_t to = next(rng) % n;
          std::vector<uint8_t> chunk(b.begin() + from, b.begin() + from + len);
          b.insert(b.begin() + static_cast<std::ptrdiff_t>(to), chunk.begin(), chunk.end());
        }
        break;
      case 6:
        if (n >= 4) {  // a 32-bit field set to a boundary value
          const size_t at = (next(rng) % (n / 4)) * 4;
          static const int32_t vals[] = {0, -1, 1, INT32_MIN, INT32_MAX, 3, 1 << 20};
          std::memcpy(&b[at], &vals[next(rng) % 7], 4);
        }
        break;
      case 7: {  // deep nesting: a run of up to 50,000 opening brackets (stack depth bugs)
        const size_t at = n ? next(rng) % (n + 1) : 0;
        const size_t len = (next(rng) % 8) ? 1 + next(rng) % 300 : 1 + next(rng) % 50000;
        const uint8_t open = (next(rng) % 2) ? '[' : '{';
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), len, open);
        break;
      }
    }
  }
}

}  // namespace

std::vector<std::string> seed_files(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) return {path};
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
    if (e.is_regular_file()) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

int main(int argc, char** argv) {
  long runs = 2000;
  uint64_t seed = 0;
  bool seeded = false;
  if (const char* env = std::getenv("TF_FUZZ_SEED")) {
    seed = std::strtoull(env, nullptr, 10);
    seeded = true;
  }
  std::vector<std::string> seeds;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "-runs=", 6) == 0) {
      runs = std::atol(argv[i] + 6);
    } else if (std::strncmp(argv[i], "-seed=", 6) == 0) {
      seed = std::strtoull(argv[i] + 6, nullptr, 10);
      seeded = true;
    } else if (argv[i][0] == '-') {
      // libFuzzer flags (-max_len=, -timeout=, ...) mean nothing here.
    } else {
      for (auto& f : seed_files(argv[i])) seeds.push_back(std::move(f));
    }
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "usage: %s [-runs=N] [-seed=S] SEED_FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  if (!seeded) seed = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  std::printf("fuzz driver: seed %llu (rerun with -seed=%llu), %zu seed inputs, %ld mutations\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed),
              seeds.size(), runs);
  std::fflush(stdout);
  std::vector<std::vector<uint8_t>> corpus;
  for (const auto& path : seeds) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read seed %s\n", path.c_str());
      return 2;
    }
    corpus.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(corpus.back().data(), corpus.back().size());
  }
  // Mutated inputs join a small pool that later mutations start from (half the time), so edits
  // stack; the pool is bounded so that inputs do not grow without limit.
  constexpr size_t kPool = 64, kMaxSize = 1 << 20;
  std::vector<std::vector<uint8_t>> pool;
  uint64_t rng = seed | 1;
  for (long r = 0; r < runs; ++r) {
    const bool from_pool = !pool.empty() && next(rng) % 2;
    std::vector<uint8_t> b =
        from_pool ? pool[next(rng) % pool.size()] : corpus[next(rng) % corpus.size()];
    mutate(b, rng);
    if (b.size() > kMaxSize) b.resize(kMaxSize);
    LLVMFuzzerTestOneInput(b.data(), b.size());
    if (pool.size() < kPool) {
      pool.push_back(std::move(b));
    } else {
      pool[next(rng) % kPool] = std::move(b);
    }
  }
  std::printf("%ld inputs, no crash\n", runs + static_cast<long>(corpus.size()));
  return 0;
}
