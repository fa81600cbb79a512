#pragma once
// GPT-J (GPTJForCausalLM), CodeGen (CodeGenForCausalLM) and GPT-NeoX / Pythia
// (GPTNeoXForCausalLM, GGUF gptneox): attention and MLP side by side on the residual (or in turn,
// NeoX's use_parallel_residual false), LayerNorms with biases, partial rotary positions in adjacent
// pairs (GPT-J, CodeGen) or halves (NeoX), a plain GELU MLP, an untied LM head (with a bias in
// GPT-J and CodeGen).

#include <memory>

#include "model/model.h"

namespace tf {

std::unique_ptr<Model> make_gptj(ModelConfig config, WeightStore weights);

}  // namespace tf
