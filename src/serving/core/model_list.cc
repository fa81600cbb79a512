#include "serving/core/model_list.h"

#include <fmt/format.h>

namespace tf {

using json = nlohmann::json;

json model_object_json(const ServedModel& m, const std::string& id, const std::string& parent) {
  return {{"id", id.empty() ? m.name : id},
          {"object", "model"},
          {"created", m.created},
          {"owned_by", "tokenflow"},
          {"root", m.path},
          {"parent", parent.empty() ? json() : json(parent)},
          {"version", m.version},
          {"max_model_len", m.config().max_seq_len}};
}

json model_list_json(const ServingState& state, const KeyPolicy* key) {
  // Each model by name (the version a request naming only it would get), then, where a model
  // has several versions or labels, each as "name:version" and "name@label" with the name as
  // parent.
  json data = json::array();
  const auto available = state.registry.available();
  for (const std::string& name : state.registry.names()) {
    if (key && !key->allows(name)) continue;             // a key sees only the models it may use
    std::vector<std::shared_ptr<ServedModel>> versions;  // ascending: the latest is last
    for (const auto& m : available)
      if (m->name == name) versions.push_back(m);
    if (versions.empty()) continue;
    data.push_back(model_object_json(*versions.back()));
    if (versions.size() > 1) {
      for (const auto& m : versions)
        data.push_back(model_object_json(*m, fmt::format("{}:{}", name, m->version), name));
    }
    for (const auto& [label, v] : state.registry.labels(name)) {
      if (auto m = state.registry.resolve({name, v, {}}))
        data.push_back(model_object_json(*m, fmt::format("{}@{}", name, label), name));
    }
  }
  // LoRA adapters, their base as parent (vLLM's listing), where the base is available.
  for (const LoraSpec& l : state.registry.loras().list()) {
    if (key && !key->allows(l.name)) continue;
    for (const auto& m : available) {
      if (m->name != l.base) continue;
      json o = model_object_json(*m, l.name, l.base);
      o["root"] = l.path;
      data.push_back(std::move(o));
      break;
    }
  }
  return {{"object", "list"}, {"data", data}};
}

}  // namespace tf
