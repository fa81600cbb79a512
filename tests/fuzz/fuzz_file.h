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
