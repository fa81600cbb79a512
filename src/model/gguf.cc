#include "model/gguf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace tf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr size_t kMaxKeyBytes = 1024;    // llama.cpp's keys are a few dozen bytes
constexpr size_t kMaxNameBytes = 1024;   // ggml names are at most 63 bytes
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 4;        // arrays of arrays of ... (llama.cpp writes depth 1)

// Bytes a value of the type takes at the least in the file (what bounds a count before any
// allocation: a count larger than the remaining bytes allow is a lie).
uint64_t min_bytes(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
    case GgufType::kString:  // its length
      return 8;
    case GgufType::kArray:  // item type and count
      return 12;
  }
  return 1;
}

bool valid_type(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufType::kFloat64);
}

class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& path)
      : data_(data), size_(size), path_(path) {}

  size_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string string(const std::string& what, size_t limit = std::numeric_limits<size_t>::max()) {
    const auto n = read<uint64_t>(what);
    if (n > remaining())
      fail("'{}': {} is a string of {} bytes, past the end of the file", path_, what, n);
    if (n > limit) fail("'{}': {} is {} bytes long (at most {})", path_, what, n, limit);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }

  void bytes(uint64_t n, std::vector<uint8_t>& out, const std::string& what) {
    need(n, what);
    out.assign(data_ + pos_, data_ + pos_ + n);
    pos_ += static_cast<size_t>(n);
  }

  void need(uint64_t n, const std::string& what) const {
    if (n > remaining()) fail("'{}': the file ends inside {}", path_, what);
  }

  // A count of items of at least `each` bytes: no more than the rest of the file can hold.
  uint64_t count(uint64_t each, const std::string& what) {
    const auto n = read<uint64_t>(what);
    if (each > 0 && n > remaining() / each)
      fail("'{}': {} is {}, more than the file's remaining {} bytes can hold", path_, what, n,
           remaining());
    return n;
  }

  const std::string& path() const { return path_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

GgufValue read_value(Reader& r, GgufType type, const std::string& key, int depth);

void read_array(Reader& r, GgufValue& v, const std::string& key, int depth) {
  if (depth >= kMaxArrayDepth)
    fail("'{}': metadata '{}' nests arrays more than {} deep", r.path(), key, kMaxArrayDepth);
  const auto item = r.read<uint32_t>("metadata '" + key + "' array type");
  if (!valid_type(item))
    fail("'{}': metadata '{}' is an array of unknown value type {}", r.path(), key, item);
  v.item_type = static_cast<GgufType>(item);
  const std::string what = "metadata '" + key + "' array";
  v.count = r.count(min_bytes(v.item_type), what + " length");
  switch (v.item_type) {
    case GgufType::kString:
      v.strings.reserve(static_cast<size_t>(v.count));
      for (uint64_t k = 0; k < v.count; ++k) v.strings.push_back(r.string(what));
      break;
    case GgufType::kArray:
      v.arrays.reserve(static_cast<size_t>(v.count));
      for (uint64_t k = 0; k < v.count; ++k)
        v.arrays.push_back(read_value(r, GgufType::kArray, key, depth + 1));
      break;
    default:
      r.bytes(v.count * min_bytes(v.item_type), v.raw, what);
      if (v.item_type == GgufType::kBool) {
        for (uint8_t b : v.raw)
          if (b > 1) fail("'{}': metadata '{}' holds a bool that is {}", r.path(), key, b);
      }
  }
}

GgufValue read_value(Reader& r, GgufType type, const std::string& key, int depth) {
  GgufValue v;
  v.type = type;
  const std::string what = "metadata '" + key + "'";
  switch (type) {
    case GgufType::kUint8:
      v.u = r.read<uint8_t>(what);
      break;
    case GgufType::kInt8:
      v.i = r.read<int8_t>(what);
      break;
    case GgufType::kUint16:
      v.u = r.read<uint16_t>(what);
      break;
    case GgufType::kInt16:
      v.i = r.read<int16_t>(what);
      break;
    case GgufType::kUint32:
      v.u = r.read<uint32_t>(what);
      break;
    case GgufType::kInt32:
      v.i = r.read<int32_t>(what);
      break;
    case GgufType::kUint64:
      v.u = r.read<uint64_t>(what);
      break;
    case GgufType::kInt64:
      v.i = r.read<int64_t>(what);
      break;
    case GgufType::kFloat32:
      v.f = r.read<float>(what);
      break;
    case GgufType::kFloat64:
      v.f = r.read<double>(what);
      break;
    case GgufType::kBool: {
      const auto b = r.read<uint8_t>(what);
      if (b > 1) fail("'{}': {} is a bool that is {}", r.path(), what, b);
      v.u = b;
      break;
    }
    case GgufType::kString:
      v.s = r.string(what);
      break;
    case GgufType::kArray:
      read_array(r, v, key, depth);
      break;
  }
  return v;
}

// A scalar element of an array of numbers, from its bytes.
GgufValue scalar_at(GgufType type, const uint8_t* p) {
  GgufValue v;
  v.type = type;
  auto get = [p](auto x) {
    std::memcpy(&x, p, sizeof(x));
    return x;
  };
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kBool:
      v.u = get(uint8_t{});
      break;
    case GgufType::kInt8:
      v.i = get(int8_t{});
      break;
    case GgufType::kUint16:
      v.u = get(uint16_t{});
      break;
    case GgufType::kInt16:
      v.i = get(int16_t{});
      break;
    case GgufType::kUint32:
      v.u = get(uint32_t{});
      break;
    case GgufType::kInt32:
      v.i = get(int32_t{});
      break;
    case GgufType::kUint64:
      v.u = get(uint64_t{});
      break;
    case GgufType::kInt64:
      v.i = get(int64_t{});
      break;
    case GgufType::kFloat32:
      v.f = get(float{});
      break;
    case GgufType::kFloat64:
      v.f = get(double{});
      break;
    default:
      break;
  }
  return v;
}

bool is_signed(GgufType t) {
  return t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 ||
         t == GgufType::kInt64;
}

}  // namespace

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      return GgmlTypeInfo{"F32", 1, 4};
    case GgmlType::kF16:
      return GgmlTypeInfo{"F16", 1, 2};
    case GgmlType::kQ4_0:
      return GgmlTypeInfo{"Q4_0", 32, 18};
    case GgmlType::kQ4_1:
      return GgmlTypeInfo{"Q4_1", 32, 20};
    case GgmlType::kQ5_0:
      return GgmlTypeInfo{"Q5_0", 32, 22};
    case GgmlType::kQ5_1:
      return GgmlTypeInfo{"Q5_1", 32, 24};
    case GgmlType::kQ8_0:
      return GgmlTypeInfo{"Q8_0", 32, 34};
    case GgmlType::kQ8_1:
      return GgmlTypeInfo{"Q8_1", 32, 36};
    case GgmlType::kQ2_K:
      return GgmlTypeInfo{"Q2_K", 256, 84};
    case GgmlType::kQ3_K:
      return GgmlTypeInfo{"Q3_K", 256, 110};
    case GgmlType::kQ4_K:
      return GgmlTypeInfo{"Q4_K", 256, 144};
    case GgmlType::kQ5_K:
      return GgmlTypeInfo{"Q5_K", 256, 176};
    case GgmlType::kQ6_K:
      return GgmlTypeInfo{"Q6_K", 256, 210};
    case GgmlType::kQ8_K:
      return GgmlTypeInfo{"Q8_K", 256, 292};
    case GgmlType::kIQ2_XXS:
      return GgmlTypeInfo{"IQ2_XXS", 256, 66};
    case GgmlType::kIQ2_XS:
      return GgmlTypeInfo{"IQ2_XS", 256, 74};
    case GgmlType::kIQ3_XXS:
      return GgmlTypeInfo{"IQ3_XXS", 256, 98};
    case GgmlType::kIQ1_S:
      return GgmlTypeInfo{"IQ1_S", 256, 50};
    case GgmlType::kIQ4_NL:
      return GgmlTypeInfo{"IQ4_NL", 32, 18};
    case GgmlType::kIQ3_S:
      return GgmlTypeInfo{"IQ3_S", 256, 110};
    case GgmlType::kIQ2_S:
      return GgmlTypeInfo{"IQ2_S", 256, 82};
    case GgmlType::kIQ4_XS:
      return GgmlTypeInfo{"IQ4_XS", 256, 136};
    case GgmlType::kI8:
      return GgmlTypeInfo{"I8", 1, 1};
    case GgmlType::kI16:
      return GgmlTypeInfo{"I16", 1, 2};
    case GgmlType::kI32:
      return GgmlTypeInfo{"I32", 1, 4};
    case GgmlType::kI64:
      return GgmlTypeInfo{"I64", 1, 8};
    case GgmlType::kF64:
      return GgmlTypeInfo{"F64", 1, 8};
    case GgmlType::kIQ1_M:
      return GgmlTypeInfo{"IQ1_M", 256, 56};
    case GgmlType::kBF16:
      return GgmlTypeInfo{"BF16", 1, 2};
    case GgmlType::kTQ1_0:
      return GgmlTypeInfo{"TQ1_0", 256, 54};
    case GgmlType::kTQ2_0:
      return GgmlTypeInfo{"TQ2_0", 256, 66};
    case GgmlType::kMXFP4:
      return GgmlTypeInfo{"MXFP4", 32, 17};
  }
  return std::nullopt;
}

const char* gguf_type_name(GgufType type) {
  static const char* const kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                       "int32",  "float32", "bool",   "string", "array",
                                       "uint64", "int64",   "float64"};
  const auto i = static_cast<uint32_t>(type);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

bool GgufValue::is_integer() const {
  return type != GgufType::kFloat32 && type != GgufType::kFloat64 && type != GgufType::kString &&
         type != GgufType::kArray && type != GgufType::kBool;
}

GgufValue GgufValue::item(uint64_t k) const {
  if (type != GgufType::kArray || k >= count) fail("metadata array index {} out of range", k);
  if (item_type == GgufType::kString) {
    GgufValue v;
    v.type = GgufType::kString;
    v.s = strings[k];
    return v;
  }
  if (item_type == GgufType::kArray) return arrays[k];
  return scalar_at(item_type, raw.data() + k * min_bytes(item_type));
}

std::string GgufValue::to_string(size_t max_items) const {
  switch (type) {
    case GgufType::kString:
      return fmt::format("\"{}\"", s);
    case GgufType::kBool:
      return u ? "true" : "false";
    case GgufType::kFloat32:
      return fmt::format("{}", static_cast<float>(f));  // its own shortest form: 1e-05
    case GgufType::kFloat64:
      return fmt::format("{}", f);
    case GgufType::kArray: {
      std::string out = "[";
      const uint64_t shown = std::min<uint64_t>(count, max_items);
      for (uint64_t k = 0; k < shown; ++k) {
        if (k) out += ", ";
        out += item(k).to_string(max_items);
      }
      if (shown < count)
        out += fmt::format(", ...] ({} items)", count);
      else
        out += "]";
      return out;
    }
    default:
      return is_signed(type) ? fmt::format("{}", i) : fmt::format("{}", u);
  }
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &metadata[it->second].second;
}

const GgufTensorInfo* GgufFile::tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors[it->second];
}

namespace {

const GgufValue& required(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (!v) fail(ErrorKind::kNotFound, "GGUF metadata '{}' is missing", key);
  return *v;
}

uint64_t as_uint(std::string_view key, const GgufValue& v) {
  if (v.is_integer()) {
    if (is_signed(v.type) && v.i < 0) fail("GGUF metadata '{}' is {}, not a count", key, v.i);
    return is_signed(v.type) ? static_cast<uint64_t>(v.i) : v.u;
  }
  fail("GGUF metadata '{}' is a {}, not an integer", key, gguf_type_name(v.type));
}

double as_float(std::string_view key, const GgufValue& v) {
  if (v.is_float()) return v.f;
  if (v.is_integer())
    return is_signed(v.type) ? static_cast<double>(v.i) : static_cast<double>(v.u);
  fail("GGUF metadata '{}' is a {}, not a number", key, gguf_type_name(v.type));
}

}  // namespace

uint64_t GgufFile::get_uint(std::string_view key) const {
  return as_uint(key, required(*this, key));
}

uint64_t GgufFile::get_uint(std::string_view key, uint64_t fallback) const {
  const GgufValue* v = find(key);
  return v ? as_uint(key, *v) : fallback;
}

double GgufFile::get_float(std::string_view key) const {
  return as_float(key, required(*this, key));
}

double GgufFile::get_float(std::string_view key, double fallback) const {
  const GgufValue* v = find(key);
  return v ? as_float(key, *v) : fallback;
}

std::string GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = required(*this, key);
  if (v.type != GgufType::kString)
    fail("GGUF metadata '{}' is a {}, not a string", key, gguf_type_name(v.type));
  return v.s;
}

std::string GgufFile::get_string(std::string_view key, const std::string& fallback) const {
  return find(key) ? get_string(key) : fallback;
}

bool GgufFile::get_bool(std::string_view key, bool fallback) const {
  const GgufValue* v = find(key);
  if (!v) return fallback;
  if (v->type != GgufType::kBool)
    fail("GGUF metadata '{}' is a {}, not a bool", key, gguf_type_name(v->type));
  return v->u != 0;
}

std::vector<std::string> GgufFile::get_strings(std::string_view key) const {
  const GgufValue& v = required(*this, key);
  if (v.type != GgufType::kArray || v.item_type != GgufType::kString)
    fail("GGUF metadata '{}' is not an array of strings", key);
  return v.strings;
}

std::vector<double> GgufFile::get_numbers(std::string_view key) const {
  const GgufValue& v = required(*this, key);
  if (v.type != GgufType::kArray || v.item_type == GgufType::kString ||
      v.item_type == GgufType::kArray)
    fail("GGUF metadata '{}' is not an array of numbers", key);
  std::vector<double> out;
  out.reserve(static_cast<size_t>(v.count));
  for (uint64_t k = 0; k < v.count; ++k) out.push_back(as_float(key, v.item(k)));
  return out;
}

bool is_gguf(const uint8_t* data, size_t size) {
  if (size < 4) return false;
  uint32_t magic;
  std::memcpy(&magic, data, 4);
  return magic == kMagic;
}

GgufFile parse_gguf(const uint8_t* data, size_t size, const std::string& path) {
  Reader r(data, size, path);
  GgufFile f;
  if (!is_gguf(data, size)) fail("'{}' is not a GGUF file (no 'GGUF' magic)", path);
  r.read<uint32_t>("the magic");
  f.version = r.read<uint32_t>("the version");
  if (f.version != 2 && f.version != 3) {
    fail(ErrorKind::kUnsupported, "'{}' is GGUF version {}; versions 2 and 3 are supported", path,
         f.version);
  }
  const auto n_tensors = r.read<uint64_t>("the tensor count");
  // A tensor info takes at least 8 (name length) + 4 (dims) + 8 (one dim) + 4 (type) + 8
  // (offset) bytes; a metadata entry 8 (key length) + 4 (type) + 1.
  const auto n_kv = r.count(13, "the metadata count");
  if (n_tensors > r.remaining() / 32)
    fail("'{}': the tensor count is {}, more than the file can hold", path, n_tensors);

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = r.string(fmt::format("metadata key #{}", k), kMaxKeyBytes);
    if (key.empty()) fail("'{}': metadata key #{} is empty", path, k);
    const auto type = r.read<uint32_t>("metadata '" + key + "' type");
    if (!valid_type(type)) fail("'{}': metadata '{}' has unknown value type {}", path, key, type);
    GgufValue v = read_value(r, static_cast<GgufType>(type), key, 0);
    if (!f.index_.emplace(key, f.metadata.size()).second)
      fail("'{}': metadata '{}' appears twice", path, key);
    f.metadata.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = f.find("general.alignment")) {
    if (a->type != GgufType::kUint32)
      fail("'{}': general.alignment is a {}, not a uint32", path, gguf_type_name(a->type));
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      fail("'{}': general.alignment is {}, not a power of two", path, a->u);
    f.alignment = a->u;
  }

  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    t.name = r.string(fmt::format("the name of tensor #{}", k), kMaxNameBytes);
    const std::string what = "tensor '" + t.name + "'";
    const auto n_dims = r.read<uint32_t>(what + " dimension count");
    if (n_dims < 1 || n_dims > kMaxDims)
      fail("'{}': {} has {} dimensions (1 to {} are taken)", path, what, n_dims, kMaxDims);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto n = r.read<uint64_t>(what + " dimensions");
      // Each dimension, and the product, within what an int64 counts (and a file can hold).
      if (n > (uint64_t{1} << 62) || (n != 0 && numel > (uint64_t{1} << 62) / n))
        fail("'{}': {} has a dimension of {}: too large", path, what, n);
      numel *= n;
      t.ne.push_back(static_cast<int64_t>(n));
    }
    const auto type = r.read<uint32_t>(what + " type");
    const auto info = ggml_type_info(type);
    if (!info) fail(ErrorKind::kUnsupported, "'{}': {} has unknown ggml type {}", path, what, type);
    t.type = static_cast<GgmlType>(type);
    if (t.ne[0] % info->block_size != 0) {
      fail("'{}': {} is {} with rows of {} values, not a multiple of its block of {}", path, what,
           info->name, t.ne[0], info->block_size);
    }
    t.bytes =
        numel / static_cast<uint64_t>(info->block_size) * static_cast<uint64_t>(info->type_size);
    t.offset = r.read<uint64_t>(what + " offset");
    if (t.offset % f.alignment != 0)
      fail("'{}': {} starts at offset {}, not a multiple of the alignment {}", path, what, t.offset,
           f.alignment);
    if (!f.tensor_index_.emplace(t.name, f.tensors.size()).second)
      fail("'{}': {} appears twice", path, what);
    f.tensors.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  f.data_offset = (r.pos() + f.alignment - 1) / f.alignment * f.alignment;
  if (f.data_offset > size && !f.tensors.empty())
    fail("'{}': the file ends before its tensor data", path);
  const uint64_t data_size = f.data_offset <= size ? size - f.data_offset : 0;
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : f.tensors) {
    if (t.offset > data_size || t.bytes > data_size - t.offset) {
      fail(
          "'{}': tensor '{}' ({} bytes at offset {}) lies past the end of the file ({} data "
          "bytes)",
          path, t.name, t.bytes, t.offset, data_size);
    }
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const GgufTensorInfo& a = *by_offset[k - 1];
    const GgufTensorInfo& b = *by_offset[k];
    if (a.offset + a.bytes > b.offset)
      fail("'{}': tensors '{}' and '{}' overlap", path, a.name, b.name);
  }
  return f;
}

}  // namespace tf
