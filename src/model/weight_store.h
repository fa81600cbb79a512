#pragma once
// Named tensors of a model and the memory behind them: mapped files, plus f32 copies made once at
// load where a tensor is stored in another dtype, misaligned, or transposed.

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/tensor.h"

namespace tf {

class WeightStore {
 public:
  // Takes ownership of a mapped file whose bytes tensors will point into; returns its index.
  int add_file(MappedFile file);
  const MappedFile& file(int index) const { return files_.at(index); }
  // Registers a tensor; throws on a duplicate name.
  void add(const std::string& name, const TensorView& view, int file_index);

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws kNotFound naming the tensor and the files searched.
  const TensorView& get(const std::string& name) const;
  // The tensor as f32 with exactly `shape` (same element count is not enough: the dims must
  // match). Converts once and keeps the copy; returns mapped bytes directly when they are
  // already aligned f32.
  const float* f32(const std::string& name, const Shape& shape);
  // A 2-D tensor stored [rows, cols] returned as f32 [cols, rows].
  const float* f32_transposed(const std::string& name, const Shape& stored_shape);

  std::vector<std::string> names() const;
  size_t size() const { return tensors_.size(); }
  // Bytes of all tensors as stored, and bytes of the f32 copies made so far.
  size_t stored_bytes() const;
  size_t converted_bytes() const { return converted_bytes_; }
  std::string sources() const;  // the file names, for messages

 private:
  struct Entry {
    TensorView view;  // as stored
    int file_index;
    const float* converted;  // the f32 copy, once made
  };
  const Entry& entry(const std::string& name) const;
  void check_shape(const std::string& name, const Entry& e, const Shape& shape) const;
  float* alloc(size_t n);

  std::vector<MappedFile> files_;
  std::map<std::string, Entry> tensors_;
  std::deque<std::vector<float>> owned_;
  size_t converted_bytes_ = 0;
};

}  // namespace tf
