#pragma once
// A read-only memory-mapped file. Weights are mapped while a model loads (pages load on first
// touch); the WeightStore copies what the model uses and closes the mapping, because a file
// truncated or rewritten in place would SIGBUS any process still touching its pages (even
// private copy-on-write ones: truncation unmaps those too).

#include <cstddef>
#include <cstdint>
#include <string>

namespace tf {

// The whole file as bytes, for small files (configs, tokenizers); throws Error (kNotFound for a
// missing file) naming the path. Weights are mapped instead.
std::string read_file(const std::string& path);

class MappedFile {
 public:
  MappedFile() = default;
  // Throws Error (kNotFound for a missing file) naming the path.
  static MappedFile open(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the pages read so far from this process's resident set (they come back from the file
  // on the next touch): after weights were copied into another format.
  void release_pages() const;
  // The same for the whole pages inside [p, p + n) (p within this mapping).
  void release_pages(const void* p, size_t n) const;
  // Unmaps the file (data() becomes nullptr; the path stays for messages).
  void close();

 private:
  void reset();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace tf
