#pragma once
// BERT-family encoders (Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional
// Transformers for Language Understanding"; Liu et al. 2019, RoBERTa; Conneau et al. 2020,
// XLM-R; Hugging Face's BertModel / RobertaModel / XLMRobertaModel and their
// ForSequenceClassification heads): token + absolute position + token type embeddings and a
// LayerNorm, then post-LN blocks (self-attention over the whole input, scaled by head_dim^-0.5,
// with biases; residual; LayerNorm; an exact-GELU MLP; residual; LayerNorm). What comes out is
// every token's hidden state: pooled into an embedding (CLS, mean, max, last token), or fed to a
// sequence classifier (BERT: tanh(dense(CLS)) then a linear layer; RoBERTa: dense, tanh,
// out_proj on CLS) for rerank and classification scores.
//
// Inputs are batched as they come, unpadded: the matmuls run over every token of every input,
// attention within each input, so an input's output does not depend on its batch.

#include <memory>
#include <span>
#include <string>

#include "model/model.h"

namespace tf {

enum class EncoderPooling { kCls, kMean, kMax, kLast };

// "cls", "mean", "max", "last"; an Error naming anything else.
EncoderPooling parse_encoder_pooling(const std::string& name);
const char* encoder_pooling_name(EncoderPooling p);

struct EncoderInput {
  std::span<const int32_t> tokens;
  std::span<const int32_t> types;  // token type ids; empty: every token type 0
};

class EncoderModel : public Model {
 public:
  // Checks the inputs (ids in the vocabulary, types below type_vocab_size, lengths within
  // max_seq_len, types as long as tokens) and writes every token's final hidden state to
  // hidden, [sum of the inputs' lengths, dim], inputs in order. Not thread-safe.
  void encode(std::span<const EncoderInput> inputs, float* hidden, ThreadPool& pool);
  // Each input's classifier scores (logits, before any softmax) from its hidden states (as
  // encode() wrote them), [inputs, num_labels]. Throws for a model without a classifier.
  void classify(std::span<const EncoderInput> inputs, const float* hidden, float* scores,
                ThreadPool& pool);

 protected:
  EncoderModel(ModelConfig config, WeightStore weights)
      : Model(std::move(config), std::move(weights)) {}
  virtual void run_encoder(std::span<const EncoderInput> inputs, float* hidden,
                           ThreadPool& pool) = 0;
  virtual void run_classifier(const float* cls_rows, int64_t n, float* scores,
                              ThreadPool& pool) = 0;
  // Engine steps are for decoders; an encoder's requests go through encode().
  void run(std::span<const SequenceChunk> batch, std::span<const TokenPosition> tokens, KvCache& kv,
           float* logits, ThreadPool& pool) override;
};

std::unique_ptr<Model> make_bert(ModelConfig config, WeightStore weights);

// How a model directory says its embeddings are made: sentence-transformers' modules.json
// (a Pooling module's config.json: pooling_mode_cls_token / _mean_tokens / _max_tokens /
// _lasttoken; a Normalize module), else CLS without normalization (a file says nothing here:
// GGUF's pooling_type is read with its header, into ModelConfig::embedding_pooling). Throws
// Error for a pooling mode tokenflow does not compute (weighted mean, mean by sqrt(length)).
struct EncoderPoolingConfig {
  EncoderPooling pooling = EncoderPooling::kCls;
  bool normalize = false;
  bool from_config = false;  // read from sentence-transformers' files
};
EncoderPoolingConfig read_encoder_pooling(const std::string& model_dir);

// One input's embedding from its hidden states [len, dim].
void pool_hidden(const float* hidden, int64_t len, int64_t dim, EncoderPooling pooling, float* out);

}  // namespace tf
