// Fuzz target: the small files a model folder points its loader with, written into a folder as
// the loader finds them. The first byte picks: a sharded safetensors index
// (model.safetensors.index.json, with one shard beside it), a sharded Keras index
// (tf_model.h5.index.json), or a SavedModel's saved_model.pb (its 'serve' signatures). Any outcome
// but weights, signatures or a tf::Error is a bug (a crash, a sanitizer report, a hang).
#include <cstddef>
#include <cstdint>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "core/error.h"
#include "fuzz_file.h"
#include "model/safetensors.h"
#include "model/tf_weights.h"
#include "model/weight_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  if (size == 0) return 0;
  const uint8_t kind = data[0] % 3;
  try {
    tf::WeightStore store;
    if (kind == 0) {
      const auto dir =
          write_fuzz_folder("tf_fuzz_st_index", data + 1, size - 1,
                            {"model.safetensors.index.json", "model-00001.safetensors"});
      tf::load_safetensors_dir(dir.string(), store);
    } else if (kind == 1) {
      const auto dir =
          write_fuzz_folder("tf_fuzz_h5_index", data + 1, size - 1, {"tf_model.h5.index.json"});
      tf::load_tf_h5_dir(dir.string(), store);
    } else {
      const auto dir =
          write_fuzz_folder("tf_fuzz_saved_model", data + 1, size - 1, {"saved_model.pb"});
      (void)tf::read_saved_model_signatures(dir.string());
    }
  } catch (const tf::Error&) {
  }
  return 0;
}
