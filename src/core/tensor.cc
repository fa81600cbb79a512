#include "core/tensor.h"

#include "core/error.h"

namespace tf {

Shape::Shape(std::initializer_list<int64_t> d) {
  if (d.size() > kMaxRank) fail("tensor rank {} exceeds the maximum of {}", d.size(), kMaxRank);
  for (int64_t v : d) dims[rank++] = v;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] != o.dims[i]) return false;
  }
  return true;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

const float* TensorView::f32() const {
  if (dtype != DType::kF32) fail(ErrorKind::kInternal, "tensor is {}, not F32", dtype_name(dtype));
  return static_cast<const float*>(data);
}

}  // namespace tf
