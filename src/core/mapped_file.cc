#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace tf {

namespace {

// Opens path for reading if it is a regular file: a FIFO, a device or a socket in a model
// directory is refused, and opening one never blocks (O_NONBLOCK: a FIFO with no writer would
// hold open() forever). Returns the descriptor and the file's size.
std::pair<int, size_t> open_regular(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    fail(err == ENOENT ? ErrorKind::kNotFound : ErrorKind::kInvalidArgument, "cannot open '{}': {}",
         path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot stat '{}': {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("'{}' is not a regular file ({})", path,
         S_ISFIFO(st.st_mode)   ? "a FIFO"
         : S_ISDIR(st.st_mode)  ? "a directory"
         : S_ISSOCK(st.st_mode) ? "a socket"
                                : "a device");
  }
  return {fd, static_cast<size_t>(st.st_size)};
}

}  // namespace

std::string read_file(const std::string& path) {
  const auto [fd, size] = open_regular(path);
  std::string out;
  out.reserve(size);
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail("cannot read '{}': {}", path, std::strerror(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

MappedFile MappedFile::open(const std::string& path) {
  const auto [fd, size] = open_regular(path);
  MappedFile file;
  file.path_ = path;
  file.size_ = size;
  if (file.size_ > 0) {
    void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail("cannot map '{}': {}", path, std::strerror(err));
    }
    file.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return file;
}

void MappedFile::release_pages(const void* p, size_t n) const {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void MappedFile::release_pages() const {
  if (data_ != nullptr && size_ > 0) {
    ::madvise(const_cast<uint8_t*>(data_), size_, MADV_DONTNEED);
  }
}

MappedFile::~MappedFile() {
  reset();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

void MappedFile::close() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

void MappedFile::reset() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
  path_.clear();
}

}  // namespace tf
