#pragma once
// The Llama family: Llama 2/3, Mistral, Qwen2, TinyLlama, llama2.c checkpoints. RMSNorm, RoPE,
// SwiGLU, grouped-query attention, optional QKV bias, tied or untied LM head.

#include <memory>

#include "model/model.h"

namespace tf {

std::unique_ptr<Model> make_llama(ModelConfig config, WeightStore weights);

}  // namespace tf
