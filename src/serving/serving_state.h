#pragma once
// What every route of one server shares: the models it serves (the registry issue replaces this
// list with versions and labels), the generation jobs in flight, and the server-wide limits.

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "serving/generation_job.h"
#include "serving/served_model.h"

namespace tf {

struct ServingLimits {
  std::chrono::milliseconds max_step_time{30000};  // a step longer than this: not ready
};

struct ServingState {
  std::vector<std::unique_ptr<ServedModel>> models;  // the first is the default
  JobRegistry jobs;
  ServingLimits limits;
  std::atomic<bool> draining{false};

  // The model of that name; "" (a request that names none) is the default one. nullptr if none.
  ServedModel* find(const std::string& name) const {
    if (models.empty()) return nullptr;
    if (name.empty()) return models.front().get();
    for (const auto& m : models) {
      if (m->name == name) return m.get();
    }
    return nullptr;
  }
};

}  // namespace tf
