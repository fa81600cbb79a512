#pragma once
// The models and versions a server runs, in the spirit of TF Serving's aspired versions: the
// config (server_config.h) says which models exist and which of the integer-named version
// directories under each base path should be served; sync() makes it so, one pass at a time
// (the serve command's manager thread calls it every --file_system_poll_wait_seconds and after
// a reload). A new version is loaded and AVAILABLE before an old one leaves routing, and an old
// one only goes (UNLOADING, then END) when the last request holding it has finished: requests
// hold their version through a shared_ptr. A version that fails to load, or would exceed the
// memory budget, shows its error in status() while every other version serves.
//
// Requests address a model by name (the latest available version, or the traffic split), by
// name and version, or by name and label (see parse_model_field for the "model" string syntax).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serving/models/lora_adapters.h"
#include "serving/models/served_model.h"
#include "serving/models/server_config.h"

namespace tf {

// TF Serving's ManagerState numbers.
enum class VersionState : int {
  kUnknown = 0,
  kStart = 10,
  kLoading = 20,
  kAvailable = 30,
  kUnloading = 40,
  kEnd = 50
};
const char* version_state_name(VersionState s);  // "START", "AVAILABLE", ...

struct VersionStatus {
  int64_t version = 0;
  VersionState state = VersionState::kUnknown;
  std::string error;  // empty: OK
};

// Which version a request wants.
struct ModelRequestSpec {
  std::string name;
  std::optional<int64_t> version;
  std::optional<std::string> label;
};

class ModelRegistry {
 public:
  // Loads one version (name, version number, its directory or file) under its model's config
  // (per-model settings: the generate signature, batching); throws on failure.
  using Loader = std::function<std::shared_ptr<ServedModel>(
      const std::string&, int64_t, const std::string&, const tfs::ModelConfig&)>;
  struct Options {
    int64_t memory_budget = 0;  // bytes; 0: none
    // Bytes a version at this path would occupy once loaded (0: unknown), checked before loading.
    std::function<int64_t(const std::string& path)> estimate;
    // Bytes a loaded version occupies, checked after loading (the estimate can be low).
    std::function<int64_t(const ServedModel&)> measure;
  };

  explicit ModelRegistry(Loader loader);
  ModelRegistry(Loader loader, Options options);
  ~ModelRegistry();
  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  // Makes these models the desired state (models no longer listed are unloaded by the next
  // sync, after their requests finish). Checks what a config cannot check alone (the entries
  // come validated); throws Error and changes nothing on a problem.
  void apply(std::vector<ModelEntryConfig> models);
  // One pass of the version manager: scans base paths, loads what the policies aspire to, moves
  // labels, takes unwanted versions out of routing and releases those no request holds. Loads
  // run without the registry's lock, so requests are served meanwhile. One pass at a time.
  void sync();
  // Only the last step of sync: releases the unloading versions no request holds any more.
  void reap();

  // The version a request gets, nullptr when none is available. A traffic split sends one
  // sticky key (the OpenAI "user", else the split's sticky_header) to one route; without one a
  // route is drawn at random.
  // Header lookup for the split's sticky_header (returns "" when absent).
  using HeaderFn = std::function<std::string(const std::string&)>;
  std::shared_ptr<ServedModel> resolve(const ModelRequestSpec& spec, std::string_view user = {},
                                       const HeaderFn& header = nullptr) const;
  // Why resolve found nothing, for the error message ("model 'x' has no version 3", ...).
  std::string unavailable_reason(const ModelRequestSpec& spec) const;
  // An OpenAI "model" string: a configured name as it is (names may contain '/'), else
  // "name:version" or "name@label"; "" is the first configured model.
  ModelRequestSpec parse_model_field(const std::string& field) const;

  // Every version of a model the manager knows (ascending), with states and errors; nullopt
  // for an unknown model.
  std::optional<std::vector<VersionStatus>> status(const std::string& name) const;
  // Model-level problems (platform, missing base path, no versions, label targets): "" if none.
  std::string model_error(const std::string& name) const;
  // Configured names, in config order.
  std::vector<std::string> names() const;
  // Every AVAILABLE version of every model (listing, readiness, stats).
  std::vector<std::shared_ptr<ServedModel>> available() const;
  // Effective labels of a model (label -> version), only to AVAILABLE versions.
  std::map<std::string, int64_t> labels(const std::string& name) const;
  // The LoRA adapters requests may name: the config's lora blocks (set by apply), --lora's and
  // those loaded at run time.
  LoraAdapters& loras() { return loras_; }
  const LoraAdapters& loras() const { return loras_; }
  // Bytes the loaded versions occupy (by Options::measure).
  int64_t memory_in_use() const;
  // Loads refused for memory, by (model, reason): "model_load_memory_budget" (the budget) or
  // "allocation_failure" (std::bad_alloc while loading).
  std::map<std::pair<std::string, std::string>, int64_t> load_ooms() const;

 private:
  LoraAdapters loras_;
  struct Slot {
    std::string path;
    VersionState state = VersionState::kStart;
    std::string error;
    std::shared_ptr<ServedModel> model;  // AVAILABLE and UNLOADING
    int64_t bytes = 0;
    bool failed = false;  // not retried until the config is applied again
  };
  struct Entry {
    ModelEntryConfig cfg;
    bool configured = true;  // false: removed from the config, unloading
    std::map<int64_t, Slot> versions;
    std::map<std::string, int64_t> labels;
    std::string error;
  };

  std::vector<std::pair<int64_t, std::string>> aspired(const Entry& e, std::string& error) const;
  std::shared_ptr<ServedModel> pick_default(const Entry& e, std::string_view sticky_key) const;
  int64_t memory_locked() const;
  void release_locked(std::vector<std::shared_ptr<ServedModel>>& released);
  // Destroys released versions (outside the lock) and returns their memory to the system.
  static void drop(std::vector<std::shared_ptr<ServedModel>>& released);

  Loader loader_;
  Options options_;
  mutable std::mutex mu_;  // models_, order_, load_ooms_
  std::map<std::pair<std::string, std::string>, int64_t> load_ooms_;
  std::mutex sync_mu_;  // one sync at a time
  std::map<std::string, Entry> models_;
  std::vector<std::string> order_;
};

}  // namespace tf
