#include "engine/model_instance.h"

#include <filesystem>

#include "core/error.h"

namespace tf {

std::vector<int32_t> model_stop_ids(const ModelConfig& config, const LoadedTokenizer& tokenizer) {
  std::vector<int32_t> eos = tokenizer.stop_ids;
  if (config.eos_id >= 0) eos.push_back(config.eos_id);
  if (config.format == "llama2c" && config.bos_id >= 0) eos.push_back(config.bos_id);
  return eos;
}

ModelInstance::~ModelInstance() {
  engine.reset();
}

void ModelInstance::load(const std::string& path, const std::string& explicit_tokenizer,
                         kernels::WeightType weight_type) {
  model = load_model(path, weight_type);
  std::error_code ec;
  const auto canonical = std::filesystem::weakly_canonical(path, ec);
  weights_id_ =
      fmt::format("{}\n{}", ec ? path : canonical.string(), kernels::weight_type_name(weight_type));
  tokenizer = load_tokenizer(path, model->config().vocab_size, explicit_tokenizer);
  eos_ids = model_stop_ids(model->config(), tokenizer);
}

void ModelInstance::start_engine(const EngineConfig& config, bool ids_only) {
  TF_CHECK(model && !engine);
  if (!config.speculative_draft.empty()) {
    const std::string& path = config.speculative_draft;
    draft = load_model(path, config.draft_weight_type);  // its vocabulary size: Engine checks
    if (tok()) {
      // Same ids must mean the same text. A draft without a tokenizer of its own is taken at
      // its word (a llama2c checkpoint's sits beside it, found or not).
      LoadedTokenizer t;
      try {
        t = load_tokenizer(path, draft->config().vocab_size, "");
      } catch (const Error&) {
      }
      if (t.tokenizer && t.tokenizer->vocabulary_bytes() != tok()->vocabulary_bytes())
        fail("the draft model {} has another vocabulary than the model's (its tokens differ)",
             path);
    }
  }
  // Blocks on disk are the weights' at their type: keyed by them unless the server named them.
  EngineConfig ec = config;
  if (ec.kv_disk.namespace_id.empty()) ec.kv_disk.namespace_id = weights_id_;
  engine = std::make_unique<Engine>(*model, ids_only ? nullptr : tok(),
                                    ids_only ? std::vector<int32_t>{} : eos_ids, ec, draft.get());
}

std::shared_ptr<const GrammarVocab> ModelInstance::grammar_vocab() const {
  std::call_once(grammar_vocab_once_, [this] {
    if (tok()) grammar_vocab_ = GrammarVocab::of(*tok());
  });
  return grammar_vocab_;
}

}  // namespace tf
