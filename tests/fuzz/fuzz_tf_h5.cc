// Fuzz target: the tf_model.h5 reader (Keras's HDF5 weights through Debian's libhdf5) on
// arbitrary bytes, written to a file as the reader takes one. Any outcome but weights or a
// tf::Error is a bug (a crash, a sanitizer report, another exception type).
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "fuzz_file.h"
#include "model/tf_weights.h"
#include "model/weight_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/tf_fuzz_h5_" + std::to_string(::getpid()) + ".h5";
  if (!write_fuzz_file(path, data, size)) return 0;
  try {
    tf::WeightStore store;
    tf::load_tf_h5_file(path, store, std::chrono::seconds(2));  // a hang costs 2 s
  } catch (const tf::Error&) {
  }
  std::remove(path.c_str());
  return 0;
}
