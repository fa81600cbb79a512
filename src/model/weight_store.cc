#include "model/weight_store.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <string_view>

#include <sys/mman.h>

#include <cstdint>

#include "core/error.h"
#include "kernels/ggml_quants.h"
#include "kernels/isa.h"

namespace tf {

int WeightStore::add_file(MappedFile file) {
  files_.push_back(std::move(file));
  return static_cast<int>(files_.size()) - 1;
}

void WeightStore::add_f32(const std::string& name, const Shape& shape, std::vector<float> values,
                          int file_index) {
  if (static_cast<int64_t>(values.size()) != shape.numel())
    fail("tensor '{}': {} values for shape {}", name, values.size(), shape.to_string());
  converted_bytes_ += values.size() * sizeof(float);
  owned_.push_back(std::move(values));
  add(name, TensorView{DType::kF32, shape, owned_.back().data()}, file_index);
  tensors_.find(name)->second.owned = true;
}

std::string WeightStore::stored_type() const {
  std::map<std::string, int64_t> params;
  for (const auto& [name, e] : tensors_) {
    const bool blocks = e.blocks != kernels::WeightType::kF32;
    std::string type(blocks ? kernels::weight_type_name(e.blocks) : dtype_name(e.view.dtype));
    for (char& c : type) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    params[type] += blocks ? e.shape.numel() : e.view.shape.numel();
  }
  std::string best;
  int64_t most = -1;
  for (const auto& [type, n] : params)
    if (n > most) best = type, most = n;
  return best;
}

void WeightStore::add_blocks(const std::string& name, const Shape& shape, kernels::WeightType type,
                             const void* bytes, int file_index) {
  TF_CHECK(kernels::is_block_type(type) && shape.rank >= 1);
  const int64_t cols = shape.dims[shape.rank - 1];
  const int64_t rows = shape.numel() / std::max<int64_t>(cols, 1);
  if (cols % kernels::block_size(type) != 0)
    fail("tensor '{}': rows of {} values are not whole {} blocks of {}", name, cols,
         kernels::weight_type_name(type), kernels::block_size(type));
  add(name, TensorView{DType::kU8, {rows, kernels::WeightMatrix::row_bytes(type, cols)}, bytes},
      file_index);
  Entry& e = tensors_.find(name)->second;
  e.blocks = type;
  e.shape = shape;
}

uint8_t* WeightStore::add_owned_blocks(const std::string& name, const Shape& shape,
                                       kernels::WeightType type, int file_index) {
  TF_CHECK(shape.rank >= 1);
  const int64_t cols = shape.dims[shape.rank - 1];
  const int64_t rows = shape.numel() / std::max<int64_t>(cols, 1);
  uint8_t* bytes =
      alloc_bytes(static_cast<size_t>(rows * kernels::WeightMatrix::row_bytes(type, cols)), 64);
  add_blocks(name, shape, type, bytes, file_index);
  tensors_.find(name)->second.owned = true;  // matrix() reads it where it is
  return bytes;
}

void WeightStore::add(const std::string& name, const TensorView& view, int file_index) {
  auto [it, inserted] = tensors_.emplace(
      name, Entry{view, file_index, nullptr, false, kernels::WeightType::kF32, view.shape});
  if (!inserted) {
    fail("tensor '{}' appears twice (in '{}' and '{}')", name,
         files_.at(it->second.file_index).path(), files_.at(file_index).path());
  }
}

const WeightStore::Entry& WeightStore::entry(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    fail(ErrorKind::kNotFound, "missing tensor '{}' in {}", name, sources());
  return it->second;
}

const TensorView& WeightStore::get(const std::string& name) const {
  return entry(name).view;
}

const void* WeightStore::own_copy(const Entry& e, size_t align) {
  // The model keeps no pointer into a mapped file: a weight file truncated or rewritten while
  // it is served would SIGBUS the process on the next touch (a private mapping does not help:
  // truncation unmaps even its copied pages). Copied once at load; the file's pages go at once.
  if (e.owned && reinterpret_cast<uintptr_t>(e.view.data) % align == 0) return e.view.data;
  const size_t n = e.view.nbytes();
  uint8_t* out = alloc_bytes(n, align);
  std::memcpy(out, e.view.data, n);
  if (!e.owned) files_.at(e.file_index).release_pages(e.view.data, n);
  return out;
}

uint8_t* WeightStore::alloc_bytes(size_t n, size_t align) {
  // Large buffers in 2 MiB pages where the kernel gives them (fewer page faults, fewer TLB misses
  // in the matmuls); the callers write every byte, so nothing is zero-filled first.
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t a = n >= 2 * kHuge ? kHuge : std::max<size_t>(align, alignof(std::max_align_t));
  const size_t bytes = (n + a - 1) / a * a;
  uint8_t* out = static_cast<uint8_t*>(std::aligned_alloc(a, std::max(bytes, a)));
  if (out == nullptr) fail("out of memory copying a tensor ({} bytes)", n);
  copies_.emplace_back(out);
  if (a == kHuge) ::madvise(out, bytes, MADV_HUGEPAGE);
  return out;
}

void WeightStore::check_shape(const std::string& name, const Entry& e, const Shape& shape) const {
  const Shape& have = e.blocks == kernels::WeightType::kF32 ? e.view.shape : e.shape;
  if (!(have == shape)) {
    fail("tensor '{}' in '{}' has shape {}, expected {}", name, files_.at(e.file_index).path(),
         have.to_string(), shape.to_string());
  }
}

float* WeightStore::alloc(size_t n) {
  owned_.emplace_back(n);
  converted_bytes_ += n * sizeof(float);
  return owned_.back().data();
}

const float* WeightStore::f32(const std::string& name, const Shape& shape) {
  entry(name);  // throws a clear error when missing
  Entry& e = tensors_.find(name)->second;
  check_shape(name, e, shape);
  if (e.converted != nullptr) return e.converted;
  if (e.blocks != kernels::WeightType::kF32) {
    float* out = alloc(static_cast<size_t>(shape.numel()));
    kernels::dequantize_blocks(e.blocks, e.view.data, shape.numel(), out);
    e.converted = out;
    return out;
  }
  const bool aligned = reinterpret_cast<uintptr_t>(e.view.data) % alignof(float) == 0;
  if (e.view.dtype == DType::kF32 && aligned) {
    e.converted = static_cast<const float*>(own_copy(e, 64));
    return e.converted;
  }
  if (e.view.dtype != DType::kF32 && e.view.dtype != DType::kF16 && e.view.dtype != DType::kBF16) {
    fail(ErrorKind::kUnsupported, "tensor '{}' in '{}' has dtype {}; F32, F16 or BF16 expected",
         name, files_.at(e.file_index).path(), dtype_name(e.view.dtype));
  }
  float* out = alloc(static_cast<size_t>(e.view.numel()));
  convert_to_f32(e.view.dtype, e.view.data, static_cast<size_t>(e.view.numel()), out);
  e.converted = out;
  return out;
}

const float* WeightStore::f32_transposed(const std::string& name, const Shape& stored_shape) {
  // Read from the mapping where the stored layout is plain f32 (no copy of it is kept).
  const Entry& e = entry(name);
  check_shape(name, e, stored_shape);
  const bool mapped_f32 = e.converted == nullptr && e.view.dtype == DType::kF32 &&
                          reinterpret_cast<uintptr_t>(e.view.data) % alignof(float) == 0;
  const float* src = mapped_f32 ? static_cast<const float*>(e.view.data) : f32(name, stored_shape);
  const int64_t rows = stored_shape[0];
  const int64_t cols = stored_shape[1];
  float* out = alloc(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = src[r * cols + c];
  }
  if (mapped_f32 && !e.owned) files_.at(e.file_index).release_pages(e.view.data, e.view.nbytes());
  return out;
}

const WeightStore::Entry& WeightStore::checked(const std::string& name, DType dtype,
                                               const Shape& shape) const {
  const Entry& e = entry(name);
  if (e.view.dtype != dtype) {
    fail("tensor '{}' in '{}' has dtype {}, expected {}", name, files_.at(e.file_index).path(),
         dtype_name(e.view.dtype), dtype_name(dtype));
  }
  check_shape(name, e, shape);
  return e;
}

const void* WeightStore::aligned_bytes(const std::string& name, DType dtype, const Shape& shape,
                                       size_t align) {
  return own_copy(checked(name, dtype, shape), std::max<size_t>(align, 1));
}

void WeightStore::release_source(const Entry& e) {
  if (!e.owned) files_.at(e.file_index).release_pages(e.view.data, e.view.nbytes());
}

namespace {

// Whether matrix() lays f32, f16 or bf16 weights out in float panels: where every part of the
// matrix (all of it, or each row_unit rows of a fused or stacked one) is whole panels, so that a
// matrix takes the same kernel, and its rows the same bits, whether a file stores it on its own,
// fused or stacked.
bool float_panels(kernels::WeightType t, int64_t n, int64_t row_unit) {
  return kernels::use_float_panels(t) && n % kernels::kPanelRows == 0 &&
         (row_unit == 0 || row_unit % kernels::kPanelRows == 0);
}

// Whether matrix() lays weights with a panel type (kernels::has_panel_type) out in panels (see
// the header).
bool use_panels(int64_t n, int64_t k, int64_t row_unit) {
  return kernels::use_weight_panels() && k % kernels::kQ4Group == 0 &&
         (row_unit == 0 || row_unit == n || row_unit % kernels::kPanelRows == 0);
}

}  // namespace

kernels::WeightMatrix WeightStore::to_panels(kernels::WeightType t, const void* data,
                                             const void* scales, int64_t n, int64_t k) {
  const kernels::WeightType p = kernels::panel_type(t);
  uint8_t* pd = alloc_bytes(static_cast<size_t>(kernels::WeightMatrix::row_bytes(p, k) * n), 64);
  uint8_t* ps = alloc_bytes(static_cast<size_t>(kernels::panel_scale_bytes(p, n, k)), 64);
  return kernels::pack_panels(t, data, scales, n, k, pd, ps);
}

kernels::WeightMatrix WeightStore::f32_panels(const std::string& name, int64_t n, int64_t k,
                                              bool transposed) {
  Entry& e = tensors_.find(name)->second;
  check_shape(name, e, transposed ? Shape{k, n} : Shape{n, k});
  // The rows straight from the mapped file where it holds aligned f32 (no row-major copy is
  // kept), else from the f32 form f32() made or a temporary one.
  const bool mapped = e.converted == nullptr && e.blocks == kernels::WeightType::kF32 &&
                      e.view.dtype == DType::kF32 &&
                      reinterpret_cast<uintptr_t>(e.view.data) % alignof(float) == 0;
  std::vector<float> tmp;
  const float* src = e.converted;
  if (mapped) {
    src = static_cast<const float*>(e.view.data);
  } else if (src == nullptr) {
    if (e.blocks == kernels::WeightType::kF32 && e.view.dtype != DType::kF32 &&
        e.view.dtype != DType::kF16 && e.view.dtype != DType::kBF16) {
      fail(ErrorKind::kUnsupported, "tensor '{}' in '{}' has dtype {}; F32, F16 or BF16 expected",
           name, files_.at(e.file_index).path(), dtype_name(e.view.dtype));
    }
    tmp.resize(static_cast<size_t>(n * k));
    if (e.blocks != kernels::WeightType::kF32)
      kernels::dequantize_blocks(e.blocks, e.view.data, n * k, tmp.data());
    else
      convert_to_f32(e.view.dtype, e.view.data, tmp.size(), tmp.data());
    src = tmp.data();
  }
  auto* data = reinterpret_cast<float*>(alloc_bytes(static_cast<size_t>(n * k) * 4, 64));
  const kernels::WeightMatrix m = kernels::pack_f32_panels(src, n, k, data, transposed);
  if (mapped) release_source(e);
  packed_[name] = m;
  return m;
}

kernels::WeightMatrix WeightStore::prepacked(const std::string& name, int64_t n, int64_t k,
                                             bool panels) {
  using kernels::WeightType;
  kernels::WeightMatrix m;
  m.n = n;
  m.k = k;
  const bool i8 = has(name + ".tf_scale");
  if (!i8 && k % kernels::kQ4Group != 0)
    fail("tensor '{}' is stored as q4 but its rows of {} are not a multiple of {}", name, k,
         kernels::kQ4Group);
  const std::string scale_name = name + (i8 ? ".tf_scale" : ".tf_scales");
  const DType data_type = i8 ? DType::kI8 : DType::kU8, scale_type = i8 ? DType::kF32 : DType::kF16;
  const Shape data_shape = i8 ? Shape{n, k} : Shape{n, k / 2};
  const Shape scale_shape = i8 ? Shape{n} : Shape{n, k / kernels::kQ4Group};
  m.type = i8 ? WeightType::kI8 : WeightType::kQ4;
  if (panels) {  // laid out straight from the file: no row-major copy first
    const Entry& d = checked(name, data_type, data_shape);
    const Entry& s = checked(scale_name, scale_type, scale_shape);
    m = to_panels(m.type, d.view.data, s.view.data, n, k);
    release_source(d);
    release_source(s);
  } else {
    m.data = aligned_bytes(name, data_type, data_shape, 1);
    m.scales = aligned_bytes(scale_name, scale_type, scale_shape, i8 ? 4 : 2);
  }
  packed_[name] = m;
  return m;
}

kernels::WeightMatrix WeightStore::matrix(const std::string& name, int64_t n, int64_t k,
                                          bool transposed, int64_t row_unit) {
  using kernels::WeightType;
  if (auto it = packed_.find(name); it != packed_.end()) return it->second;
  const bool panels = !transposed && use_panels(n, k, row_unit);
  if (has(name + ".tf_scale") || has(name + ".tf_scales")) return prepacked(name, n, k, panels);
  const Entry& stored = entry(name);  // throws a clear error when missing
  // q4 groups need rows of a multiple of 32: other matrices (stories260K's 172-wide FFN) are
  // kept in int8, the next narrowest type.
  WeightType t = compute_type_ == WeightType::kQ4 && k % kernels::kQ4Group != 0 ? WeightType::kI8
                                                                                : compute_type_;
  // A block format computes as stored under the default compute type: every GGUF matrix (with
  // keep_stored_types), and blocks a model laid out at load (gpt-oss's MXFP4 experts).
  if ((keep_stored_types_ || stored.blocks != WeightType::kF32) &&
      compute_type_ == WeightType::kF32 && !transposed) {
    // Each matrix as the file stores it: a block format read in place by the block kernels,
    // f16 / bf16 by theirs.
    if (panels && kernels::has_panel_type(stored.blocks)) {
      // The kernels' panels straight from the blocks (the K-quants' rows: whole super-blocks).
      check_shape(name, stored, {n, k});
      const kernels::WeightMatrix m = to_panels(stored.blocks, stored.view.data, nullptr, n, k);
      release_source(stored);
      packed_[name] = m;
      return m;
    }
    if (stored.blocks == WeightType::kQ4_0) {
      // Q4_0 is q4 with each block's scale beside its nibbles: moved apart at load (the same
      // bytes, the same size), the matrix takes the q4 kernels, which read the nibbles in
      // 64-byte steps with no per-block decoding (int8 dot products wherever the CPU has them).
      check_shape(name, stored, {n, k});
      const size_t groups = static_cast<size_t>(n * (k / kernels::kQ4Group));
      uint8_t* data = alloc_bytes(groups * 16, 64);
      auto* scales = reinterpret_cast<uint16_t*>(alloc_bytes(groups * 2, 64));
      kernels::q4_0_to_q4(stored.view.data, n, k, data, scales);
      release_source(stored);
      const kernels::WeightMatrix m{WeightType::kQ4, data, scales, n, k};
      packed_[name] = m;
      return m;
    }
    if (stored.blocks != WeightType::kF32) {
      check_shape(name, stored, {n, k});
      const kernels::WeightMatrix m{stored.blocks, own_copy(stored, 64), nullptr, n, k};
      packed_[name] = m;
      return m;
    }
    if (stored.view.dtype == DType::kF16) t = WeightType::kF16;
    if (stored.view.dtype == DType::kBF16) t = WeightType::kBF16;
  }
  if (t == WeightType::kF32) {
    if (float_panels(WeightType::kF32, n, row_unit)) return f32_panels(name, n, k, transposed);
    const float* p = transposed ? f32_transposed(name, {k, n}) : f32(name, {n, k});
    return {WeightType::kF32, p, nullptr, n, k};
  }
  Entry& e = tensors_.find(name)->second;  // `stored` above, writable
  check_shape(name, e, transposed ? Shape{k, n} : Shape{n, k});
  const bool in_place = !transposed && reinterpret_cast<uintptr_t>(e.view.data) % 2 == 0 &&
                        ((t == WeightType::kBF16 && e.view.dtype == DType::kBF16) ||
                         (t == WeightType::kF16 && e.view.dtype == DType::kF16));
  const bool half_panels =
      (t == WeightType::kF16 || t == WeightType::kBF16) && float_panels(t, n, row_unit);
  if (in_place && half_panels) {  // from the file's rows straight into panels
    auto* d = reinterpret_cast<uint16_t*>(alloc_bytes(static_cast<size_t>(n * k) * 2, 64));
    const kernels::WeightMatrix m =
        kernels::pack_half_panels(t, static_cast<const uint16_t*>(e.view.data), n, k, d);
    release_source(e);
    packed_[name] = m;
    return m;
  }
  kernels::WeightMatrix m{t, in_place ? own_copy(e, 64) : e.view.data, nullptr, n, k};
  if (!in_place) {
    // An f32 view of the source, temporary unless it is the mapped bytes themselves.
    std::vector<float> tmp;
    const float* src = nullptr;
    const bool aligned_f32 = e.view.dtype == DType::kF32 &&
                             reinterpret_cast<uintptr_t>(e.view.data) % alignof(float) == 0;
    if (e.converted != nullptr) {
      src = e.converted;
    } else if (e.blocks != WeightType::kF32) {
      tmp.resize(static_cast<size_t>(n * k));
      kernels::dequantize_blocks(e.blocks, e.view.data, n * k, tmp.data());
      src = tmp.data();
    } else if (aligned_f32) {
      src = static_cast<const float*>(e.view.data);
    } else {
      if (e.view.dtype != DType::kF32 && e.view.dtype != DType::kF16 &&
          e.view.dtype != DType::kBF16) {
        fail(ErrorKind::kUnsupported, "tensor '{}' in '{}' has dtype {}; F32, F16 or BF16 expected",
             name, files_.at(e.file_index).path(), dtype_name(e.view.dtype));
      }
      tmp.resize(static_cast<size_t>(n * k));
      convert_to_f32(e.view.dtype, e.view.data, tmp.size(), tmp.data());
      src = tmp.data();
    }
    std::vector<float> transposed_rows;
    if (transposed) {
      transposed_rows.resize(static_cast<size_t>(n * k));
      for (int64_t r = 0; r < k; ++r)
        for (int64_t c = 0; c < n; ++c) transposed_rows[c * k + r] = src[r * n + c];
      src = transposed_rows.data();
    }
    owned_bytes_.emplace_back();
    std::vector<uint8_t>& data = owned_bytes_.back();
    owned_bytes_.emplace_back();
    std::vector<uint8_t>& scales = owned_bytes_.back();
    kernels::quantize_rows(t, src, n, k, data, scales);
    // The source pages are not needed any more (a tied embedding packs once); they go at
    // release_mapped_pages, unless another user holds them in place.
    converted_bytes_ += data.size() + scales.size();
    m.data = data.data();
    m.scales = scales.empty() ? nullptr : scales.data();
    if ((t == WeightType::kQ4 || t == WeightType::kI8) && panels) {
      // Laid out again in panels; the row-major copy goes.
      m = to_panels(t, m.data, m.scales, n, k);
      std::vector<uint8_t>().swap(data);
      std::vector<uint8_t>().swap(scales);
    } else if (half_panels) {  // likewise
      auto* d = reinterpret_cast<uint16_t*>(alloc_bytes(data.size(), 64));
      m = kernels::pack_half_panels(t, reinterpret_cast<const uint16_t*>(data.data()), n, k, d);
      std::vector<uint8_t>().swap(data);
    } else {
      // Into the storage an in-place copy gets (64-byte aligned, 2 MiB pages): in the vector's
      // 16-byte-aligned 4 KiB pages, half the vector loads of a bf16 row straddled two lines
      // and the TLB missed more; an f32 or TF file converted to bf16 decoded 4 rows at 1.16-1.32x
      // the time of the same weights from a bf16 file (class B, issue 56).
      uint8_t* d = alloc_bytes(data.size(), 64);
      std::memcpy(d, data.data(), data.size());
      m.data = d;
      std::vector<uint8_t>().swap(data);
    }
  }
  packed_[name] = m;
  return m;
}

std::vector<kernels::WeightMatrix> WeightStore::matrix_stack(const std::string& name, int64_t count,
                                                             int64_t n, int64_t k,
                                                             int64_t row_unit) {
  if (packed_.find(name) == packed_.end()) {
    entry(name);  // throws a clear error when missing
    Entry& e = tensors_.find(name)->second;
    const bool blocks = e.blocks != kernels::WeightType::kF32;
    check_shape(name, e, {count, n, k});
    // The same bytes seen as one matrix of count * n rows (row-major, so nothing moves).
    (blocks ? e.shape : e.view.shape) = Shape{count * n, k};
  }
  const kernels::WeightMatrix all =
      matrix(name, count * n, k, false, row_unit == 0 ? n : std::gcd(n, row_unit));
  std::vector<kernels::WeightMatrix> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out.push_back(all.rows(i * n, n));
  return out;
}

void WeightStore::FreeDeleter::operator()(uint8_t* p) const {
  std::free(p);
}

void WeightStore::close_files() {
  // Everything the model uses was copied or converted (own_copy): nothing reads the files any
  // more, and unmapping them makes that so.
  for (auto& f : files_) f.close();
}

void WeightStore::rename_prefix(const std::string& from, const std::string& to) {
  std::vector<std::string> renamed;
  for (const auto& [name, e] : tensors_)
    if (name.rfind(from, 0) == 0) renamed.push_back(name);
  for (const std::string& name : renamed) {
    auto node = tensors_.extract(name);
    node.key() = to + name.substr(from.size());
    if (tensors_.count(node.key()))
      fail("tensor '{}' is in {} both as '{}' and under its own name", node.key(), sources(), name);
    tensors_.insert(std::move(node));
  }
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, e] : tensors_) out.push_back(name);
  return out;
}

size_t WeightStore::stored_bytes() const {
  size_t n = 0;
  for (const auto& [name, e] : tensors_) {
    (void)name;
    n += e.view.nbytes();
  }
  return n;
}

std::string WeightStore::sources() const {
  std::string s;
  for (size_t i = 0; i < files_.size(); ++i) {
    if (i > 0) s += ", ";
    s += "'" + files_[i].path() + "'";
  }
  return s.empty() ? "(no files)" : s;
}

}  // namespace tf
