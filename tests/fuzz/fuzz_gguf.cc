// Fuzz target: the GGUF reader on arbitrary bytes, and the model config and tokenizer read from
// what it accepts. Any outcome but a clean parse or a tf::Error is
// a bug (a crash, a sanitizer report, another exception type, a big allocation); what it accepts
// must lie inside the input.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "model/gguf.h"
#include "model/gguf_model.h"
#include "tokenizer/gguf_vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const tf::GgufFile f = tf::parse_gguf(data, size, "fuzz.gguf");
    for (const auto& t : f.tensors) {
      if (f.data_offset + t.offset + t.bytes > size) __builtin_trap();
      if (t.offset % f.alignment != 0) __builtin_trap();
    }
    // What the model and tokenizer loaders make of the metadata: a config or an Error.
    try {
      (void)tf::gguf_model_config(f, "fuzz.gguf");
    } catch (const tf::Error&) {
    }
    try {
      const tf::LoadedTokenizer tok = tf::load_gguf_tokenizer(f, "fuzz.gguf");
      (void)tok.tokenizer->encode("Once upon a time", true);
    } catch (const tf::Error&) {
    }
    for (const auto& [key, value] : f.metadata) {
      if (f.find(key) != &value) __builtin_trap();
      (void)value.to_string(4);
      try {
        (void)f.get_numbers(key);
      } catch (const tf::Error&) {
      }
    }
  } catch (const tf::Error&) {
  }
  return 0;
}
