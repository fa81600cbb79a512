#include "core/mapped_file.h"
#include "model/test_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>

#include "core/error.h"

namespace tf {
namespace {

using testing::TempDir;

std::string write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::string contents(const MappedFile& f) {
  return std::string(reinterpret_cast<const char*>(f.data()), f.size());
}

// How many of this process's mappings name `path` (to see that a mapping was released).
int mappings_of(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.size() >= path.size() &&
        line.compare(line.size() - path.size(), path.size(), path) == 0)
      ++n;
  }
  return n;
}

std::string binary_payload(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + 7) & 0xff);
  return s;
}

TEST(MappedFile, MapsAndReadsBytes) {
  TempDir dir;
  const std::string bytes = binary_payload(10000);  // spans several pages, contains NULs
  const std::string path = write_file(dir.file("data.bin"), bytes);
  MappedFile f = MappedFile::open(path);
  ASSERT_NE(f.data(), nullptr);
  EXPECT_EQ(f.size(), bytes.size());
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(contents(f), bytes);
}

TEST(MappedFile, SmallFile) {
  TempDir dir;
  MappedFile f = MappedFile::open(write_file(dir.file("a"), "xyz"));
  EXPECT_EQ(f.size(), 3u);
  EXPECT_EQ(contents(f), "xyz");
}

TEST(MappedFile, EmptyFileHasSizeZero) {
  TempDir dir;
  const std::string path = write_file(dir.file("empty"), "");
  MappedFile f = MappedFile::open(path);
  EXPECT_EQ(f.size(), 0u);
  EXPECT_EQ(f.path(), path);
}

TEST(MappedFile, DefaultConstructedIsEmpty) {
  MappedFile f;
  EXPECT_EQ(f.data(), nullptr);
  EXPECT_EQ(f.size(), 0u);
}

TEST(MappedFile, MissingFileThrowsNotFoundNamingThePath) {
  TempDir dir;
  const std::string path = dir.file("does_not_exist.safetensors");
  try {
    MappedFile::open(path);
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(MappedFile, DirectoryThrows) {
  TempDir dir;
  try {
    MappedFile::open(dir.path());
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(e.kind(), ErrorKind::kInternal);
    EXPECT_NE(std::string(e.what()).find(dir.path()), std::string::npos) << e.what();
  }
}

TEST(MappedFile, MoveConstructionTransfersOwnership) {
  TempDir dir;
  const std::string path = write_file(dir.file("m"), "hello mapped world");
  MappedFile a = MappedFile::open(path);
  const uint8_t* data = a.data();
  EXPECT_EQ(mappings_of(path), 1);
  MappedFile b(std::move(a));
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.size(), 18u);
  EXPECT_EQ(b.path(), path);
  EXPECT_EQ(contents(b), "hello mapped world");
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_EQ(a.size(), 0u);
  {
    MappedFile c(std::move(b));
    EXPECT_EQ(mappings_of(path), 1);
  }
  EXPECT_EQ(mappings_of(path), 0) << "destroying the owner unmaps";
}

TEST(MappedFile, MoveAssignmentTransfersOwnershipAndReleasesTheOld) {
  TempDir dir;
  const std::string path1 = write_file(dir.file("one"), "first file");
  const std::string path2 = write_file(dir.file("two"), "second");
  MappedFile a = MappedFile::open(path1);
  MappedFile b = MappedFile::open(path2);
  EXPECT_EQ(mappings_of(path1), 1);
  EXPECT_EQ(mappings_of(path2), 1);
  const uint8_t* data2 = b.data();
  a = std::move(b);
  EXPECT_EQ(mappings_of(path1), 0) << "the mapping a held before is released";
  EXPECT_EQ(mappings_of(path2), 1);
  EXPECT_EQ(a.data(), data2);
  EXPECT_EQ(a.size(), 6u);
  EXPECT_EQ(a.path(), path2);
  EXPECT_EQ(contents(a), "second");
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.size(), 0u);

  // Self-assignment keeps the mapping.
  MappedFile& alias = a;
  a = std::move(alias);
  EXPECT_EQ(a.data(), data2);
  EXPECT_EQ(contents(a), "second");

  // Assigning an empty file releases the mapping.
  a = MappedFile();
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(mappings_of(path2), 0);
}

TEST(MappedFile, MappingOutlivesTheFile) {
  TempDir dir;
  const std::string path = write_file(dir.file("gone"), "still here");
  MappedFile f = MappedFile::open(path);
  std::filesystem::remove(path);
  EXPECT_EQ(contents(f), "still here");
}

}  // namespace
}  // namespace tf
