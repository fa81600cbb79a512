#pragma once
// The Llama family: Llama 2/3.x, Mistral, Qwen2, Qwen3, TinyLlama, llama2.c checkpoints. RMSNorm,
// RoPE (every scaling of rope.h), SwiGLU, grouped-query attention, optional QKV bias, optional
// per-head q/k RMSNorm (Qwen3), tied or untied LM head.

#include <memory>

#include "model/model.h"

namespace tf {

std::unique_ptr<Model> make_llama(ModelConfig config, WeightStore weights);

}  // namespace tf
