// Fuzz target: the safetensors header parser on arbitrary bytes. Any outcome but a clean parse or
// a tf::Error is a bug (a crash, a sanitizer report, another exception type).
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tf::SafetensorsHeader h = tf::parse_safetensors(data, size, "fuzz.safetensors");
    // What the parser accepted must lie inside the input.
    for (const auto& t : h.tensors) {
      if (h.data_start + t.end > size) __builtin_trap();
      volatile uint8_t sink = 0;
      if (t.end > t.begin) sink = data[h.data_start + t.end - 1];
      (void)sink;
    }
  } catch (const tf::Error&) {
  }
  return 0;
}
