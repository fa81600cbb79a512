#pragma once
// Mamba (Gu and Dao, "Mamba: Linear-Time Sequence Modeling with Selective State Spaces", 2023;
// Hugging Face's MambaForCausalLM): each layer an RMSNorm and a selective-scan mixer (an input
// projection to x and a gate z, a causal depthwise convolution, step sizes and the B, C of the
// state space from x, the scan over the state, the gate, an output projection) in a residual
// stream. No attention: each sequence carries its convolution window and SSM state from step to
// step in its recurrent cache block (CacheKind::kRecurrent), zeroed when it starts at position 0.

#include <memory>

#include "model/model.h"

namespace tf {

std::unique_ptr<Model> make_mamba(ModelConfig config, WeightStore weights);

}  // namespace tf
