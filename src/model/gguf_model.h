#pragma once
// A model from a GGUF file: hyperparameters from the `{arch}.*` metadata, tensors under the
// Hugging Face names the architectures read (GGUF's `blk.N.attn_q.weight` is
// `model.layers.N.self_attn.q_proj.weight`; ne [in, out] is the row-major [out, in]). F32, F16
// and BF16 tensors are used as stored; block formats (Q8_0, Q4_K, ...) are dequantized at load.

#include <string>

#include "model/gguf.h"
#include "model/model_config.h"

namespace tf {

class WeightStore;

// The configuration a GGUF file's metadata describes; an Error naming the key for what is
// missing, out of range or not supported (an architecture, RoPE scaling, partial rotary).
ModelConfig gguf_model_config(const GgufFile& file, const std::string& path);

// Maps the file and registers its tensors.
ModelConfig load_gguf(const std::string& path, WeightStore& store);

// Maps a GGUF file that is not a model (a LoRA adapter) and registers every tensor under its
// GGUF name; returns the header, for its metadata.
GgufFile load_gguf_tensors(const std::string& path, WeightStore& store);

}  // namespace tf
