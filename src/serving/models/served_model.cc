#include "serving/models/served_model.h"

#include <algorithm>
#include <filesystem>

#include "model/tf_weights.h"
#include "serving/models/model_tasks.h"

namespace tf {

std::unique_ptr<ServedModel> load_served_model(const std::string& name, const std::string& path,
                                               const EngineConfig& engine_config,
                                               const std::string& explicit_tokenizer,
                                               kernels::WeightType weight_type) {
  const auto t0 = std::chrono::steady_clock::now();
  auto m = std::make_unique<ServedModel>();
  m->name = name;
  m->path = path;
  m->load(path, explicit_tokenizer, weight_type);
  m->generate = load_generate_signature(path);
  if (is_saved_model_dir(path)) {
    // A SavedModel export of generate(): its serving_default's one output names the answer.
    for (const SavedModelSignature& sig : read_saved_model_signatures(path)) {
      if (sig.name == m->generate.name && sig.outputs.size() == 1 &&
          std::find(sig.inputs.begin(), sig.inputs.end(), "input_ids") != sig.inputs.end())
        m->generate.output = sig.outputs[0];
    }
  }
  m->tasks = default_tasks(m->config());
  m->start_engine(engine_config);
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

std::shared_ptr<const LoraAdapter> ServedModel::lora(const std::string& path) const {
  std::lock_guard lock(lora_mu_);  // (one load at a time: adapters are small)
  for (auto it = loras_.begin(); it != loras_.end(); ++it) {
    if (it->first == path) {
      loras_.splice(loras_.begin(), loras_, it);
      return loras_.front().second;
    }
  }
  auto adapter = LoraAdapter::load(path, *model);
  ++lora_loads_;
  loras_.emplace_front(path, adapter);
  // Past the limit: the least recently used that no request holds (the cache's own reference
  // is its only one) make room; adapters in use stay until their requests end.
  for (auto it = loras_.end();
       max_loras > 0 && loras_.size() > max_loras && it != loras_.begin();) {
    --it;
    if (it != loras_.begin() && it->second.use_count() == 1) {
      it = loras_.erase(it);
      ++lora_evictions_;
    }
  }
  return adapter;
}

void ServedModel::drop_lora(const std::string& path) const {
  std::lock_guard lock(lora_mu_);
  loras_.remove_if([&](const auto& e) { return e.first == path; });
}

ServedModel::LoraCounts ServedModel::lora_counts() const {
  std::lock_guard lock(lora_mu_);
  LoraCounts c;
  c.resident = static_cast<int64_t>(loras_.size());
  c.loads = lora_loads_;
  c.evictions = lora_evictions_;
  for (const auto& [path, a] : loras_) c.bytes += static_cast<int64_t>(a->bytes());
  return c;
}

}  // namespace tf
