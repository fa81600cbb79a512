// Fuzz target: an entry of the prefix cache's disk tier (--kv-cache-dir, KvDiskCache), the
// bytes another process (or a broken disk) left at a block's path, read for a request whose
// tokens are 1, 2, 3, 4. An entry is either read whole, and then it is exactly the format (the
// magic, this key, these tokens, the block's size, its K/V, a SHA-256 of all of it) and the K/V
// that reach the block are its bytes; or it is a miss, and the file is gone. Never a crash, a
// sanitizer report or a hang.
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "engine/kv_disk_cache.h"
#include "fuzz_file.h"

namespace {

constexpr int kBlockSize = 4;
constexpr int64_t kBlockBytes = 64;
constexpr size_t kPayload = 56 + 4 * kBlockSize;  // header, tokens
const int32_t kTokens[kBlockSize] = {1, 2, 3, 4};

tf::KvDiskCache& cache() {
  static const std::string dir =
      (std::filesystem::temp_directory_path() / ("tf_fuzz_kv_disk_" + std::to_string(::getpid())))
          .string();
  static tf::KvDiskCache c(tf::KvDiskConfig{dir, 1ll << 30, "fuzz", 1ll << 20}, "fuzz model",
                           kBlockSize, kBlockBytes, [] {});
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tf::KvDiskCache& c = cache();
  const tf::KvDiskCache::Key key = tf::KvDiskCache::next(c.root(0, ""), kTokens, kBlockSize);
  const std::string path = c.path_of(key);
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  if (!write_fuzz_file(path, data, size)) return 0;
  std::array<uint8_t, kBlockBytes> block{};
  tf::KvDiskCache::LoadJob job;
  job.keys = {key};
  job.tokens.assign(kTokens, kTokens + kBlockSize);
  job.into = {{std::span<uint8_t>(block.data(), block.size())}};
  c.load(std::move(job));
  c.flush();
  const auto loaded = c.take_loaded();
  if (loaded.size() != 1) __builtin_trap();
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (loaded[0].blocks == 1) {
    if (!exists || size != kPayload + kBlockBytes + 32 || std::memcmp(data, "TFKVBLK1", 8) != 0 ||
        std::memcmp(data + 8, key.data(), 32) != 0 ||
        std::memcmp(block.data(), data + kPayload, kBlockBytes) != 0 ||
        tf::sha256(data, size - 32) != *reinterpret_cast<const tf::Sha256Digest*>(data + size - 32))
      __builtin_trap();
  } else if (loaded[0].blocks != 0 || exists) {
    __builtin_trap();
  }
  return 0;
}
