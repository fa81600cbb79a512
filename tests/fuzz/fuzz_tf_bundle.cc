// Fuzz target: a SavedModel's tensor bundle index (variables.index: a LevelDB-format table read
// with libleveldb, BundleEntryProtos, the object graph) on arbitrary bytes, beside a data shard
// of 309 bytes (the seed's). Any outcome but weights or a tf::Error is a bug (a crash, a
// sanitizer report, another exception type, a read outside the shard).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_file.h"
#include "model/tf_weights.h"
#include "model/weight_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  static const fs::path dir =
      fs::temp_directory_path() / ("tf_fuzz_bundle_" + std::to_string(::getpid()));
  static const bool ready = [] {
    fs::create_directories(dir / "variables");
    const std::vector<uint8_t> shard(309, 0x3f);
    return write_fuzz_file((dir / "variables" / "variables.data-00000-of-00001").string(),
                           shard.data(), shard.size());
  }();
  if (!ready || !write_fuzz_file((dir / "variables" / "variables.index").string(), data, size))
    return 0;
  try {
    tf::WeightStore store;
    tf::load_saved_model_variables(dir.string(), store);
  } catch (const tf::Error&) {
  }
  return 0;
}
