// Fuzz target: the PyTorch checkpoint reader (zip directory and the restricted unpickler) on
// arbitrary bytes. Any outcome but a clean parse or a tf::Error is a bug (a crash, a sanitizer
// report, another exception type, a leak).
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "model/torch_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const tf::TorchCheckpoint ck = tf::parse_torch_checkpoint(data, size, "fuzz.bin");
    // What the reader accepted must lie inside the input: every storage's bytes and every
    // tensor's last element.
    for (const auto& [key, s] : ck.storages) {
      if (s.offset + s.bytes > size) __builtin_trap();
      if (static_cast<uint64_t>(s.numel) * tf::dtype_size(s.dtype) > s.bytes) __builtin_trap();
      volatile uint8_t sink = 0;
      if (s.bytes > 0) sink = data[s.offset + s.bytes - 1];
      (void)sink;
    }
    for (const auto& t : ck.tensors) {
      const tf::TorchStorage& s = ck.storages.at(t.storage);
      int64_t last = t.offset;
      bool empty = false;
      for (int d = 0; d < t.shape.rank; ++d) {
        if (t.shape.dims[d] == 0)
          empty = true;
        else
          last += (t.shape.dims[d] - 1) * t.strides[d];
      }
      if (!empty && last >= s.numel) __builtin_trap();
    }
  } catch (const tf::Error&) {
  }
  return 0;
}
