#pragma once
// GPT-2 (GPT2LMHeadModel): learned positions, LayerNorm with bias, fused QKV stored as Conv1D
// ([in, out], transposed at load), gelu_new, LM head tied to the token embedding.

#include <memory>

#include "model/model.h"

namespace tf {

std::unique_ptr<Model> make_gpt2(ModelConfig config, WeightStore weights);

}  // namespace tf
