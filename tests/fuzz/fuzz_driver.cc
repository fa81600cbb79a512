// A libFuzzer-compatible driver for compilers without libFuzzer (g++): runs the target on each
// seed file and on a fixed number of deterministic mutations of it (bit flips, byte overwrites,
// truncations, insertions, duplicated chunks). CTest runs it under every preset, so the asan
// preset turns it into a sanitizer-checked fuzz smoke test. Usage: DRIVER [-runs=N] SEED...

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
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

int main(int argc, char** argv) {
  long runs = 2000;
  std::vector<std::string> seeds;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "-runs=", 6) == 0) {
      runs = std::atol(argv[i] + 6);
    } else {
      seeds.push_back(argv[i]);
    }
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "usage: %s [-runs=N] SEED...\n", argv[0]);
    return 2;
  }
  long total = 0;
  for (const auto& path : seeds) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read seed %s\n", path.c_str());
      return 2;
    }
    const std::vector<uint8_t> seed((std::istreambuf_iterator<char>(in)), {});
    LLVMFuzzerTestOneInput(seed.data(), seed.size());
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ seed.size();
    for (long r = 0; r < runs; ++r) {
      std::vector<uint8_t> b = seed;
      mutate(b, rng);
      LLVMFuzzerTestOneInput(b.data(), b.size());
      ++total;
    }
  }
  std::printf("%ld inputs, no crash\n", total);
  return 0;
}
