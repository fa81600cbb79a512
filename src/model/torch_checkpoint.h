#pragma once
// PyTorch checkpoints as torch.save has written them since 1.6 (pytorch_model.bin and its shards):
// a zip archive whose entries are stored uncompressed, ARCHIVE/data.pkl a pickle of the state dict
// and ARCHIVE/data/KEY the raw little-endian bytes of each storage the tensors view.
//
// The pickle is read by a restricted unpickler written for state dicts: the opcodes a state dict
// uses, and of Python's globals only the ones torch.save writes for tensors
// (torch._utils._rebuild_tensor_v2 / _rebuild_tensor / _rebuild_parameter, the typed storage
// classes, collections.OrderedDict). Any other global or opcode is refused by name; nothing in the
// file is ever executed. Tensors keep their storages' bytes where they lie in the mapped file;
// strided (non-contiguous) views and shared storages are handled, and every tensor's extent is
// checked against its storage before anything is registered.

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tf {

class WeightStore;

struct TorchStorage {
  DType dtype = DType::kF32;
  int64_t numel = 0;
  uint64_t offset = 0;  // of its bytes in the file
  uint64_t bytes = 0;   // of its zip entry
};

struct TorchTensor {
  std::string name;
  std::string storage;  // key into TorchCheckpoint::storages
  Shape shape;
  std::array<int64_t, kMaxRank> strides{};  // in elements
  int64_t offset = 0;                       // in elements, into the storage
  bool contiguous() const;
};

struct TorchCheckpoint {
  std::vector<TorchTensor> tensors;  // the state dict's, in its order
  std::map<std::string, TorchStorage> storages;
  // Entries of the state dict that are not tensors tokenflow reads (ranks above kMaxRank);
  // the model fails naming them if it needs one.
  std::vector<std::string> skipped;
};

// True if the bytes start as a zip archive (a PyTorch checkpoint since 1.6).
bool is_torch_zip(const uint8_t* data, size_t size);

// Parses the archive held in memory; `path` names it in errors. Throws tf::Error for anything but
// a state dict of tensors (a dict, or a dict holding one under "state_dict", "model" or "module").
TorchCheckpoint parse_torch_checkpoint(const uint8_t* data, size_t size, const std::string& path);

// Maps one checkpoint and registers its F32, F16 and BF16 tensors (others, e.g. integer
// buffers, are left out); strided views and F64 are copied as f32.
void load_torch_file(const std::string& path, WeightStore& store);

// Loads dir/pytorch_model.bin, or the shards listed in dir/pytorch_model.bin.index.json.
void load_torch_dir(const std::string& dir, WeightStore& store);

// Whether dir holds a PyTorch checkpoint (pytorch_model.bin or its index).
bool has_torch_checkpoint(const std::string& dir);

}  // namespace tf
