#include "engine/kv_disk_cache.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "engine/memory_budget.h"

namespace tf {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'T', 'F', 'K', 'V', 'B', 'L', 'K', '1'};
// magic, key, block size, reserved, payload bytes; then the tokens, the payload, the digest.
constexpr size_t kHeaderBytes = 8 + 32 + 4 + 4 + 8;
// A temporary older than this belongs to a writer that died (a write takes milliseconds).
constexpr auto kStaleTemporary = std::chrono::minutes(10);

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

// Writes all of [data, data + n) to fd; false on an error.
bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads exactly n bytes; false on an error or an early end.
bool read_all(int fd, void* data, size_t n) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

int64_t parse_disk_size(const std::string& text) {
  // parse_memory_budget reads a bare number up to 1 as a fraction of memory: not a disk size.
  if (text.find_first_not_of("0123456789.") == std::string::npos && std::stod(text) <= 1.0)
    fail("--kv-cache-dir-size must be a size (10GiB, 500MB or bytes), got '{}'", text);
  return parse_memory_budget(text);
}

size_t KvDiskCache::KeyHash::operator()(const Key& k) const {
  size_t h = 0;
  std::memcpy(&h, k.data(), sizeof h);
  return h;
}

Sha256Digest KvDiskCache::directory_secret(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("--kv-cache-dir {}: cannot create it: {}", dir, ec.message());
  const std::string path = (fs::path(dir) / "secret").string();
  Sha256Digest secret{};
  // The first process writes it under a temporary name and links it into place (link fails if
  // another got there first; everyone then reads the winner's).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    secret = random_secret();
    const std::string tmp = fmt::format("{}.{}.tmp", path, ::getpid());
    const int wfd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (wfd < 0 || !write_all(wfd, secret.data(), secret.size())) {
      if (wfd >= 0) ::close(wfd);
      ::unlink(tmp.c_str());
      fail("--kv-cache-dir {}: cannot write its secret: {}", dir, std::strerror(errno));
    }
    ::fsync(wfd);
    ::close(wfd);
    (void)::link(tmp.c_str(), path.c_str());  // EEXIST: another process's secret stands
    ::unlink(tmp.c_str());
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  }
  if (fd < 0) fail("--kv-cache-dir {}: cannot read {}: {}", dir, path, std::strerror(errno));
  const bool ok = read_all(fd, secret.data(), secret.size());
  ::close(fd);
  if (!ok) fail("--kv-cache-dir {}: {} is not a 32-byte secret", dir, path);
  return secret;
}

KvDiskCache::KvDiskCache(KvDiskConfig config, std::string fingerprint, int block_size,
                         int64_t block_bytes, std::function<void()> on_loaded)
    : config_(std::move(config)),
      block_size_(block_size),
      block_bytes_(block_bytes),
      on_loaded_(std::move(on_loaded)) {
  if (config_.max_bytes <= 0) fail("--kv-cache-dir-size must be positive");
  std::error_code ec;
  fs::create_directories(fs::path(config_.dir) / "tmp", ec);
  if (ec) fail("--kv-cache-dir {}: cannot create it: {}", config_.dir, ec.message());
  Sha256 base;
  base.update("tokenflow kv blocks v1\n").update(fingerprint).update("\n");
  base.update(config_.namespace_id).update("\n").update_u64(static_cast<uint64_t>(block_size));
  base.update_u64(static_cast<uint64_t>(block_bytes));
  base_ = base.digest();
  scan(/*clean_tmp=*/true);
  thread_ = std::thread([this] { run(); });
}

KvDiskCache::~KvDiskCache() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    loads_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

KvDiskCache::Key KvDiskCache::root(uint64_t salt, std::string_view adapter) const {
  Sha256 h;
  h.update(base_.data(), base_.size()).update_u64(salt).update_u64(adapter.size()).update(adapter);
  return h.digest();
}

KvDiskCache::Key KvDiskCache::next(const Key& parent, const int32_t* tokens, int block_size) {
  Sha256 h;
  h.update(parent.data(), parent.size());
  for (int i = 0; i < block_size; ++i) {
    uint8_t b[4];
    put_u32(b, static_cast<uint32_t>(tokens[i]));
    h.update(b, sizeof b);
  }
  return h.digest();
}

std::string KvDiskCache::path_of(const Key& key) const {
  const std::string name = hex(key);
  return (fs::path(config_.dir) / name.substr(0, 2) / (name + ".kv")).string();
}

bool KvDiskCache::known(const Key& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.count(key) != 0;
}

bool KvDiskCache::lookup(const Key& first) {
  bool present = known(first);
  struct stat st {};
  if (!present) present = ::stat(path_of(first).c_str(), &st) == 0;
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.lookups;
  stats_.miss_blocks += !present;
  return present;
}

bool KvDiskCache::store(const Key& key, const int32_t* tokens, std::vector<uint8_t> bytes) {
  if (static_cast<int64_t>(bytes.size()) != block_bytes_)
    fail(ErrorKind::kInternal, "a KV block of {} bytes for a disk cache of {}", bytes.size(),
         block_bytes_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_.count(key)) return true;
    if (pending_bytes_ + block_bytes_ > config_.max_pending_bytes) {
      ++stats_.dropped;
      return false;
    }
    pending_bytes_ += block_bytes_;
    index_.insert(key);
    writes_.push_back({key, std::vector<int32_t>(tokens, tokens + block_size_), std::move(bytes)});
  }
  cv_.notify_all();
  return true;
}

void KvDiskCache::load(LoadJob job) {
  if (job.tokens.size() != job.keys.size() * static_cast<size_t>(block_size_) ||
      job.into.size() != job.keys.size())
    fail(ErrorKind::kInternal, "a disk load of {} keys with {} tokens and {} destinations",
         job.keys.size(), job.tokens.size(), job.into.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    loads_.push_back(std::move(job));
  }
  cv_.notify_all();
}

std::vector<uint8_t> KvDiskCache::buffer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!spare_.empty()) {
      std::vector<uint8_t> out = std::move(spare_.back());
      spare_.pop_back();
      return out;
    }
  }
  return std::vector<uint8_t>(static_cast<size_t>(block_bytes_));
}

std::vector<KvDiskCache::Loaded> KvDiskCache::take_loaded() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(loaded_, {});
}

void KvDiskCache::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return loads_.empty() && writes_.empty() && !busy_; });
}

KvDiskStats KvDiskCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void KvDiskCache::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !loads_.empty() || !writes_.empty(); });
    if (!loads_.empty()) {  // a request waits on it: before any write
      LoadJob job = std::move(loads_.front());
      loads_.pop_front();
      busy_ = true;
      lock.unlock();
      Loaded out{job.id, 0};
      while (out.blocks < static_cast<int64_t>(job.keys.size()) &&
             read_block(job.keys[out.blocks],
                        job.tokens.data() + out.blocks * static_cast<int64_t>(block_size_),
                        job.into[out.blocks]))
        ++out.blocks;
      lock.lock();
      stats_.hit_blocks += out.blocks;
      stats_.miss_blocks += out.blocks < static_cast<int64_t>(job.keys.size());
      for (int64_t i = 0; i < out.blocks; ++i) index_.insert(job.keys[i]);
      loaded_.push_back(std::move(out));
      busy_ = false;
      lock.unlock();
      on_loaded_();
      lock.lock();
      done_cv_.notify_all();
      continue;
    }
    if (!writes_.empty()) {
      Write w = std::move(writes_.front());
      writes_.pop_front();
      busy_ = true;
      lock.unlock();
      do_write(w);
      lock.lock();
      pending_bytes_ -= block_bytes_;
      if (static_cast<int64_t>(spare_.size()) * block_bytes_ < config_.max_pending_bytes / 4)
        spare_.push_back(std::move(w.bytes));
      busy_ = false;
      if (stats_.bytes > config_.max_bytes) {
        busy_ = true;
        lock.unlock();
        scan(/*clean_tmp=*/false);  // the cap: oldest entries out
        lock.lock();
        busy_ = false;
      }
      done_cv_.notify_all();
      continue;
    }
    if (stop_) return;
  }
}

void KvDiskCache::do_write(const Write& w) {
  const std::string final_path = path_of(w.key);
  struct stat st {};
  if (::stat(final_path.c_str(), &st) == 0) return;  // another process (or an earlier run) has it
  const std::string tmp =
      (fs::path(config_.dir) / "tmp" / fmt::format("{}.{}.part", ::getpid(), ++tmp_counter_))
          .string();
  std::vector<uint8_t> header(kHeaderBytes);
  std::memcpy(header.data(), kMagic, 8);
  std::memcpy(header.data() + 8, w.key.data(), 32);
  put_u32(header.data() + 40, static_cast<uint32_t>(block_size_));
  put_u32(header.data() + 44, 0);
  put_u64(header.data() + 48, static_cast<uint64_t>(block_bytes_));
  std::vector<uint8_t> tokens(w.tokens.size() * 4);
  for (size_t i = 0; i < w.tokens.size(); ++i)
    put_u32(tokens.data() + 4 * i, static_cast<uint32_t>(w.tokens[i]));
  Sha256 h;
  const Sha256Digest digest = h.update(header.data(), header.size())
                                  .update(tokens.data(), tokens.size())
                                  .update(w.bytes.data(), w.bytes.size())
                                  .digest();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && write_all(fd, header.data(), header.size()) &&
            write_all(fd, tokens.data(), tokens.size()) &&
            write_all(fd, w.bytes.data(), w.bytes.size()) &&
            write_all(fd, digest.data(), digest.size());
  if (fd >= 0) ok = ::close(fd) == 0 && ok;
  if (ok) {
    std::error_code ec;
    fs::create_directories(fs::path(final_path).parent_path(), ec);
    ok = !ec && ::rename(tmp.c_str(), final_path.c_str()) == 0;
  }
  const int64_t bytes = static_cast<int64_t>(header.size() + tokens.size() + w.bytes.size() + 32);
  std::lock_guard<std::mutex> lock(mu_);
  if (!ok) {
    ::unlink(tmp.c_str());
    index_.erase(w.key);
    if (stats_.write_errors++ == 0)
      log::warn("--kv-cache-dir {}: cannot write a block ({}); blocks are not kept on disk",
                config_.dir, std::strerror(errno));
    return;
  }
  stats_.written_bytes += bytes;
  ++stats_.written_blocks;
  stats_.bytes += bytes;
}

bool KvDiskCache::read_block(const Key& key, const int32_t* tokens,
                             const std::vector<std::span<uint8_t>>& into) {
  const std::string path = path_of(key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t token_bytes = static_cast<size_t>(block_size_) * 4;
  const size_t expected = kHeaderBytes + token_bytes + static_cast<size_t>(block_bytes_) + 32;
  size_t into_bytes = 0;
  for (const auto& span : into) into_bytes += span.size();
  std::vector<uint8_t> head(kHeaderBytes + token_bytes);
  Sha256Digest stored{};
  struct stat st {};
  // The K/V go straight to their spans; the digest covers them as they were read.
  Sha256 h;
  bool ok = into_bytes == static_cast<size_t>(block_bytes_) && ::fstat(fd, &st) == 0 &&
            S_ISREG(st.st_mode) && static_cast<size_t>(st.st_size) == expected &&
            read_all(fd, head.data(), head.size());
  ok = ok && std::memcmp(head.data(), kMagic, 8) == 0 &&
       std::memcmp(head.data() + 8, key.data(), 32) == 0 &&
       get_u32(head.data() + 40) == static_cast<uint32_t>(block_size_) &&
       get_u64(head.data() + 48) == static_cast<uint64_t>(block_bytes_);
  for (int i = 0; ok && i < block_size_; ++i)  // else a SHA-256 collision: counted the same
    ok = get_u32(head.data() + kHeaderBytes + 4 * i) == static_cast<uint32_t>(tokens[i]);
  if (ok) h.update(head.data(), head.size());
  for (size_t i = 0; ok && i < into.size(); ++i) {
    ok = read_all(fd, into[i].data(), into[i].size());
    if (ok) h.update(into[i].data(), into[i].size());
  }
  ok = ok && read_all(fd, stored.data(), stored.size()) && h.digest() == stored;
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.corrupt;
    index_.erase(key);
    if (st.st_size > 0 && st.st_size <= stats_.bytes) stats_.bytes -= st.st_size;
    return false;
  }
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // recently used, for every process's LRU
  std::lock_guard<std::mutex> lock(mu_);
  stats_.read_bytes += static_cast<int64_t>(expected);
  return true;
}

void KvDiskCache::scan(bool clean_tmp) {
  struct Entry {
    std::string path;
    int64_t size;
    fs::file_time_type mtime;
    Key key;
  };
  std::vector<Entry> entries;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator sub(config_.dir, ec), end; !ec && sub != end; sub.increment(ec)) {
    const std::string name = sub->path().filename().string();
    if (name == "tmp" && clean_tmp) {
      std::error_code tec;
      for (fs::directory_iterator t(sub->path(), tec), tend; !tec && t != tend; t.increment(tec)) {
        std::error_code mec;
        const auto mtime = fs::last_write_time(t->path(), mec);
        if (!mec && now - mtime > kStaleTemporary) fs::remove(t->path(), mec);
      }
      continue;
    }
    if (name.size() != 2 || !sub->is_directory(ec)) continue;
    std::error_code fec;
    for (fs::directory_iterator f(sub->path(), fec), fend; !fec && f != fend; f.increment(fec)) {
      const std::string file = f->path().filename().string();
      if (file.size() != 67 || !file.ends_with(".kv")) continue;
      const std::optional<Key> key = parse_hex_digest(std::string_view(file).substr(0, 64));
      if (!key) continue;
      std::error_code sec;
      const auto size = f->file_size(sec);
      const auto mtime = f->last_write_time(sec);
      if (sec) continue;  // removed meanwhile
      entries.push_back({f->path().string(), static_cast<int64_t>(size), mtime, *key});
    }
  }
  int64_t total = 0;
  for (const auto& e : entries) total += e.size;
  int64_t removed = 0;
  if (total > config_.max_bytes) {
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return a.mtime < b.mtime; });
    const int64_t target = config_.max_bytes / 10 * 9;
    size_t i = 0;
    for (; i < entries.size() && total > target; ++i) {
      std::error_code rec;
      fs::remove(entries[i].path, rec);
      total -= entries[i].size;
      ++removed;
    }
    entries.erase(entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(i));
  }
  std::lock_guard<std::mutex> lock(mu_);
  // Keys still queued for writing stay known; the rest is what the directory holds now.
  std::unordered_set<Key, KeyHash> index;
  for (const auto& w : writes_) index.insert(w.key);
  for (const auto& e : entries) index.insert(e.key);
  index_ = std::move(index);
  stats_.bytes = total;
  stats_.evictions += removed;
}

}  // namespace tf
