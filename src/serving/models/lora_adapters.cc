#include "serving/models/lora_adapters.h"

#include <algorithm>

#include "core/error.h"

namespace tf {

LoraSpec parse_lora_flag(const std::string& value, const std::string& default_base,
                         const std::vector<std::string>& models) {
  const size_t eq = value.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == value.size())
    fail("--lora {}: expected NAME=PATH or NAME=MODEL:PATH", value);
  LoraSpec s;
  s.name = value.substr(0, eq);
  s.path = value.substr(eq + 1);
  s.base = default_base;
  if (const size_t colon = s.path.find(':'); colon != std::string::npos) {
    const std::string model = s.path.substr(0, colon);
    if (std::find(models.begin(), models.end(), model) != models.end()) {
      s.base = model;
      s.path = s.path.substr(colon + 1);
    }
  }
  if (s.base.empty()) fail("--lora {}: no --model before it to apply it to", value);
  if (std::find(models.begin(), models.end(), s.name) != models.end())
    fail("--lora {}: '{}' is the name of a model", value, s.name);
  return s;
}

void LoraAdapters::add(LoraSpec spec) {
  std::lock_guard lock(mu_);
  if (specs_.count(spec.name))
    fail(ErrorKind::kInvalidArgument, "a LoRA adapter named '{}' is already loaded", spec.name);
  const std::string name = spec.name;
  specs_.emplace(name, std::move(spec));
}

void LoraAdapters::set_from_config(const std::vector<LoraSpec>& specs) {
  std::lock_guard lock(mu_);
  std::map<std::string, LoraSpec> next;
  for (const auto& [name, s] : specs_)
    if (!s.from_config) next.emplace(name, s);
  for (LoraSpec s : specs) {
    s.from_config = true;
    if (next.count(s.name))
      fail("a LoRA adapter named '{}' is configured twice (or also given by --lora or loaded)",
           s.name);
    const std::string name = s.name;
    next.emplace(name, std::move(s));
  }
  specs_ = std::move(next);
}

bool LoraAdapters::remove(const std::string& name) {
  std::lock_guard lock(mu_);
  return specs_.erase(name) > 0;
}

std::optional<LoraSpec> LoraAdapters::find(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = specs_.find(name);
  if (it == specs_.end()) return std::nullopt;
  return it->second;
}

std::vector<LoraSpec> LoraAdapters::list() const {
  std::lock_guard lock(mu_);
  std::vector<LoraSpec> out;
  for (const auto& [name, s] : specs_) out.push_back(s);
  return out;
}

}  // namespace tf
