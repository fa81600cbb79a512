#include "model/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace tf {
namespace {

constexpr uint64_t kAlignment = 32;

class Out {
 public:
  template <class T>
  void put(T v) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &v, sizeof(T));
  }
  void string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> bytes;
};

void put_value(Out& o, const GgufValue& v);

void put_scalar(Out& o, GgufType t, const GgufValue& v) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kBool:
      return o.put<uint8_t>(static_cast<uint8_t>(v.u));
    case GgufType::kInt8:
      return o.put<int8_t>(static_cast<int8_t>(v.i));
    case GgufType::kUint16:
      return o.put<uint16_t>(static_cast<uint16_t>(v.u));
    case GgufType::kInt16:
      return o.put<int16_t>(static_cast<int16_t>(v.i));
    case GgufType::kUint32:
      return o.put<uint32_t>(static_cast<uint32_t>(v.u));
    case GgufType::kInt32:
      return o.put<int32_t>(static_cast<int32_t>(v.i));
    case GgufType::kUint64:
      return o.put<uint64_t>(v.u);
    case GgufType::kInt64:
      return o.put<int64_t>(v.i);
    case GgufType::kFloat32:
      return o.put<float>(static_cast<float>(v.f));
    case GgufType::kFloat64:
      return o.put<double>(v.f);
    case GgufType::kString:
      return o.string(v.s);
    case GgufType::kArray:
      return put_value(o, v);
  }
}

// An array value's body: item type, count, items.
void put_value(Out& o, const GgufValue& v) {
  TF_CHECK(v.type == GgufType::kArray);
  o.put<uint32_t>(static_cast<uint32_t>(v.item_type));
  o.put<uint64_t>(v.count);
  if (v.item_type == GgufType::kString) {
    TF_CHECK(v.strings.size() == v.count);
    for (const std::string& s : v.strings) o.string(s);
  } else if (v.item_type == GgufType::kArray) {
    TF_CHECK(v.arrays.size() == v.count);
    for (const GgufValue& a : v.arrays) put_value(o, a);
  } else {
    o.bytes.insert(o.bytes.end(), v.raw.begin(), v.raw.end());
  }
}

template <class T>
GgufValue number_array(GgufType t, const std::vector<T>& v) {
  GgufValue a;
  a.type = GgufType::kArray;
  a.item_type = t;
  a.count = v.size();
  a.raw.resize(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(a.raw.data(), v.data(), a.raw.size());
  return a;
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  if (key == "general.alignment") return;  // always 32, written first
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) {
  GgufValue x;
  x.type = GgufType::kUint32;
  x.u = v;
  set(key, x);
}
void GgufWriter::set_i32(const std::string& key, int32_t v) {
  GgufValue x;
  x.type = GgufType::kInt32;
  x.i = v;
  set(key, x);
}
void GgufWriter::set_f32(const std::string& key, float v) {
  GgufValue x;
  x.type = GgufType::kFloat32;
  x.f = v;
  set(key, x);
}
void GgufWriter::set_bool(const std::string& key, bool v) {
  GgufValue x;
  x.type = GgufType::kBool;
  x.u = v ? 1 : 0;
  set(key, x);
}
void GgufWriter::set_string(const std::string& key, const std::string& v) {
  GgufValue x;
  x.type = GgufType::kString;
  x.s = v;
  set(key, x);
}
void GgufWriter::set_strings(const std::string& key, std::vector<std::string> v) {
  GgufValue x;
  x.type = GgufType::kArray;
  x.item_type = GgufType::kString;
  x.count = v.size();
  x.strings = std::move(v);
  set(key, std::move(x));
}
void GgufWriter::set_f32s(const std::string& key, const std::vector<float>& v) {
  set(key, number_array(GgufType::kFloat32, v));
}
void GgufWriter::set_i32s(const std::string& key, const std::vector<int32_t>& v) {
  set(key, number_array(GgufType::kInt32, v));
}

bool GgufWriter::has(const std::string& key) const {
  for (const auto& [k, v] : metadata_)
    if (k == key) return true;
  return false;
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> ne, GgmlType type,
                            std::vector<uint8_t> data) {
  const auto info = ggml_type_info(static_cast<uint32_t>(type));
  TF_CHECK(info.has_value() && !ne.empty());
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  if (ne[0] % info->block_size != 0 ||
      static_cast<int64_t>(data.size()) != n / info->block_size * info->type_size) {
    fail("tensor '{}': {} bytes for {} values of {}", name, data.size(), n, info->name);
  }
  for (const Tensor& t : tensors_)
    if (t.name == name) fail("tensor '{}' added twice", name);
  tensors_.push_back({name, std::move(ne), type, std::move(data)});
}

int64_t GgufWriter::tensor_bytes() const {
  int64_t n = 0;
  for (const Tensor& t : tensors_) n += static_cast<int64_t>(t.data.size());
  return n;
}

void GgufWriter::write(const std::string& path) const {
  Out head;
  head.bytes = {'G', 'G', 'U', 'F'};
  head.put<uint32_t>(3);
  head.put<uint64_t>(tensors_.size());
  head.put<uint64_t>(metadata_.size() + 1);
  head.string("general.alignment");
  head.put<uint32_t>(static_cast<uint32_t>(GgufType::kUint32));
  head.put<uint32_t>(kAlignment);
  for (const auto& [key, v] : metadata_) {
    head.string(key);
    head.put<uint32_t>(static_cast<uint32_t>(v.type));
    put_scalar(head, v.type, v);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    head.string(t.name);
    head.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) head.put<uint64_t>(static_cast<uint64_t>(d));
    head.put<uint32_t>(static_cast<uint32_t>(t.type));
    head.put<uint64_t>(offset);
    offset += (t.data.size() + kAlignment - 1) / kAlignment * kAlignment;
  }
  head.bytes.resize((head.bytes.size() + kAlignment - 1) / kAlignment * kAlignment, 0);

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) fail("cannot write '{}'", tmp);
  bool ok = std::fwrite(head.bytes.data(), 1, head.bytes.size(), f) == head.bytes.size();
  static const uint8_t zeros[kAlignment] = {};
  for (const Tensor& t : tensors_) {
    if (!ok) break;
    ok = std::fwrite(t.data.data(), 1, t.data.size(), f) == t.data.size();
    const size_t pad = (kAlignment - t.data.size() % kAlignment) % kAlignment;
    if (ok && pad > 0) ok = std::fwrite(zeros, 1, pad, f) == pad;
  }
  ok = std::fclose(f) == 0 && ok;
  std::error_code ec;
  if (!ok) {
    std::filesystem::remove(tmp, ec);
    fail("writing '{}' failed (disk full?)", path);
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("cannot rename '{}' to '{}': {}", tmp, path, ec.message());
}

}  // namespace tf
