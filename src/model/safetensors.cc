#include "model/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "model/weight_store.h"

namespace tf {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's own limit

uint64_t checked_numel(const Shape& shape, const std::string& where) {
  uint64_t n = 1;
  for (int i = 0; i < shape.rank; ++i) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(shape[i]), &n)) {
      fail("{}: shape {} overflows", where, shape.to_string());
    }
  }
  return n;
}

}  // namespace

SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& path) {
  if (size < 8) fail("'{}': too short for a safetensors file ({} bytes)", path, size);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  if (header_len > kMaxHeaderBytes) {
    fail("'{}': safetensors header length {} exceeds the limit of {} bytes", path, header_len,
         kMaxHeaderBytes);
  }
  if (header_len > size - 8) {
    fail("'{}': safetensors header length {} is larger than the file ({} bytes)", path, header_len,
         size);
  }
  const char* text = reinterpret_cast<const char*>(data + 8);
  json header = parse_json(std::string_view(text, header_len), path);
  if (header.is_discarded()) fail("'{}': safetensors header is not valid JSON", path);
  if (!header.is_object()) fail("'{}': safetensors header is not a JSON object", path);

  SafetensorsHeader out;
  out.data_start = 8 + header_len;
  const uint64_t data_size = size - out.data_start;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = "'" + path + "': tensor '" + name + "'";
    if (!info.is_object()) fail("{}: entry is not an object", where);
    auto dt = info.find("dtype");
    if (dt == info.end() || !dt->is_string()) fail("{}: missing dtype", where);
    auto dtype = parse_dtype(dt->get<std::string>());
    if (!dtype) fail("{}: unknown dtype '{}'", where, dt->get<std::string>());
    auto sh = info.find("shape");
    if (sh == info.end() || !sh->is_array()) fail("{}: missing shape", where);
    if (sh->size() > static_cast<size_t>(kMaxRank)) {
      fail(ErrorKind::kUnsupported, "{}: rank {} is above {}", where, sh->size(), kMaxRank);
    }
    Shape shape;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) fail("{}: shape entries must be non-negative integers", where);
      shape.dims[shape.rank++] =
          static_cast<int64_t>(std::min<uint64_t>(d.get<uint64_t>(), 1ull << 62));
    }
    auto off = info.find("data_offsets");
    if (off == info.end() || !off->is_array() || off->size() != 2 ||
        !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) {
      fail("{}: data_offsets must be two non-negative integers", where);
    }
    const uint64_t begin = (*off)[0].get<uint64_t>();
    const uint64_t end = (*off)[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      fail("{}: data_offsets [{}, {}] fall outside the {} data bytes of the file", where, begin,
           end, data_size);
    }
    uint64_t expected = 0;
    if (__builtin_mul_overflow(checked_numel(shape, where), dtype_size(*dtype), &expected) ||
        expected != end - begin) {
      fail("{}: {} × {} needs {} bytes but data_offsets span {}", where, dtype_name(*dtype),
           shape.to_string(), expected, end - begin);
    }
    out.tensors.push_back({name, *dtype, shape, begin, end});
  }
  std::vector<const SafetensorsEntry*> sorted;
  for (const auto& t : out.tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->begin < sorted[i - 1]->end) {
      fail("'{}': tensors '{}' and '{}' overlap", path, sorted[i - 1]->name, sorted[i]->name);
    }
  }
  return out;
}

void load_safetensors_file(const std::string& path, WeightStore& store) {
  MappedFile file = MappedFile::open(path);
  SafetensorsHeader header = parse_safetensors(file.data(), file.size(), path);
  const uint8_t* base = file.data() + header.data_start;
  const int index = store.add_file(std::move(file));
  for (const auto& t : header.tensors) {
    store.add(t.name, TensorView{t.dtype, t.shape, base + t.begin}, index);
  }
}

void load_safetensors_dir(const std::string& dir, WeightStore& store) {
  namespace fs = std::filesystem;
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single)) {
    load_safetensors_file(single.string(), store);
    return;
  }
  if (!fs::exists(index)) {
    fail(ErrorKind::kNotFound, "'{}': no model.safetensors or model.safetensors.index.json", dir);
  }
  load_shards(index.string(), store, load_safetensors_file);
}

void load_shards(const std::string& index_path, WeightStore& store,
                 void (*load_file)(const std::string&, WeightStore&)) {
  namespace fs = std::filesystem;
  json j = parse_json(read_file(index_path), index_path);
  if (j.is_discarded() || !j.is_object()) fail("'{}': not a valid JSON object", index_path);
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object() || wm->empty()) {
    fail("'{}': missing or empty weight_map", index_path);
  }
  std::map<std::string, std::string> expected;  // tensor -> shard
  std::set<std::string> shards;
  for (const auto& [name, file] : wm->items()) {
    if (!file.is_string()) fail("'{}': weight_map entry '{}' is not a file name", index_path, name);
    const std::string shard = file.get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
      fail("'{}': shard name '{}' must be a plain file name", index_path, shard);
    }
    expected[name] = shard;
    shards.insert(shard);
  }
  const fs::path dir = fs::path(index_path).parent_path();
  for (const auto& shard : shards) load_file((dir / shard).string(), store);
  for (const auto& [name, shard] : expected) {
    if (!store.has(name)) {
      fail("'{}': tensor '{}' is listed for '{}' but not found there", index_path, name, shard);
    }
  }
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsOutput>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}, {"writer", "tokenflow"}};
  uint64_t offset = 0;
  std::vector<uint64_t> begins;
  for (const auto& t : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(t.shape.numel()) * dtype_size(t.dtype);
    offset = (offset + 7) / 8 * 8;
    begins.push_back(offset);
    nlohmann::ordered_json shape = nlohmann::ordered_json::array();
    for (int i = 0; i < t.shape.rank; ++i) shape.push_back(t.shape[i]);
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the data section starts 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(ErrorKind::kNotFound, "cannot write '{}'", path);
  const uint64_t n = text.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  uint64_t written = 0;
  const char zeros[8] = {};
  for (size_t i = 0; i < tensors.size(); ++i) {
    out.write(zeros, static_cast<std::streamsize>(begins[i] - written));
    const uint64_t bytes =
        static_cast<uint64_t>(tensors[i].shape.numel()) * dtype_size(tensors[i].dtype);
    out.write(static_cast<const char*>(tensors[i].data), static_cast<std::streamsize>(bytes));
    written = begins[i] + bytes;
  }
  out.flush();
  if (!out) fail("writing '{}' failed (disk full?)", path);
}

}  // namespace tf
