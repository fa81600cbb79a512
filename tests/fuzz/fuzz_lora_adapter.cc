// Fuzz target: a LoRA adapter (issue 54) read for a real base, stories260K (llama2.c: the
// interleaved rotary layout, so q/k rows move too). The first byte picks the form: 0, a PEFT
// folder (the rest split at "--next--" lines into adapter_config.json and
// adapter_model.safetensors); 1, a GGUF adapter file (llama.cpp's convert_lora_to_gguf.py).
// An adapter that loads must fit its base: every pair's A [rank, in] and B [out, rank] with the
// base's projection shape; anything else must be a tf::Error naming why (never a crash, a
// sanitizer report or a hang).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"
#include "fuzz_file.h"
#include "model/lora.h"
#include "model/model.h"

namespace {

const tf::Model& base() {
  static const std::unique_ptr<tf::Model> m =
      tf::load_model(std::string(TF_SHARED_DIR) + "/models/stories260K/stories260K.bin");
  return *m;
}

void check(const tf::LoraAdapter& a, const tf::Model& m) {
  const tf::ModelConfig& c = m.config();
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (int t = 0; t < tf::kLoraTargets; ++t) {
      const tf::LoraPair* p = a.pair(l, static_cast<tf::LoraTarget>(t));
      if (p == nullptr) continue;
      const auto shape = tf::lora_target_shape(c, l, static_cast<tf::LoraTarget>(t));
      if (!shape || p->rank < 1 || p->a.n != p->rank || p->a.k != (*shape)[1] ||
          p->b.n != (*shape)[0] || p->b.k != p->rank)
        __builtin_trap();
    }
  }
  if (a.bytes() == 0 || a.base() != &m) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const tf::Model& m = base();
  try {
    std::shared_ptr<const tf::LoraAdapter> a;
    if (data[0] % 2 == 0) {
      const auto dir = write_fuzz_folder("tf_fuzz_lora", data + 1, size - 1,
                                         {"adapter_config.json", "adapter_model.safetensors"});
      a = tf::LoraAdapter::load(dir.string(), m);
    } else {
      const std::string path = "/tmp/tf_fuzz_lora_" + std::to_string(::getpid()) + ".gguf";
      if (!write_fuzz_file(path, data + 1, size - 1)) return 0;
      a = tf::LoraAdapter::load(path, m);
    }
    check(*a, m);
  } catch (const tf::Error&) {
  }
  return 0;
}
