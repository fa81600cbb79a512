#pragma once
// T5 (Raffel et al., "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
// Transformer", 2020; Hugging Face's T5ForConditionalGeneration, v1.0 and v1.1 / flan-t5 / mT5):
// an encoder over the prompt and a decoder that attends to its own tokens and, through
// cross-attention, to the encoder's output. RMS norms without a mean or bias, attention without
// score scaling, a learned bias per head over relative-position buckets (bidirectional in the
// encoder, causal in the decoder) from each stack's first block, a ReLU (v1.0) or gated-GELU
// (v1.1) MLP, and with tied embeddings the decoder's output scaled by d_model^-0.5 before the LM
// head. A sequence's first chunk carries the encoder's input (SequenceChunk::encoder_tokens):
// the encoder runs over it (batched with the other sequences' encoders of the step) and each
// decoder layer's cross-attention K/V go into the sequence's cross-attention blocks
// (CacheKind::kCrossAttention), read by every later step.

#include <memory>

#include "model/model.h"

namespace tf {

std::unique_ptr<Model> make_t5(ModelConfig config, WeightStore weights);

// The relative-position bucket of T5's position bias for a key at `relative` = key - query.
int32_t t5_position_bucket(int64_t relative, bool bidirectional, int64_t num_buckets,
                           int64_t max_distance);

}  // namespace tf
