#pragma once
// What every route of one server shares: the model registry (models, versions, labels), the
// generation jobs in flight, the server-wide limits, and the way to ask for a config reload.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "serving/generation_job.h"
#include "serving/metrics.h"
#include "serving/model_registry.h"

namespace tf {

struct ServingLimits {
  std::chrono::milliseconds max_step_time{30000};  // a step longer than this: not ready
};

struct ServingState {
  explicit ServingState(ModelRegistry::Loader loader, ModelRegistry::Options options = {})
      : registry(std::move(loader), std::move(options)) {}

  ModelRegistry registry;
  JobRegistry jobs;
  ServerMetrics metrics;
  std::unique_ptr<AccessLog> access_log;  // nullptr: requests go to the debug log only
  ServingLimits limits;
  std::atomic<bool> draining{false};
  // Reloads the config (nullopt: the config file) and calls done with "" once the new state is
  // loaded, or with the reason it was refused. Unset: the server takes no reloads.
  std::function<void(std::optional<tfs::ModelServerConfig>,
                     std::function<void(const std::string&)>)>
      reload;
};

}  // namespace tf
