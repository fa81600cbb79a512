// Test tool: writes a LevelDB-format table file with libleveldb's own TableBuilder, as
// TensorFlow's tensor bundle writer lays out a SavedModel's variables.index (no compression).
// Reads "HEXKEY HEXVALUE" lines from stdin (any order; written sorted).
//   write_leveldb_table OUT.index < entries.txt
#include <leveldb/env.h>
#include <leveldb/options.h>
#include <leveldb/table_builder.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>

namespace {

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_leveldb_table OUT < 'HEXKEY HEXVALUE' lines\n");
    return 2;
  }
  std::map<std::string, std::string> entries;
  std::string key, value;
  while (std::cin >> key >> value) entries[unhex(key == "-" ? "" : key)] = unhex(value);
  leveldb::WritableFile* raw = nullptr;
  if (!leveldb::Env::Default()->NewWritableFile(argv[1], &raw).ok()) return 1;
  std::unique_ptr<leveldb::WritableFile> file(raw);
  leveldb::Options options;
  options.compression = leveldb::kNoCompression;
  leveldb::TableBuilder builder(options, file.get());
  for (const auto& [k, v] : entries) builder.Add(k, v);
  if (!builder.Finish().ok() || !file->Close().ok()) return 1;
  return 0;
}
