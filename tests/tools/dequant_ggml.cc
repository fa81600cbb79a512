// Test tool for tests/reference/test_gguf.py: dequantizes ggml blocks with tokenflow's reader so
// that numpy can compare them with its own dequantization, bit for bit.
//
//   dequant_ggml --type N IN OUT                 raw blocks of ggml type N -> f32 values
//   dequant_ggml --gguf FILE --tensor NAME OUT   one tensor of a GGUF file -> f32 values

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "model/ggml_quants.h"
#include "model/gguf.h"

namespace {

void write(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  if (!out) tf::fail("cannot write '{}'", path);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> a(argv + 1, argv + argc);
    if (a.size() == 4 && a[0] == "--type") {
      const auto type = static_cast<uint32_t>(std::stoul(a[1]));
      const auto info = tf::ggml_type_info(type);
      if (!info) tf::fail("unknown type {}", type);
      std::ifstream in(a[2], std::ios::binary);
      const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
      if (bytes.size() % info->type_size != 0) tf::fail("not whole blocks");
      const int64_t n = static_cast<int64_t>(bytes.size()) / info->type_size * info->block_size;
      std::vector<float> out(static_cast<size_t>(n));
      tf::dequantize_ggml(static_cast<tf::GgmlType>(type), bytes.data(), n, out.data());
      write(a[3], out);
      return 0;
    }
    if (a.size() == 5 && a[0] == "--gguf" && a[2] == "--tensor") {
      const tf::MappedFile m = tf::MappedFile::open(a[1]);
      const tf::GgufFile f = tf::parse_gguf(m.data(), m.size(), a[1]);
      const tf::GgufTensorInfo* t = f.tensor(a[3]);
      if (!t) tf::fail("no tensor '{}'", a[3]);
      std::vector<float> out(static_cast<size_t>(t->numel()));
      tf::dequantize_ggml(t->type, m.data() + f.data_offset + t->offset, t->numel(), out.data());
      write(a[4], out);
      return 0;
    }
    std::fprintf(stderr, "usage: dequant_ggml --type N IN OUT | --gguf FILE --tensor NAME OUT\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
