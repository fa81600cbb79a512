#pragma once
// Hugging Face safetensors: an 8-byte little-endian header length, a JSON header mapping tensor
// names to {dtype, shape, data_offsets}, then the raw bytes. Every field is checked against the
// file before any tensor is touched.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tf {

class WeightStore;

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;  // offsets relative to the start of the data section
  uint64_t end;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;
  uint64_t data_start = 0;  // file offset of the data section
};

// Parses and validates a whole file held in memory. `path` names the file in errors.
SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& path);

// Maps one .safetensors file and registers its tensors.
void load_safetensors_file(const std::string& path, WeightStore& store);

// Loads `dir/model.safetensors`, or the shards listed in `dir/model.safetensors.index.json`.
void load_safetensors_dir(const std::string& dir, WeightStore& store);

// Loads the shards an index file (`{"weight_map": {tensor: shard file}}`, Hugging Face's form for
// safetensors and PyTorch shards alike) lists, each once with load_file, from the index's
// directory; every tensor listed must then be in the store.
void load_shards(const std::string& index_path, WeightStore& store,
                 void (*load_file)(const std::string&, WeightStore&));

// One tensor to write: its bytes (numel * dtype_size) stay owned by the caller.
struct SafetensorsOutput {
  std::string name;
  DType dtype;
  Shape shape;
  const void* data;
};

// Writes a .safetensors file (tensors in the given order, each 8-byte aligned in the data
// section). Throws Error naming the path if it cannot be written.
void write_safetensors(const std::string& path, const std::vector<SafetensorsOutput>& tensors);

}  // namespace tf
