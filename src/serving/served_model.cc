#include "serving/served_model.h"

#include <filesystem>

namespace tf {

std::vector<int32_t> model_stop_ids(const ModelConfig& config, const LoadedTokenizer& tokenizer) {
  std::vector<int32_t> eos = tokenizer.stop_ids;
  if (config.eos_id >= 0) eos.push_back(config.eos_id);
  if (config.format == "llama2c" && config.bos_id >= 0) eos.push_back(config.bos_id);
  return eos;
}

std::unique_ptr<ServedModel> load_served_model(const std::string& name, const std::string& path,
                                               const EngineConfig& engine_config,
                                               const std::string& explicit_tokenizer,
                                               kernels::WeightType weight_type) {
  const auto t0 = std::chrono::steady_clock::now();
  auto m = std::make_unique<ServedModel>();
  m->name = name;
  m->path = path;
  m->model = load_model(path, weight_type);
  m->tokenizer = load_tokenizer(path, m->config().vocab_size, explicit_tokenizer);
  m->eos_ids = model_stop_ids(m->config(), m->tokenizer);
  m->engine = std::make_unique<Engine>(*m->model, m->tok(), m->eos_ids, engine_config);
  m->load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m->created = std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
  return m;
}

std::string default_served_name(const std::string& path) {
  std::filesystem::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // trailing '/'
  if (std::filesystem::is_directory(p)) return p.filename().string();
  return p.stem().string();
}

}  // namespace tf
