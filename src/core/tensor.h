#pragma once
// A non-owning view of a dense, row-major tensor: type, shape and a pointer. Who owns the bytes
// (a mapped file, a converted copy) is the loader's business.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"

namespace tf {

constexpr int kMaxRank = 4;

struct Shape {
  std::array<int64_t, kMaxRank> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t operator[](int i) const { return dims[i]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  std::string to_string() const;  // "[64, 172]"
};

struct TensorView {
  DType dtype = DType::kF32;
  Shape shape;
  const void* data = nullptr;

  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  const float* f32() const;  // throws unless dtype is F32
};

}  // namespace tf
