// Fuzz target: the llama2.c checkpoint header check on arbitrary bytes.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "model/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tf::Llama2cLayout L = tf::parse_llama2c(data, size, "fuzz.bin");
    if (28 + 4 * L.total_floats != size) __builtin_trap();
  } catch (const tf::Error&) {
  }
  return 0;
}
