#pragma once
// The prefix cache's second tier (--kv-cache-dir): full KV blocks written to a local directory
// as they are computed, and read back, off the engine thread, for a later request with the same
// prefix: after the RAM cache evicted them, after a restart or a reload of the same version, or
// on another replica sharing the directory (vLLM's LMCache / CPU offload, SGLang's HiCache,
// llama.cpp's slot save/restore).
//
// Keys: a SHA-256 chain, root = (format, the model's fingerprint and served name/version, the
// request's prefix-cache salt (its tenant: the salts are keyed by the directory's secret, so
// they mean the same in every process sharing it), its LoRA adapter's identity), then one link
// per block of tokens. A block's file is found only by a request whose whole prefix, tenant and
// adapter equal the writer's.
//
// Files: DIR/xx/<64 hex>.kv (xx: the key's first byte), written to DIR/tmp/ and renamed into
// place (atomic: a reader sees a whole file or none; two writers of one key write the same
// bytes). Each holds its key, its tokens, the K/V of every cache group, and a SHA-256 of all of
// it: a truncated, corrupted or foreign file is a miss (and removed), never a wrong answer.
// A size cap keeps the directory's entries under max_bytes, least recently used (file mtime,
// touched on every hit, so that replicas and restarts share one order) removed first.

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/sha256.h"

namespace tf {

struct KvDiskConfig {
  std::string dir;                 // empty: no disk tier
  int64_t max_bytes = 10ll << 30;  // the directory's entries, at most (--kv-cache-dir-size)
  // The served model and version (and anything else that changes its K/V, such as the weights'
  // type): part of every key, so versions and models never read each other's blocks.
  std::string namespace_id;
  // Bytes of blocks waiting to be written at which more are dropped (not written) instead.
  int64_t max_pending_bytes = 256ll << 20;
};

struct KvDiskStats {
  int64_t lookups = 0;      // requests whose prefix was looked up on disk
  int64_t hit_blocks = 0;   // blocks read (whole and verified)
  int64_t miss_blocks = 0;  // lookups that stopped at a block not on disk (one per lookup)
  int64_t read_bytes = 0, written_bytes = 0, written_blocks = 0;
  int64_t evictions = 0;  // entries removed to keep under the cap
  int64_t corrupt = 0;    // entries that failed their checks (a miss; the file is removed)
  int64_t dropped = 0;    // blocks not written: max_pending_bytes were waiting
  int64_t write_errors = 0;
  int64_t bytes = 0;  // the directory's entries as this process last counted them
};

// "10GiB", "500MB", "1073741824" (not a fraction of memory): the --kv-cache-dir-size parser.
int64_t parse_disk_size(const std::string& text);

class KvDiskCache {
 public:
  using Key = Sha256Digest;

  // Opens dir (creating it, its tmp/ and its secret), counts the entries already there and
  // removes temporary files a killed writer left. fingerprint: the model's shape and cache
  // format (what makes two engines' blocks interchangeable); block_bytes: one block's K/V over
  // every cache group. on_loaded is called (on the I/O thread) when a load finishes. Throws
  // Error when the directory cannot be used.
  KvDiskCache(KvDiskConfig config, std::string fingerprint, int block_size, int64_t block_bytes,
              std::function<void()> on_loaded);
  // Finishes the queued writes (drops the loads) and stops the I/O thread.
  ~KvDiskCache();
  KvDiskCache(const KvDiskCache&) = delete;
  KvDiskCache& operator=(const KvDiskCache&) = delete;

  int block_size() const { return block_size_; }
  int64_t block_bytes() const { return block_bytes_; }
  const std::string& dir() const { return config_.dir; }

  // The first link of a sequence's key chain: its prefix-cache salt and adapter ("" none).
  Key root(uint64_t salt, std::string_view adapter) const;
  // The key of the block of `tokens` (block_size of them) after the block keyed parent.
  static Key next(const Key& parent, const int32_t* tokens, int block_size);
  // The file of a key (for tests).
  std::string path_of(const Key& key) const;

  // Whether the key is on disk as far as this process knows (written, queued or read here).
  bool known(const Key& key) const;
  // A request's lookup (counted): whether the first block it lacks may be on disk (known here,
  // or its file exists: another process may have written it). A stat, no read: a request whose
  // prefix is not there is scheduled at once rather than waiting for the I/O thread to say so.
  bool lookup(const Key& first);
  // Queues a block for writing: its key, its tokens and its K/V (block_bytes). False when
  // max_pending_bytes already wait (dropped, counted).
  bool store(const Key& key, const int32_t* tokens, std::vector<uint8_t> bytes);

  // A buffer of block_bytes for store(): one a finished write gave back, when there is one (a
  // fresh allocation's page faults cost more than the copy into it).
  std::vector<uint8_t> buffer();

  struct LoadJob {
    uint64_t id = 0;
    std::vector<Key> keys;        // consecutive blocks of one prefix
    std::vector<int32_t> tokens;  // their tokens, keys.size() * block_size
    // Where each key's K/V go (straight into the KV cache's blocks): spans whose sizes sum to
    // block_bytes, in the order save_block wrote them. Nobody else may touch them until the job
    // is taken back.
    std::vector<std::vector<std::span<uint8_t>>> into;
  };
  struct Loaded {
    uint64_t id = 0;
    int64_t blocks = 0;  // the leading keys whose blocks were read whole into place
  };
  // Reads the job's blocks in order until the first that is not on disk (or fails its checks),
  // on the I/O thread (loads go before writes); the result waits in take_loaded(). (After a
  // lookup() that said yes.) A block that
  // failed its checks may have been partly written into its spans.
  void load(LoadJob job);
  std::vector<Loaded> take_loaded();
  // Blocks until every queued load and write is done.
  void flush();
  KvDiskStats stats() const;

  // The directory's secret: 32 random bytes in DIR/secret, created by the first process to use
  // the directory (mode 0600). What keys tenants' prefix-cache salts for every process sharing
  // the directory, so that a tenant's blocks on disk are found by the same tenant alone.
  static Sha256Digest directory_secret(const std::string& dir);

 private:
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Write {
    Key key;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> bytes;
  };
  void run();
  void do_write(const Write& w);
  // Reads the block's K/V into `into`; true if the file is whole and holds these tokens.
  bool read_block(const Key& key, const int32_t* tokens,
                  const std::vector<std::span<uint8_t>>& into);
  // Rescans the directory: the index and byte count become what it holds, the least recently
  // used entries are removed until they fit in 90 % of the cap, and (clean_tmp) temporaries a
  // dead writer left are removed.
  void scan(bool clean_tmp);

  KvDiskConfig config_;
  Key base_;  // SHA-256 of the format, fingerprint and namespace
  int block_size_;
  int64_t block_bytes_;
  std::function<void()> on_loaded_;

  mutable std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<LoadJob> loads_;
  std::deque<Write> writes_;
  std::vector<Loaded> loaded_;
  std::vector<std::vector<uint8_t>> spare_;  // buffers written, for buffer()
  int64_t pending_bytes_ = 0;
  bool busy_ = false;
  bool stop_ = false;
  std::unordered_set<Key, KeyHash> index_;  // on disk (as last seen here) or queued
  KvDiskStats stats_;
  uint64_t tmp_counter_ = 0;
  std::thread thread_;
};

}  // namespace tf
