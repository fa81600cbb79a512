#include "model/weight_store.h"

#include <cstdint>

#include "core/error.h"

namespace tf {

int WeightStore::add_file(MappedFile file) {
  files_.push_back(std::move(file));
  return static_cast<int>(files_.size()) - 1;
}

void WeightStore::add(const std::string& name, const TensorView& view, int file_index) {
  auto [it, inserted] = tensors_.emplace(name, Entry{view, file_index, nullptr});
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

void WeightStore::check_shape(const std::string& name, const Entry& e, const Shape& shape) const {
  if (!(e.view.shape == shape)) {
    fail("tensor '{}' in '{}' has shape {}, expected {}", name, files_.at(e.file_index).path(),
         e.view.shape.to_string(), shape.to_string());
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
  const bool aligned = reinterpret_cast<uintptr_t>(e.view.data) % alignof(float) == 0;
  if (e.view.dtype == DType::kF32 && aligned) return static_cast<const float*>(e.view.data);
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
  const float* src = f32(name, stored_shape);
  const int64_t rows = stored_shape[0];
  const int64_t cols = stored_shape[1];
  float* out = alloc(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = src[r * cols + c];
  }
  return out;
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
