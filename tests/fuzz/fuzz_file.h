#pragma once
// For fuzz targets of readers that take a file: the input's bytes written to one.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

// Writes data to path (replacing it); false if it cannot be written.
inline bool write_fuzz_file(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  // An empty input may come as a null pointer, which fwrite must not be given.
  const bool ok = size == 0 || std::fwrite(data, 1, size, f) == size;
  return std::fclose(f) == 0 && ok;
}

#include <unistd.h>
#include <filesystem>
#include <string_view>
#include <vector>

// For targets that read a folder of files: the input split at lines "--next--" into parts, the
// i-th part written as names[i] in a folder of this process (emptied first); parts past the
// names are ignored, names past the parts are not written. Returns the folder.
inline std::filesystem::path write_fuzz_folder(const std::string& stem, const uint8_t* data,
                                               size_t size, const std::vector<std::string>& names) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / (stem + "_" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSep = "\n--next--\n";
  size_t begin = 0;
  for (const std::string& name : names) {
    if (begin > all.size()) break;
    const size_t end = std::min(all.find(kSep, begin), all.size());
    write_fuzz_file((dir / name).string(), data + begin, end - begin);
    begin = end + kSep.size();
  }
  return dir;
}
