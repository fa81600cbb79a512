#pragma once
// splitmix64's finalizer: a fast, well-mixed 64-bit hash step (counter-based randomness, block
// hashes of the prefix cache).

#include <cstdint>

namespace tf {

inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace tf
