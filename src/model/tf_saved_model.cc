// TensorFlow SavedModel variables: the tensor bundle's index (a LevelDB-format table) through
// Debian's libleveldb, the entries and object graph through TensorFlow's protos, the data
// shards mapped (tf_weights.h).
#include <leveldb/env.h>
#include <leveldb/iterator.h>
#include <leveldb/options.h>
#include <leveldb/table.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "core/error.h"
#include "core/mapped_file.h"
#include "model/tf_weights.h"
#include "tensorflow/core/protobuf/meta_graph.pb.h"
#include "tensorflow/core/protobuf/tensor_bundle.pb.h"

namespace tf {
namespace {

namespace fs = std::filesystem;

constexpr const char* kObjectGraphKey = "_CHECKPOINTABLE_OBJECT_GRAPH";

// LevelDB's varint64 at p (advancing it), false past end.
bool varint64(const uint8_t*& p, const uint8_t* end, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift <= 63 && p < end; shift += 7) {
    const uint8_t b = *p++;
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// Checks what libleveldb trusts before it allocates: every block handle it will follow (the
// footer's index handle, the index block's data block handles) lies inside the file, and every
// block is stored uncompressed (as TensorFlow writes bundle indexes). libleveldb allocates a
// block's claimed size before reading it, so a malformed file could otherwise ask for any amount
// of memory.
void check_table_handles(const std::string& path) {
  const std::string bytes = read_file(path);
  const auto* base = reinterpret_cast<const uint8_t*>(bytes.data());
  const uint64_t size = bytes.size();
  constexpr uint64_t kFooter = 48, kTrailer = 5;
  constexpr uint64_t kMagic = 0xdb4775248b80fb57ull;
  auto bad = [&](const char* what) {
    fail("'{}' is not a tensor bundle index (a LevelDB-format table): {}", path, what);
  };
  if (size < kFooter) bad("shorter than a table footer");
  uint64_t magic = 0;
  std::memcpy(&magic, base + size - 8, 8);
  if (magic != kMagic) bad("no table magic number");
  auto block = [&](uint64_t offset, uint64_t n) {
    if (offset > size || n > size || offset + n + kTrailer > size)
      bad("a block handle points outside the file");
    if (base[offset + n] != 0) bad("a compressed block (bundle indexes are not compressed)");
  };
  const uint8_t* p = base + size - kFooter;
  const uint8_t* end = base + size - 8;
  uint64_t meta_off, meta_n, index_off, index_n;
  if (!varint64(p, end, meta_off) || !varint64(p, end, meta_n) || !varint64(p, end, index_off) ||
      !varint64(p, end, index_n))
    bad("a malformed footer");
  block(index_off, index_n);
  // The index block: entries (shared, non-shared and value lengths, key bytes, a block handle),
  // then the restart offsets and their count.
  const uint8_t* b = base + index_off;
  if (index_n < 4) bad("an index block too short");
  uint32_t restarts = 0;
  std::memcpy(&restarts, b + index_n - 4, 4);
  if (restarts > (index_n - 4) / 4) bad("an index block with too many restarts");
  const uint8_t* q = b;
  const uint8_t* entries_end = b + index_n - 4 - 4 * static_cast<uint64_t>(restarts);
  while (q < entries_end) {
    uint64_t shared, unshared, value_n;
    if (!varint64(q, entries_end, shared) || !varint64(q, entries_end, unshared) ||
        !varint64(q, entries_end, value_n) || unshared > static_cast<uint64_t>(entries_end - q) ||
        value_n > static_cast<uint64_t>(entries_end - q) - unshared)
      bad("a malformed index block entry");
    q += unshared;
    const uint8_t* v = q;
    const uint8_t* v_end = q + value_n;
    uint64_t off, n;
    if (!varint64(v, v_end, off) || !varint64(v, v_end, n)) bad("a malformed block handle");
    block(off, n);
    q = v_end;
  }
}

// Every key and value of a LevelDB-format table file, in order.
std::vector<std::pair<std::string, std::string>> read_table(const std::string& path) {
  check_table_handles(path);
  leveldb::Env* env = leveldb::Env::Default();
  uint64_t size = 0;
  if (!env->GetFileSize(path, &size).ok()) fail(ErrorKind::kNotFound, "'{}' cannot be read", path);
  leveldb::RandomAccessFile* raw = nullptr;
  if (!env->NewRandomAccessFile(path, &raw).ok())
    fail(ErrorKind::kNotFound, "'{}' cannot be opened", path);
  const std::unique_ptr<leveldb::RandomAccessFile> file(raw);
  leveldb::Options options;
  options.paranoid_checks = true;
  leveldb::Table* table_raw = nullptr;
  const leveldb::Status opened = leveldb::Table::Open(options, file.get(), size, &table_raw);
  if (!opened.ok())
    fail("'{}' is not a tensor bundle index (a LevelDB-format table): {}", path, opened.ToString());
  const std::unique_ptr<leveldb::Table> table(table_raw);
  leveldb::ReadOptions read;
  read.verify_checksums = true;
  read.fill_cache = false;
  const std::unique_ptr<leveldb::Iterator> it(table->NewIterator(read));
  std::vector<std::pair<std::string, std::string>> out;
  for (it->SeekToFirst(); it->Valid(); it->Next())
    out.emplace_back(it->key().ToString(), it->value().ToString());
  if (!it->status().ok()) fail("'{}': {}", path, it->status().ToString());
  return out;
}

size_t dtype_bytes(tensorflow::DataType t) {
  switch (t) {
    case tensorflow::DT_FLOAT:
      return 4;
    case tensorflow::DT_HALF:
    case tensorflow::DT_BFLOAT16:
      return 2;
    default:
      return 0;
  }
}

DType our_dtype(tensorflow::DataType t) {
  return t == tensorflow::DT_FLOAT  ? DType::kF32
         : t == tensorflow::DT_HALF ? DType::kF16
                                    : DType::kBF16;
}

// A DT_STRING scalar's bytes as the bundle stores them: [varint64 length][4-byte checksum of the
// lengths][the string].
std::string string_scalar(const uint8_t* p, size_t n, const std::string& where) {
  uint64_t len = 0;
  size_t i = 0;
  for (int shift = 0;; shift += 7) {
    if (i >= n || shift > 63) fail("{}: a malformed string length", where);
    const uint8_t b = p[i++];
    len |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
  }
  if (n - i < 4 || len > n - i - 4) fail("{}: a string longer than its entry", where);
  return std::string(reinterpret_cast<const char*>(p + i + 4), len);
}

}  // namespace

bool is_saved_model_dir(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / "saved_model.pb", ec) &&
         fs::exists(fs::path(dir) / "variables" / "variables.index", ec);
}

std::vector<SavedModelSignature> read_saved_model_signatures(const std::string& dir) {
  const std::string path = (fs::path(dir) / "saved_model.pb").string();
  tensorflow::SavedModel saved;
  if (!saved.ParseFromString(read_file(path))) fail("'{}' is not a SavedModel", path);
  for (const auto& meta : saved.meta_graphs()) {
    const auto& tags = meta.meta_info_def().tags();
    if (std::find(tags.begin(), tags.end(), "serve") == tags.end()) continue;
    std::vector<SavedModelSignature> out;
    for (const auto& [name, sig] : meta.signature_def()) {
      SavedModelSignature s{name, {}, {}};
      for (const auto& [k, v] : sig.inputs()) s.inputs.push_back(k);
      for (const auto& [k, v] : sig.outputs()) s.outputs.push_back(k);
      out.push_back(std::move(s));
    }
    return out;
  }
  fail("'{}' has no meta graph tagged 'serve' (tf.saved_model.save's)", path);
}

void load_saved_model_variables(const std::string& dir, WeightStore& store) {
  const fs::path vars = fs::path(dir) / "variables";
  const std::string index = (vars / "variables.index").string();
  const auto entries = read_table(index);
  if (entries.empty() || !entries[0].first.empty())
    fail("'{}': no bundle header (the \"\" key)", index);
  tensorflow::BundleHeaderProto header;
  if (!header.ParseFromString(entries[0].second)) fail("'{}': a malformed bundle header", index);
  if (header.endianness() != tensorflow::BundleHeaderProto::LITTLE)
    fail("'{}': a big-endian bundle is not supported", index);
  if (header.num_shards() < 1 || header.num_shards() > 100000)
    fail("'{}': {} data shards", index, header.num_shards());

  std::map<std::string, tensorflow::BundleEntryProto> bundle;
  for (size_t i = 1; i < entries.size(); ++i) {
    tensorflow::BundleEntryProto e;
    if (!e.ParseFromString(entries[i].second))
      fail("'{}': entry '{}' is malformed", index, entries[i].first);
    bundle.emplace(entries[i].first, std::move(e));
  }
  // The data shards, mapped when first needed.
  std::map<int, int> shard_files;  // shard id -> the store's file index
  auto shard = [&](int id, const std::string& key) -> const MappedFile& {
    if (id < 0 || id >= header.num_shards())
      fail("'{}': entry '{}' names data shard {} of {}", index, key, id, header.num_shards());
    auto it = shard_files.find(id);
    if (it == shard_files.end()) {
      char name[64];
      std::snprintf(name, sizeof name, "variables.data-%05d-of-%05d", id, header.num_shards());
      it = shard_files.emplace(id, store.add_file(MappedFile::open((vars / name).string()))).first;
    }
    return store.file(it->second);
  };
  auto bytes_of = [&](const std::string& key, const tensorflow::BundleEntryProto& e) {
    const MappedFile& f = shard(e.shard_id(), key);
    if (e.offset() < 0 || e.size() < 0 || static_cast<uint64_t>(e.offset()) > f.size() ||
        static_cast<uint64_t>(e.size()) > f.size() - static_cast<uint64_t>(e.offset()))
      fail("'{}': entry '{}' lies outside its data shard '{}'", index, key, f.path());
    return f.data() + e.offset();
  };

  // Checkpoint keys -> variable names, from the object graph (TF2); a TF1 checkpoint's keys are
  // the names.
  std::map<std::string, std::string> names;
  if (auto og = bundle.find(kObjectGraphKey); og != bundle.end()) {
    if (og->second.dtype() != tensorflow::DT_STRING)
      fail("'{}': {} is not a string", index, kObjectGraphKey);
    tensorflow::TrackableObjectGraph graph;
    const std::string text =
        string_scalar(bytes_of(og->first, og->second), static_cast<size_t>(og->second.size()),
                      index + ": " + kObjectGraphKey);
    if (!graph.ParseFromString(text)) fail("'{}': a malformed object graph", index);
    for (const auto& node : graph.nodes())
      for (const auto& a : node.attributes())
        if (a.name() == "VARIABLE_VALUE") names[a.checkpoint_key()] = a.full_name();
  } else {
    for (const auto& [key, e] : bundle) names[key] = key;
  }

  size_t taken = 0;
  for (const auto& [key, full_name] : names) {
    auto it = bundle.find(key);
    if (it == bundle.end()) fail("'{}': variable '{}' ({}) has no entry", index, full_name, key);
    const tensorflow::BundleEntryProto& e = it->second;
    const size_t elem = dtype_bytes(e.dtype());
    if (elem == 0) continue;  // not a float variable (a counter, a step)
    if (e.slices_size() > 0)
      fail("'{}': variable '{}' is partitioned (slices): not supported", index, full_name);
    Shape shape;
    if (e.shape().dim_size() < 1 || e.shape().dim_size() > 4)
      fail("'{}': variable '{}' has rank {} (1 to 4 are taken)", index, full_name,
           e.shape().dim_size());
    shape.rank = e.shape().dim_size();
    int64_t numel = 1;
    for (int d = 0; d < shape.rank; ++d) {
      const int64_t n = e.shape().dim(d).size();
      if (n < 1 || n > (int64_t{1} << 32))
        fail("'{}': variable '{}' has a bad dimension {}", index, full_name, n);
      shape.dims[d] = n;
      numel *= n;
      if (numel > (int64_t{1} << 36)) fail("'{}': variable '{}' is too large", index, full_name);
    }
    if (e.size() != numel * static_cast<int64_t>(elem))
      fail("'{}': variable '{}' holds {} bytes for {} values", index, full_name, e.size(), numel);
    const uint8_t* data = bytes_of(key, e);
    const int file_index = shard_files.at(e.shard_id());
    const PtTensor pt = pt_tensor(full_name, shape, "'" + index + "'");
    const DType dtype = our_dtype(e.dtype());
    if (pt.transpose) {
      std::vector<float> values(static_cast<size_t>(numel));
      for (int64_t i = 0; i < numel; ++i) {  // unaligned reads of the stored type
        if (dtype == DType::kF32) {
          std::memcpy(&values[static_cast<size_t>(i)], data + i * 4, 4);
          continue;
        }
        uint16_t h;
        std::memcpy(&h, data + i * 2, 2);
        values[static_cast<size_t>(i)] = dtype == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      store.add_f32(pt.name, pt.shape, transposed(values, shape.dims[0], shape.dims[1]),
                    file_index);
    } else {
      store.add(pt.name, TensorView{dtype, pt.shape, data}, file_index);
    }
    ++taken;
  }
  if (taken == 0) fail("'{}' holds no float variables", index);
}

}  // namespace tf
