#pragma once
// Writes GGUF files (version 3): metadata in the order it was set, tensor infos in the order
// they were added, each tensor's data at a multiple of general.alignment (32) from the data
// section's start, zero padding between, everything little-endian (gguf.h describes the layout
// and parse_gguf reads it back). The file is written beside the target and renamed into place,
// so a reader never sees half of it.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/gguf.h"

namespace tf {

class GgufWriter {
 public:
  // Sets (or replaces) a key; general.alignment is written first, as 32.
  void set(const std::string& key, GgufValue value);
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_strings(const std::string& key, std::vector<std::string> v);
  void set_f32s(const std::string& key, const std::vector<float>& v);
  void set_i32s(const std::string& key, const std::vector<int32_t>& v);
  bool has(const std::string& key) const;

  // ne: ggml's dimensions (innermost first); data: the tensor's bytes in the type's layout
  // (checked against ne and the type's block size).
  void add_tensor(const std::string& name, std::vector<int64_t> ne, GgmlType type,
                  std::vector<uint8_t> data);
  size_t tensor_count() const { return tensors_.size(); }
  int64_t tensor_bytes() const;

  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    std::vector<uint8_t> data;
  };
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace tf
