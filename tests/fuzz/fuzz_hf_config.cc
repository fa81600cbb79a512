// Fuzz target: the Hugging Face config.json parser.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tf::ModelConfig c =
        tf::parse_hf_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
    if (c.n_heads % c.n_kv_heads != 0 || c.vocab_size <= 0) __builtin_trap();
  } catch (const tf::Error&) {
  }
  return 0;
}
