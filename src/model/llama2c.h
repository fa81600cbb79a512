#pragma once
// llama2.c's legacy ("version 0") checkpoint: 7 int32 hyperparameters, then f32 arrays back to
// back (see ../shared/models/stories260K/README.md). No magic number, so the file size is the
// only check of the header, and we insist on it exactly.

#include <cstddef>
#include <cstdint>
#include <string>

#include "model/model_config.h"

namespace tf {

class WeightStore;

struct Llama2cLayout {
  ModelConfig config;
  bool shared_classifier = true;
  // Float offsets (after the header) of each array, in the order of the file.
  uint64_t embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, freq_real, wcls;
  uint64_t total_floats;
};

// Validates the header against the file size. `path` names the file in errors.
Llama2cLayout parse_llama2c(const uint8_t* data, size_t size, const std::string& path);

// Maps the file and registers its arrays under Hugging Face Llama tensor names
// (model.layers.N.self_attn.q_proj.weight, ...). Returns the config (RoPE interleaved).
ModelConfig load_llama2c(const std::string& path, WeightStore& store);

}  // namespace tf
