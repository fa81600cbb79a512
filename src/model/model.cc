#include "model/model.h"

#include "kernels/attention.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/mapped_file.h"
#include "model/bert.h"
#include "model/gguf_model.h"
#include "model/gpt2.h"
#include "model/gptj.h"
#include "model/llama.h"
#include "model/llama2c.h"
#include "model/lora.h"
#include "model/mamba.h"
#include "model/safetensors.h"
#include "model/t5.h"
#include "model/tf_weights.h"
#include "model/torch_checkpoint.h"

namespace tf {

int64_t Model::parameter_count() const {
  int64_t n = 0;
  for (const auto& name : weights_.names()) n += weights_.get(name).numel();
  return n;
}

int64_t Model::logit_rows(std::span<const SequenceChunk> batch) {
  int64_t rows = 0;
  for (const auto& s : batch) rows += s.all_logits ? static_cast<int64_t>(s.tokens.size()) : 1;
  return rows;
}

void Model::forward(std::span<const SequenceChunk> batch, KvCache& kv, float* logits,
                    ThreadPool& pool, float* hidden) {
  if (batch.empty()) fail("empty batch");
  const int64_t bs = kv.block_size();
  const CacheLayout& layout = kv.layout();
  size_t total = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceChunk& s = batch[i];
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    if (n == 0) fail("sequence {} of the batch has no tokens", i);
    if (s.lora != nullptr && s.lora->base() != this)
      fail("sequence {}: its LoRA adapter {} was loaded for another model", i, s.lora->path());
    if (s.start_pos < 0 || s.start_pos + n > config_.max_seq_len) {
      fail("sequence {}: positions {}..{} exceed the model's context of {} tokens", i, s.start_pos,
           s.start_pos + n - 1, config_.max_seq_len);
    }
    for (int32_t id : s.tokens) {
      if (id < 0 || id >= config_.vocab_size) {
        fail("sequence {}: token id {} is outside the vocabulary (0..{})", i, id,
             config_.vocab_size - 1);
      }
    }
    if (static_cast<int64_t>(s.group_tables.size()) + 1 < layout.num_groups()) {
      fail("sequence {}: {} block tables for a KV cache of {} groups", i, s.group_tables.size() + 1,
           layout.num_groups());
    }
    const int64_t needed_blocks = (s.start_pos + n + bs - 1) / bs;
    for (int32_t g = 0; g < layout.num_groups(); ++g) {
      const size_t size = s.table_size(g);
      const int32_t* table = s.table(g);
      if (layout.groups[g].kind == CacheKind::kCrossAttention) {
        const int64_t enc = s.encoder_len;
        if (enc < 1 || enc > config_.max_seq_len ||
            (!s.encoder_tokens.empty() && static_cast<int64_t>(s.encoder_tokens.size()) != enc))
          fail("sequence {}: an encoder input of {} tokens (1..{})", i, enc, config_.max_seq_len);
        for (int32_t id : s.encoder_tokens)
          if (id < 0 || id >= config_.vocab_size)
            fail("sequence {}: encoder token id {} is outside the vocabulary", i, id);
        const int64_t blocks = (enc + bs - 1) / bs;
        if (static_cast<int64_t>(size) < blocks)
          fail("sequence {}: {} cross-attention blocks for {} encoder positions", i, size, enc);
        for (int64_t b = 0; b < blocks; ++b)
          if (table[b] < 0 || table[b] >= kv.num_blocks())
            fail("sequence {}: block id {} is outside the KV cache (0..{})", i, table[b],
                 kv.num_blocks() - 1);
        continue;
      }
      if (layout.groups[g].kind == CacheKind::kRecurrent) {  // one block: the state
        if (size < 1 || table[0] < 0 || table[0] >= kv.num_blocks())
          fail("sequence {}: no state block (0..{}) in its recurrent cache group", i,
               kv.num_blocks() - 1);
        continue;
      }
      if (static_cast<int64_t>(size) < needed_blocks) {
        fail("sequence {}: block table{} has {} blocks, {} needed for {} positions", i,
             layout.num_groups() > 1 ? fmt::format(" of cache group {}", g) : "", size,
             needed_blocks, s.start_pos + n);
      }
      // A sliding group's attention reads keys from the chunk of 16 positions that holds the
      // chunk's first query's first key: blocks before it may have been released (-1).
      constexpr int64_t kChunk = kernels::kAttentionKeyChunk;
      const int64_t window =
          layout.groups[g].kind == CacheKind::kSlidingWindow ? layout.groups[g].window : 0;
      const int64_t first_read =
          window > 0 && s.start_pos + 1 > window ? (s.start_pos + 1 - window) / kChunk * kChunk : 0;
      for (int64_t b = 0; b < needed_blocks; ++b) {
        if ((b + 1) * bs <= first_read && table[b] == -1) continue;
        if (table[b] < 0 || table[b] >= kv.num_blocks()) {
          fail("sequence {}: block id {} is outside the KV cache (0..{})", i, table[b],
               kv.num_blocks() - 1);
        }
      }
    }
    total += static_cast<size_t>(n);
  }
  token_positions_.resize(total);
  size_t t = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    for (size_t j = 0; j < batch[i].tokens.size(); ++j) {
      token_positions_[t++] = {batch[i].start_pos + static_cast<int64_t>(j),
                               static_cast<int32_t>(i)};
    }
  }
  hidden_out_ = hidden;
  run(batch, token_positions_, kv, logits, pool);
}

namespace {
// A file that starts as a zip archive: a PyTorch checkpoint named on its own.
bool looks_like_torch_zip(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  uint8_t head[4] = {};
  return f.read(reinterpret_cast<char*>(head), 4) && is_torch_zip(head, 4);
}
}  // namespace

std::unique_ptr<Model> load_model(const std::string& path, kernels::WeightType weight_type,
                                  bool keep_files) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(ErrorKind::kNotFound, "model path '{}' does not exist", path);
  WeightStore weights;
  ModelConfig config;
  if (fs::is_directory(path, ec) && is_saved_model_dir(path)) {
    // A TF Serving version directory exported by tf.saved_model.save: its variables, mapped to
    // the architecture by name; the architecture's settings from the config.json beside them
    // (or in assets.extra/, where exports keep extra files).
    fs::path cfg = fs::path(path) / "config.json";
    if (!fs::exists(cfg, ec)) cfg = fs::path(path) / "assets.extra" / "config.json";
    if (!fs::exists(cfg, ec))
      fail(ErrorKind::kNotFound,
           "'{}' is a TensorFlow SavedModel (saved_model.pb, variables/) without the model's "
           "config.json (in the directory or its assets.extra/): the variables name the layers "
           "but not the architecture's settings (heads, norms, RoPE); add the config.json of the "
           "model that was exported",
           path);
    config = parse_hf_config(read_file(cfg.string()), cfg.string());
    load_saved_model_variables(path, weights);
  } else if (fs::is_directory(path, ec) && !fs::exists(fs::path(path) / "config.json") &&
             fs::exists(fs::path(path) / "saved_model.pb", ec)) {
    fail(ErrorKind::kUnsupported,
         "'{}' has saved_model.pb but no variables/variables.index: a SavedModel without "
         "variables (a graph with constants) is not read",
         path);
  } else if (fs::is_directory(path, ec) && !fs::exists(fs::path(path) / "config.json")) {
    // A directory holding one llama2c checkpoint (and its tok*.bin tokenizer), as a version
    // directory of a TF Serving-style base path does.
    std::vector<fs::path> checkpoints;
    if (has_torch_checkpoint(path))
      fail(ErrorKind::kNotFound,
           "'{}' holds a PyTorch checkpoint but no config.json: the state dict names the layers "
           "but not the architecture's settings; add the model's config.json",
           path);
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string name = e.path().filename().string();
      if ((e.path().extension() == ".bin" && name.rfind("tok", 0) != 0) ||
          e.path().extension() == ".gguf")
        checkpoints.push_back(e);
    }
    if (checkpoints.size() != 1) {
      fail(ErrorKind::kNotFound,
           "'{}' is a directory without config.json (expected a Hugging Face model directory, "
           "one llama2c .bin checkpoint or one .gguf file)",
           path);
    }
    return load_model(checkpoints[0].string(), weight_type);
  } else if (fs::is_directory(path, ec)) {
    const fs::path cfg = fs::path(path) / "config.json";
    config = parse_hf_config(read_file(cfg.string()), cfg.string());
    const fs::path dir(path);
    const bool safetensors = fs::exists(dir / "model.safetensors", ec) ||
                             fs::exists(dir / "model.safetensors.index.json", ec);
    if (!safetensors && has_torch_checkpoint(path)) {
      load_torch_dir(path, weights);  // pytorch_model.bin (or its shards): the same names
    } else if (!safetensors && has_tf_h5(path)) {
      load_tf_h5_dir(path, weights);  // TF save_pretrained's weights, under PyTorch's names
    } else {
      load_safetensors_dir(path, weights);
    }
    if (!config.text_model_prefix.empty())
      weights.rename_prefix(config.text_model_prefix, "model.");
  } else if (fs::path(path).extension() == ".safetensors") {
    fail(ErrorKind::kUnsupported,
         "'{}': a bare .safetensors file has no config; pass its directory (with config.json)",
         path);
  } else if (fs::path(path).extension() == ".gguf") {
    config = load_gguf(path, weights);
  } else if (looks_like_torch_zip(path)) {
    fail(ErrorKind::kUnsupported,
         "'{}' is a PyTorch checkpoint: pass its directory (with config.json), as for safetensors",
         path);
  } else {
    config = load_llama2c(path, weights);
  }
  weights.set_compute_type(weight_type);
  // How embeddings are pooled, where a directory's sentence-transformers files say (a GGUF's
  // pooling_type came with its header): an encoder's, or an embedding model on a decoder
  // (Qwen3-Embedding: last token, normalized).
  // A generator whose files ask for a pooling tokenflow lacks still generates (and embeds by
  // its last token); an encoder is refused.
  if (!config.encoder_decoder()) {
    EncoderPoolingConfig pooling;
    try {
      pooling = read_encoder_pooling(path);
    } catch (const Error&) {
      if (config.encoder_only()) throw;
    }
    if (pooling.from_config) config.embedding_pooling = encoder_pooling_name(pooling.pooling);
    config.embedding_normalize = pooling.normalize;
  }
  std::unique_ptr<Model> model;
  switch (config.arch) {
    case Arch::kGpt2:
      model = make_gpt2(std::move(config), std::move(weights));
      break;
    case Arch::kGptJ:
      model = make_gptj(std::move(config), std::move(weights));
      break;
    case Arch::kMamba:
      model = make_mamba(std::move(config), std::move(weights));
      break;
    case Arch::kT5:
      model = make_t5(std::move(config), std::move(weights));
      break;
    case Arch::kLlama:
      model = make_llama(std::move(config), std::move(weights));
      break;
    case Arch::kBert:
      model = make_bert(std::move(config), std::move(weights));
      break;
  }
  // The model holds copies and conversions only: the files go, and with them any way for a
  // file changed in place to reach a running model.
  if (!keep_files) model->close_weight_files();
  return model;
}

}  // namespace tf
