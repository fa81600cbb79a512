#pragma once
// The thread that keeps a ModelRegistry in step with the world: it re-reads the model config
// file every --model_config_file_poll_wait_seconds (applied when its text changed), rescans the
// base paths every --file_system_poll_wait_seconds, applies reload requests (the admin route,
// gRPC's HandleReloadConfigRequest), and releases unloading versions as their last requests end.
// A config that fails to parse or validate changes nothing: the error goes to the log and to the
// reload's caller, and the server keeps serving what it had.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "serving/models/model_registry.h"

namespace tf {

class VersionManager {
 public:
  struct Options {
    std::string config_file;        // empty: the entries given to start() only
    double config_poll_s = 0;       // <= 0: read at start and on reload only
    double file_system_poll_s = 1;  // <= 0: scan at start and on reload only
  };
  // Called with "" when a reload is applied and synced, else with the reason it was refused.
  using Done = std::function<void(const std::string& error)>;

  VersionManager(ModelRegistry& registry, Options options);
  ~VersionManager();
  VersionManager(const VersionManager&) = delete;
  VersionManager& operator=(const VersionManager&) = delete;

  // Applies the config file (or, without one, these entries), loads the first versions on this
  // thread, and starts the manager thread. Throws Error on a bad config file.
  void start(std::vector<ModelEntryConfig> entries);
  // Queues a reload: config, or the config file when nullopt (an error without one). done runs on
  // the manager thread once the new state is synced.
  void reload(std::optional<tfs::ModelServerConfig> config, Done done);
  void stop();

 private:
  void loop();
  // Re-reads the file; applies it if its text changed (or force). Throws on a bad file.
  void apply_file(bool force);

  ModelRegistry& registry_;
  Options options_;
  std::string last_text_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::pair<std::optional<tfs::ModelServerConfig>, Done>> pending_;
  std::thread thread_;
};

}  // namespace tf
